"""The suite's report: the line printed per row, the summary with the issue's goals, and
the markdown file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpu.settings import END_TO_END_GOALS, ENVS, HIDDENS, Sizes

if TYPE_CHECKING:
    from gpu.suite import Suite


def _si(x: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.2f}{suffix}"
    return f"{x:.0f}"


def row_line(row: dict[str, Any]) -> str:
    """The line printed for a row as it is recorded."""
    head = f"[{row['part']}] {row['env']} {row['algorithm']} {row['mode']} B={row['num_envs']}"
    if "skipped" in row:
        return f"{head}: {'ERROR' if row.get('error') else 'skipped'}: {row['skipped']}"
    if row["part"] == "throughput":
        return (f"{head}: collect {_si(row['collect_steps_per_s'])}/s, update {_si(row['update_samples_per_s'])}/s, "
                f"end to end {_si(row['end_to_end_steps_per_s'])}/s, step {row['step_ms']:.1f} ms")
    if row["part"] == "solve":
        return (f"{head}: {'solved' if row['solved'] else 'not solved'} in {row['seconds']:.1f} s, "
                f"{row['env_steps']:,} env steps (best {row['best']:.1f})")
    if row["part"] == "graphed_vs_eager":
        return f"{head}: equal {row['equal']} (sampling {row['equal_sampling']}, deterministic {row['equal_deterministic']})"
    if row["part"] == "gpu_tests":
        return f"{head}: {tests_line(row)}"
    if row["part"] == "rl8":
        return f"{head}: rlx/rl8 end to end " + ", ".join(f"{k[6:]} {v:.2f}x" for k, v in row.items() if k.startswith("ratio_"))
    if row["part"] == "vs_jax":
        return f"{head}: exit {row['returncode']}; " + ", ".join(
            f"B={r['num_envs']} mb={r['minibatches']} {r['side']} {r['vs_jax']:.2f}x" for r in row["rows"] if r["side"] != "jax")
    return f"{head}: ok"


def tests_line(row: dict[str, Any]) -> str:
    """The pytest part's counts, in words."""
    if row["mode"] == "collect-only":
        return f"collected {row['collected']} tests ({row['gpu_collected']} gpu-marked) in {len(row['modules'])} modules"
    line = (f"gpu-marked {row['gpu_passed']} passed, {row['gpu_failed']} failed, {row['gpu_skipped']} skipped, "
            f"{row['gpu_error']} errors; others {row['other_passed']} passed, {row['other_failed']} failed, "
            f"{row['other_skipped']} skipped, {row['other_error']} errors ({row['seconds']:.0f} s")
    line += f", stopped at the time limit with {row['not_finished']} not finished)" if row["timed_out"] else ")"
    if row["failures"]:
        line += "; failed: " + " ".join(row["failures"][:3]) + (" ..." if len(row["failures"]) > 3 else "")
    return line


def _find(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    for row in rows:
        if "skipped" not in row and all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def goal_lines(rows: list[dict[str, Any]], sizes: Sizes, dry_run: bool) -> list[str]:
    """The issue's comparisons, for the rows that exist: CartPole PPO end to end against
    :data:`END_TO_END_GOALS`, the graphed collect's speedup over eager, NPG's step time
    over PPO's at the largest B. In a dry run the smallest and largest B stand in for
    4096 and 65536 (the ratios then mean nothing)."""
    large, small = sizes.num_envs[-1], sizes.num_envs[0]
    stand_in = {65536: large, 4096: small}
    lines = []
    if dry_run:
        lines.append(f"(dry run: B={large} stands in for 65536 and B={small} for 4096; the ratios mean nothing)")
    for goal_b, goal in END_TO_END_GOALS.items():
        b = stand_in[goal_b]
        for algorithm in ("ppo", "ppo_4mb"):
            found = [r for r in (_find(rows, part="throughput", env="CartPole", algorithm=algorithm, mode=m, num_envs=b)
                                 for m in ("eager", "cudagraphs", "compile")) if r]
            if not found:
                lines.append(f"CartPole {algorithm} end to end at B={b}: no measured rows")
                continue
            best = max(found, key=lambda r: r["end_to_end_steps_per_s"])
            each = ", ".join(f"{r['mode']} {_si(r['end_to_end_steps_per_s'])}/s" for r in found)
            lines.append(f"CartPole {algorithm} end to end at B={b}: {each}; best "
                         f"{best['end_to_end_steps_per_s'] / goal:.3g}x the {_si(goal)}/s goal")
    for env in ENVS:
        parts = []
        for b in sizes.num_envs:
            eager = _find(rows, part="throughput", env=env, algorithm="ppo", mode="eager", num_envs=b)
            graphed = _find(rows, part="throughput", env=env, algorithm="ppo", mode="cudagraphs", num_envs=b)
            if eager and graphed:
                parts.append(f"B={b} {graphed['collect_steps_per_s'] / eager['collect_steps_per_s']:.2f}x "
                             f"(end to end {graphed['end_to_end_steps_per_s'] / eager['end_to_end_steps_per_s']:.2f}x)")
        lines.append(f"{env} graphed collect / eager: " + ("; ".join(parts) if parts else "no graphed rows"))
    for env in ENVS:
        npg = _find(rows, part="throughput", env=env, algorithm="npg", mode="eager", num_envs=large)
        ppos = [r for r in (_find(rows, part="throughput", env=env, algorithm="ppo", mode=m, num_envs=large)
                            for m in ("eager", "cudagraphs")) if r]
        if npg and ppos:
            each = ", ".join(f"{npg['step_ms'] / p['step_ms']:.2f}x PPO {p['mode']} ({p['step_ms']:.1f} ms)" for p in ppos)
            lines.append(f"{env} NPG step at B={large}: {npg['step_ms']:.1f} ms = {each}")
        else:
            lines.append(f"{env} NPG step / PPO step at B={large}: no measured rows")
    return lines


def summary_lines(suite: Suite) -> list[str]:
    """What the run printed last: row counts, tests, the check, solve times and the goals."""
    rows = suite.rows
    errors = sum(1 for r in rows if r.get("error"))
    skipped = sum(1 for r in rows if "skipped" in r) - errors
    lines = [f"{len(rows)} rows: {len(rows) - skipped - errors} measured, {skipped} skipped, {errors} errors, "
             f"in {suite.elapsed():.0f} s of a {suite.budget_s:.0f} s budget"]
    tests = next((r for r in rows if r["part"] == "gpu_tests"), None)
    if tests is not None:
        lines.append("gpu tests: " + (f"skipped: {tests['skipped']}" if "skipped" in tests else tests_line(tests)))
    check = next((r for r in rows if r["part"] == "graphed_vs_eager"), None)
    if check is not None:
        lines.append("graphed collect == eager: " + (
            f"skipped: {check['skipped']}" if "skipped" in check else
            f"{check['equal']} (sampling {check['equal_sampling']}, deterministic {check['equal_deterministic']}"
            f"{', mismatched ' + ' '.join(check['mismatched']) if check['mismatched'] else ''})"))
    solves = [r for r in rows if r["part"] == "solve" and "skipped" not in r]
    if solves:
        lines.append("solve: " + "; ".join(
            f"{r['env']} {r['algorithm']} {r['mode']} "
            + (f"{r['seconds']:.1f} s, {r['env_steps']:,} steps" if r["solved"]
               else f"not solved ({r['env_steps']:,} steps, best {r['best']:.1f})")
            for r in solves))
    lines += goal_lines(rows, suite.sizes, suite.dry_run)
    return lines


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value).replace("|", "/")


def markdown(suite: Suite, argv: list[str]) -> str:
    """This run's report: summary, then one table per part, then the skipped rows."""
    rows, m = suite.rows, suite.meta
    s = suite.sizes
    pre = next((r for r in rows if r["part"] == "preflight"), {})
    out = [
        f"# rlx GPU suite on {m['device']} ({suite.device}){' — dry run' if suite.dry_run else ''}",
        "",
        f"{m['date']}, commit {m['commit']}, torch {m['torch']}, CUDA {pre.get('cuda')}, "
        f"Python {pre.get('python')}; {suite.elapsed():.0f} s of a {suite.budget_s:.0f} s budget.",
        f"Command: `{' '.join(['python benchmarks/gpu_suite.py', *argv])}`",
        "",
        "## Summary",
        "",
        *[f"- {line}" for line in summary_lines(suite)],
        "",
    ]
    if pre:
        out += ["## Preflight", "", "| item | value |", "|---|---|"]
        for key in ("python", "cuda", "cudnn", "cuda_available", "gpus", "capability", "memory_gb", "threads", "cpu",
                    "rlx_path", "rlx_is_this_checkout"):
            if key in pre:
                out.append(f"| {key} | {_cell(pre[key])} |")
        packages = ", ".join(f"{name} {version or 'MISSING'}" for name, version in pre["packages"].items())
        out.append(f"| packages | {packages} |")
        out.append("")
    done = [r for r in rows if "skipped" not in r]
    tests = [r for r in done if r["part"] == "gpu_tests"]
    if tests:
        out += ["## GPU tests", ""] + [f"- {tests_line(r)}; `{r['command']}` exited {r['returncode']}" for r in tests]
        out += [f"- failed: `{node}`" for r in tests for node in r["failures"]] + [""]
    checks = [r for r in done if r["part"] == "graphed_vs_eager"]
    if checks:
        out += ["## Graphed collect against eager, from the same states", "",
                "| env | B | T | rounds per mode | sampling equal | deterministic equal | mismatched |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {r['env']} | {r['num_envs']} | {r['horizon']} | {r['rounds']} | {r['equal_sampling']} | "
                f"{r['equal_deterministic']} | {' '.join(r['mismatched']) or '-'} |" for r in checks] + [""]
    tp = [r for r in done if r["part"] == "throughput"]
    if tp:
        out += [f"## Throughput (T={s.horizon}, MLP {HIDDENS} tanh; medians of {s.iters} after {s.warmup} warm-ups, "
                "graphed PPO after at least 3)", "",
                "| env | algorithm | mode | B | collect steps/s | update samples/s | end-to-end steps/s | step ms | peak MB |",
                "|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {r['env']} | {r['algorithm']} | {r['mode']} | {r['num_envs']} | {r['collect_steps_per_s']:,.0f} | "
                f"{r['update_samples_per_s']:,.0f} | {r['end_to_end_steps_per_s']:,.0f} | {r['step_ms']:,.1f} | "
                f"{r['peak_memory_mb']:,.0f} |" for r in tp] + [""]
    solves = [r for r in done if r["part"] == "solve"]
    if solves:
        out += [f"## Time to solve (B={s.solve_num_envs}, T={s.horizon}; training time only)", "",
                "| env | algorithm | mode | solved | seconds | env steps | collects | best | goal |",
                "|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {r['env']} | {r['algorithm']} | {r['mode']} | {r['solved']} | {r['seconds']:.1f} | "
                f"{r['env_steps']:,} | {r['iterations']} | {r['best']:.1f} | {r['metric']} >= {r['goal']:g} |"
                for r in solves] + [""]
    rl8_rows = [r for r in done if r["part"] == "rl8"]
    if rl8_rows:
        out += ["## rl8 side by side (rl8's DiscreteDummyEnv and defaults; end-to-end env steps/s)", "",
                "| B | rl8 | rlx eager (ratio) | rlx cudagraphs (ratio) |", "|---|---|---|---|"]
        for r in rl8_rows:
            graphed = (f"{r['rlx_cudagraphs_end_to_end_steps_per_s']:,.0f} ({r['ratio_cudagraphs']:.2f}x)"
                       if "ratio_cudagraphs" in r else "-")
            out.append(f"| {r['num_envs']} | {r['rl8_end_to_end_steps_per_s']:,.0f} | "
                       f"{r['rlx_eager_end_to_end_steps_per_s']:,.0f} ({r['ratio_eager']:.2f}x) | {graphed} |")
        out.append("")
    skipped = [r for r in rows if "skipped" in r]
    if skipped:
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for r in skipped:
            groups.setdefault((r["part"], r["algorithm"], r["mode"], r["skipped"]), []).append(r)
        out += ["## Skipped", "", "| part | env | algorithm | mode | B | reason |", "|---|---|---|---|---|---|"]
        for (part, algorithm, mode, reason), group in groups.items():
            envs = ", ".join(dict.fromkeys(r["env"] for r in group))
            sizes = ", ".join(dict.fromkeys(str(r["num_envs"]) for r in group))
            flag = "ERROR: " if group[0].get("error") else ""
            out.append(f"| {part} | {envs} | {algorithm} | {mode} | {sizes} | {flag}{_cell(reason)} |")
        out.append("")
    return "\n".join(out)
