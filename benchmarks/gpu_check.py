"""The one command run whenever an H100 is available: rlx's GPU tests and the measurements #42 asks for.

    python benchmarks/gpu_check.py --out DIR [--budget-s 420]
    python benchmarks/gpu_check.py --dry-run --out DIR    # every part at tiny sizes on the CPU

No network. Each part runs in a subprocess of its own under its own time limit, so a
part that fails, hangs or runs out of memory costs its limit and no more (a dry run
runs the parts in one subprocess, each still reported on its own); the limits
add up to at most ``--budget-s`` (default 420 s: 7 minutes, compile caches empty), and
a part whose limit no longer fits is skipped by name. The parts, in priority order:

1. ``gpu_tests``: ``pytest -m gpu tests/`` (the tests that need CUDA; four processes
   where pytest-xdist is installed), pass/fail counts and the failures' names; its log is
   written as it runs.
2. ``vs_jax``: :func:`vs_jax.run` at B = 4096, 65536 and 262144, 4 minibatches, the
   whole-program JAX PPO timed warm (called once, then timed), then rlx's modes, each on
   its own (one that fails is a row naming its error), in the priority order of
   :data:`VS_JAX`: ``compile+cudagraphs-step`` and ``cudagraphs-step`` (``-step``:
   step()'s whole device work one graph, ``cudagraphs_scope="step"``, the default; else a
   graph per minibatch update) first, ``compile+cudagraphs-step+combo`` (inductor's
   ``combo_kernels``: fewer, wider kernels) at B = 4096, then ``compile+cudagraphs``,
   ``cudagraphs``, ``compile+cudagraphs-step+amp`` (bf16 autocast: a row of its own, not
   JAX's arithmetic) and ``eager``; rlx alone when JAX is not installed.
3. ``profile``: one ``collect()`` and one ``step()`` profiled at B = 4096 and 65536 in
   the fastest modes (``compile+cudagraphs-step`` and ``cudagraphs-step``, then the first
   with ``+combo`` at B = 4096: :data:`PROFILE`): wall ms, GPU-busy ms, kernel count and the
   10 costliest kernels of each phase; then 3 iterations as a training loop runs them
   (:func:`gpu_timeline.iteration_timeline`): the host's waits at the two transfers, its
   own time, the device's idle time and its longest idle gaps with the kernels around them.
4. ``members``: 64 members x 1024 envs against one member of 1024 envs and one run of
   65536 envs (``cudagraphs``, 4 minibatches), env steps/s, and a step of the members and
   of the one run profiled (the same rows: where the members' extra time goes).
5. ``npg``: NPG's ``step()``, eager and graphed (``NPGConfig.cudagraphs``, its whole step
   one graph), against PPO's graphed ``step()`` at B = 65536 (T = 32, 64x64 tanh; ``rlx
   bench``'s ``npg``, ``npg_4mb`` and ``ppo_4mb``, :func:`rlx.run.bench.bench_one`):
   medians of 5 after 4 warm-ups, each phase timed alone, their ratios (#42 asks for
   NPG's <= PPO's), and the graphed ``npg_4mb`` step profiled.
6. ``rsl_rl``: rsl_rl's ``OnPolicyRunner`` against :class:`rlx.runners.OnPolicyRunner`
   at Isaac Lab's scale (4096 envs x 24 steps, [512, 256, 128] ELU, 5 epochs x 4
   minibatches, an asymmetric critic) on :class:`rlx.examples.windy_reach.WindyReach`,
   when rsl_rl imports; a skip row otherwise.

It prints one summary and writes at most 6 files to ``--out``: ``summary.md`` (what it
printed), ``results.jsonl`` (every row, each naming its device and matmul precision),
``gpu_tests.log``, ``parts.log`` (each part's stderr tail). ``tests/test_gpu_check.py``
dry-runs it on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from gpu_timeline import iteration_timeline  # noqa: E402

#: Each part's time limit (seconds) on a GPU, and on the CPU with ``--dry-run``.
#: On an H100 (2026-11-27, from empty caches where it says so): the GPU tests 139 s in one
#: process, vs_jax past 150 s (B = 262144 unfinished), profile 28 s, members 14 s, npg 23
#: s, rsl_rl 40 s (its compiled side failing early). Together at most 420 s, 7 minutes.
LIMITS = {"gpu_tests": (120, 60), "vs_jax": (155, 90), "profile": (40, 60), "members": (25, 60), "npg": (40, 60),
          "rsl_rl": (40, 60)}
#: The files written to ``--out``.
FILES = ("summary.md", "results.jsonl", "gpu_tests.log", "parts.log")


def _device(dry_run: bool) -> str:
    return "cpu" if dry_run else "cuda"


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _precision(device: str) -> str:
    import torch

    return "tf32" if device == "cuda" and torch.backends.cuda.matmul.allow_tf32 else "float32"


def _emit(row: dict) -> None:
    """A result row, on stdout for the parent to collect."""
    print("ROW " + json.dumps(row), flush=True)


# -- the parts (each runs in its own subprocess) ------------------------------------------------


def part_gpu_tests(dry_run: bool, out: Path) -> None:
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", "-m", "gpu"]
    # On the CPU every gpu test skips: the dry run collects those of tests/test_gpu.py and
    # runs none (collecting the whole suite, as the GPU run does, costs 15 s here).
    args += ["tests/test_gpu.py", "--collect-only"] if dry_run else ["tests/"] + _workers()
    log = out / "gpu_tests.log"
    with open(log, "w") as f:  # written as pytest goes: a run stopped at the part's limit keeps its log
        done = subprocess.run(args, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, text=True)
    lines = log.read_text().splitlines()
    last = (lines or [""])[-1]
    failed = [line.split(" ", 1)[1].split(" - ")[0] for line in lines if line.startswith(("FAILED ", "ERROR "))]
    _emit({"part": "gpu_tests", "summary": last.strip("= "), "failed": failed, "returncode": done.returncode})


def _workers() -> list[str]:
    """pytest-xdist's workers for the GPU run where it is installed: 59 GPU tests took 139 s
    in one process on an H100 (2026-11-27), most of it compiling, past the part's limit
    from empty caches; four processes share the GPU (the tests check values, not times)."""
    import importlib.util

    return ["-n", "4"] if importlib.util.find_spec("xdist") else []


#: vs_jax's (size, modes) in the order they run, which is their priority: the part's
#: limit cuts the last ones (each compiled mode compiles for about 35 s from an empty
#: cache on an H100; on 2026-11-27 B = 262144 never started).
VS_JAX = [(4096, ["compile+cudagraphs-step", "cudagraphs-step", "compile+cudagraphs", "cudagraphs"]),
          (65536, ["compile+cudagraphs-step", "cudagraphs-step"]),
          (4096, ["compile+cudagraphs-step+combo"]),
          (65536, ["compile+cudagraphs", "cudagraphs", "compile+cudagraphs-step+amp", "eager"]),
          (4096, ["compile+cudagraphs-step+amp", "eager"]),
          (262144, ["compile+cudagraphs-step", "cudagraphs-step"])]
VS_JAX_DRY = [(64, ["eager"])]


def part_vs_jax(dry_run: bool, out: Path) -> None:
    """JAX once per size, then each rlx mode on its own (:data:`VS_JAX`, in priority
    order): a mode that fails is a row naming its error, and the modes after it still run
    (on 2026-11-27 one failing compiled mode took the size's finished rows with it). The
    part's limit cuts the last rows, so the ones that matter most run first."""
    import math

    import vs_jax

    try:
        import jax_ppo  # noqa: F401 (JAX, flax and optax)
        jax_side = True
    except ImportError:
        jax_side = False
    device = _device(dry_run)
    iterations = 2 if dry_run else 0
    jax_rates: dict[int, float] = {}
    for B, modes in VS_JAX_DRY if dry_run else VS_JAX:
        if B not in jax_rates:  # JAX once per size, before its first rlx mode
            jax_rates[B] = math.nan
            if jax_side:
                (row,) = vs_jax.run(device, [B], [4], [], iterations=iterations, rounds=1)
                jax_rates[B] = row["steps_per_s"]
                _emit({"part": "vs_jax", **row, "jax": "warm"})
        jax_rate = jax_rates[B]
        for mode in modes:
            try:
                (row,) = vs_jax.run(device, [B], [4], [mode], iterations=iterations, rounds=1, jax_side=False)
            except Exception as e:  # noqa: BLE001 (reported as the mode's row; the next mode runs)
                _emit({"part": "vs_jax", "side": mode, "num_envs": B, "error": f"{type(e).__name__}: {e}"[:300]})
                continue
            _emit({"part": "vs_jax", **row, "vs_jax": round(row["steps_per_s"] / jax_rate, 3),
                   "jax": "warm" if jax_side else "not installed"})


def _algo(B: int, device: str, mode: str, num_seeds: int = 1):
    from ppo_settings import PPOSettings

    return PPOSettings(num_envs=B, horizon=32, minibatches=4).rlx_config(
        device, compile="compile" in mode, cudagraphs="cudagraphs" in mode, num_seeds=num_seeds,
        cudagraphs_scope="step" if "-step" in mode else "minibatch")


def _profile_phase(fn, device: str) -> dict:
    """Wall ms, GPU-busy ms, kernel count and the 10 costliest kernels of one ``fn()``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    _sync(device)
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        fn()
        _sync(device)
    wall = time.perf_counter() - start
    kernels: dict[str, list[float]] = {}
    for evt in prof.events():
        if device == "cuda" and evt.device_type == torch.autograd.DeviceType.CUDA:
            kernels.setdefault(evt.name, []).append(evt.device_time_total * 1e-3)
    top = sorted(((k, sum(v), len(v)) for k, v in kernels.items()), key=lambda x: -x[1])[:10]
    return {"wall_ms": round(1e3 * wall, 3), "gpu_busy_ms": round(sum(sum(v) for v in kernels.values()), 3),
            "kernels": sum(len(v) for v in kernels.values()),
            "top_kernels": [{"name": k[:120], "ms": round(ms, 3), "calls": n} for k, ms, n in top]}


#: The profile part's (size, mode) in run order: the fastest modes, then the compiled step
#: graph with inductor's combo kernels at B = 4096 (its kernel count beside the plain one's).
PROFILE = [(4096, "compile+cudagraphs-step"), (4096, "cudagraphs-step"), (65536, "compile+cudagraphs-step"),
           (65536, "cudagraphs-step"), (4096, "compile+cudagraphs-step+combo")]
PROFILE_DRY = [(64, "eager")]


def part_profile(dry_run: bool, out: Path) -> None:
    from rlx.envs import CartPole

    import vs_jax

    device = _device(dry_run)
    for B, mode in PROFILE_DRY if dry_run else PROFILE:
        with vs_jax.combo_kernels("+combo" in mode):  # programs are made at build and first calls
            algo = _algo(B, device, mode).build(CartPole)
            for _ in range(_warmups()):  # compile, the graphs' warm-ups and captures
                algo.collect()
                algo.step()
        row = {"part": "profile", "device": device, "num_envs": B, "mode": mode, "precision": _precision(device)}
        row["collect"] = _profile_phase(algo.collect, device)
        row["step"] = _profile_phase(algo.step, device)
        row["iteration"] = iteration_timeline(algo, device)
        _emit(row)


def _warmups() -> int:
    """Iterations before any timing: collect's T loop and a step's graph are each called
    once an iteration, and captured at their call ``GRAPH_WARMUPS + 1``. (The 2026-11-26
    vs_jax run warmed up for 3 and timed 4 iterations at B = 4096: its first timed
    iteration captured collect's graph.)"""
    from rlx.core.cuda_graphs import GRAPH_WARMUPS

    return GRAPH_WARMUPS + 1


def _steps_per_s(algo, iters: int, device: str) -> float:
    for _ in range(_warmups()):
        algo.collect()
        algo.step()
    times = []
    for _ in range(iters):
        _sync(device)
        start = time.perf_counter()
        algo.collect()
        algo.step()
        _sync(device)
        times.append(time.perf_counter() - start)
    return algo.num_envs * algo.horizon / statistics.median(times)


def _step_profile(algo, device: str, warmups: int | None = None) -> dict:
    """One ``step()`` profiled after ``warmups`` iterations (default: past the graphs'
    captures): wall and GPU-busy ms, kernels, the costliest kernels (what sets a step's
    time apart from another's)."""
    for _ in range(_warmups() if warmups is None else warmups):
        algo.collect()
        algo.step()
    algo.collect()
    return _profile_phase(algo.step, device)


def part_members(dry_run: bool, out: Path) -> None:
    from rlx.envs import CartPole

    device = _device(dry_run)
    mode = "eager" if dry_run else "cudagraphs"
    per, many, one = (16, 4, 64) if dry_run else (1024, 64, 65536)
    rates = {}
    for name, B, S in [("one_member", per, 1), (f"{many}_members", per, many), ("one_run", one, 1)]:
        algo = _algo(B, device, mode, num_seeds=S).build(CartPole)
        rates[name] = _steps_per_s(algo, 3 if dry_run else 10, device)
        _emit({"part": "members", "device": device, "mode": mode, "precision": _precision(device), "setting": name,
               "num_envs_per_member": B, "members": S, "steps_per_s": round(rates[name])})
        if name != "one_member":  # the same rows, as members and as one run: where the step's time goes
            _emit({"part": "members", "setting": name, "step_profile": _step_profile(algo, device, warmups=0)})
    _emit({"part": "members", "summary": True, "members_over_one_run": round(rates[f"{many}_members"] / rates["one_run"], 3),
           "members_over_one_member": round(rates[f"{many}_members"] / rates["one_member"], 3)})


def part_npg(dry_run: bool, out: Path) -> None:
    """NPG's step against PPO's graphed one (``ppo_4mb``): ``npg`` regresses the critic in
    minibatches of 32768 samples (320 critic steps a step at B = 65536), ``npg_4mb`` in four
    an epoch as ``ppo_4mb`` updates; the graphed ``npg_4mb`` step profiled."""
    from rlx.run.bench import bench_config, bench_one

    device = _device(dry_run)
    B = 64 if dry_run else 65536
    graphs = not dry_run
    step_ms = {}
    for name, algo, graphed in [("npg", "npg", False), ("npg_graphed", "npg", graphs),
                                ("npg_4mb_graphed", "npg_4mb", graphs), ("ppo", "ppo_4mb", graphs)]:
        row = bench_one("CartPole", algo, B, 32, device, [64, 64], amp=False, iters=5, warmup=_warmups(),
                        cudagraphs=graphed)
        step_ms[name] = row["step_ms"]
        _emit({"part": "npg", "algo": name, "device": device, "mode": "cudagraphs" if graphed else "eager",
               "precision": _precision(device), "num_envs": B, "collect_ms": round(row["collect_ms"], 3),
               "step_ms": round(row["step_ms"], 3)})
    _emit({"part": "npg", "summary": True, "npg_step_over_ppo_step": round(step_ms["npg"] / step_ms["ppo"], 3),
           "graphed_npg_step_over_ppo_step": round(step_ms["npg_graphed"] / step_ms["ppo"], 3),
           "graphed_npg_4mb_step_over_ppo_step": round(step_ms["npg_4mb_graphed"] / step_ms["ppo"], 3)})
    config, env_cls, _ = bench_config("CartPole", "npg_4mb", B, 32, device, [64, 64], amp=False, cudagraphs=graphs)
    _emit({"part": "npg", "setting": "npg_4mb_graphed", "step_profile": _step_profile(config.build(env_cls), device)})


def part_rsl_rl(dry_run: bool, out: Path) -> None:
    import contextlib
    import io

    import torch

    from rlx.examples.windy_reach import WindyReach
    from rlx.runners import OnPolicyRunner as RlxRunner

    device = _device(dry_run)
    envs, hidden, iters = (64, [32, 32], 2) if dry_run else (4096, [512, 256, 128], 20)
    cfg = {
        "num_steps_per_env": 24, "save_interval": 10**9, "obs_groups": {"actor": ["policy"], "critic": ["policy", "critic"]},
        "algorithm": {"class_name": "PPO", "num_learning_epochs": 5, "num_mini_batches": 4, "clip_param": 0.2,
                      "gamma": 0.99, "lam": 0.95, "value_loss_coef": 1.0, "entropy_coef": 0.005, "learning_rate": 1e-3,
                      "max_grad_norm": 1.0, "use_clipped_value_loss": True, "schedule": "adaptive", "desired_kl": 0.01},
        "actor": {"class_name": "MLPModel", "hidden_dims": hidden, "activation": "elu", "obs_normalization": True,
                  "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": {"class_name": "MLPModel", "hidden_dims": hidden, "activation": "elu", "obs_normalization": True},
    }
    sides = [("rlx", RlxRunner, {})]
    if not dry_run:  # the compiled runner (rsl_rl's torch_compile_mode) compiles for tens of seconds on a CPU
        sides.append(("rlx_compile", RlxRunner, {"torch_compile_mode": "default"}))
    try:
        from rsl_rl.runners import OnPolicyRunner as RslRunner

        sides.insert(0, ("rsl_rl", RslRunner, {}))
    except ImportError:
        _emit({"part": "rsl_rl", "side": "rsl_rl", "skipped": "rsl_rl is not installed (pip install 'rlx[rsl_rl]')"})
    for name, runner_cls, extra in sides:
        torch.manual_seed(0)
        with contextlib.redirect_stdout(io.StringIO()):
            runner = runner_cls(WindyReach(envs, device, seed=0), {**cfg, **extra}, log_dir=None, device=device)
            runner.learn(_warmups())  # warm-up (compile, the graphs' captures)
            _sync(device)
            start = time.perf_counter()
            runner.learn(iters)
            _sync(device)
        wall = time.perf_counter() - start
        _emit({"part": "rsl_rl", "side": name, "device": device, "precision": _precision(device), "num_envs": envs,
               "iterations": iters, "wall_s": round(wall, 3), "steps_per_s": round(iters * envs * 24 / wall)})


PARTS = {"gpu_tests": part_gpu_tests, "vs_jax": part_vs_jax, "profile": part_profile, "members": part_members,
         "npg": part_npg, "rsl_rl": part_rsl_rl}


# -- the driver ----------------------------------------------------------------------------------


def _run_part(name: str, dry_run: bool, out: Path, limit: float) -> tuple[list[dict], str]:
    """``name`` (a part, or several joined by commas, run one after the other) in a
    subprocess under ``limit`` seconds: the rows and a status row of each part, and the
    stderr tail. A part the subprocess did not finish gets its exit status or timeout."""
    args = [sys.executable, __file__, "--part", name, "--out", str(out)] + (["--dry-run"] if dry_run else [])
    start = time.perf_counter()
    try:
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=limit)
        stdout, stderr, status = done.stdout, done.stderr, f"exit {done.returncode}"
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        status = f"timed out after {limit:.0f} s"
    rows = [json.loads(line[4:]) for line in stdout.splitlines() if line.startswith("ROW ")]
    finished = {r["part"] for r in rows if "status" in r}
    seconds = round(time.perf_counter() - start, 1)
    rows += [{"part": n, "status": status, "seconds": seconds} for n in name.split(",") if n not in finished]
    return rows, stderr[-6000:]


def _run_parts_here(names: list[str], dry_run: bool, out: Path) -> int:
    """Each of ``names`` in this process, one after the other, each closed by its status
    row (``exit 0``, or the exception that ended it: the next part still runs)."""
    import traceback

    failed = 0
    for name in names:
        start = time.perf_counter()
        try:
            PARTS[name](dry_run, out)
            status = "exit 0"
        except Exception as e:  # noqa: BLE001 (reported by name; the next part runs)
            traceback.print_exc()
            status, failed = f"error: {type(e).__name__}: {e}"[:300], 1
        _emit({"part": name, "status": status, "seconds": round(time.perf_counter() - start, 1)})
    return failed


def _summary(rows: list[dict], header: str) -> str:
    lines = [f"# gpu_check: {header}", ""]
    for row in rows:
        part = row.get("part")
        if "status" in row:
            lines.append(f"- **{part}**: {row['status']} in {row['seconds']} s")
        elif part == "gpu_tests":
            lines.append(f"  - {row['summary']}" + (f"; failed: {', '.join(row['failed'])}" if row["failed"] else ""))
        elif part == "vs_jax" and "error" in row:
            lines.append(f"  - B={row['num_envs']} {row['side']}: {row['error']}")
        elif part == "vs_jax":
            lines.append(f"  - B={row['num_envs']} {row['side']} [{row['precision']}]: {row['steps_per_s']:,} env steps/s, "
                         f"rlx/JAX {row['vs_jax']}, first iteration {row['compile_s']} s")
        elif part == "profile":
            for phase in ("collect", "step"):
                p = row[phase]
                top = ", ".join(f"{k['name'][:40]} {k['ms']} ms" for k in p["top_kernels"][:3])
                lines.append(f"  - B={row['num_envs']} {row['mode']} {phase}: wall {p['wall_ms']} ms, GPU busy "
                             f"{p['gpu_busy_ms']} ms, {p['kernels']} kernels; top: {top}")
            it = row.get("iteration", {})
            gaps = ", ".join(f"{g['ms']} ms after {g['after'][:30]} before {g['before'][:30]}" for g in it.get("gaps", [])[:3])
            lines.append(f"  - B={row['num_envs']} {row['mode']} iteration: wall {it.get('wall_ms')} ms, host waits "
                         f"{it.get('collect_wait_ms')} + {it.get('step_wait_ms')} ms, host {it.get('host_ms')} ms, GPU "
                         f"busy {it.get('gpu_busy_ms')} idle {it.get('gpu_idle_ms')} ms in {it.get('kernels')} kernels "
                         f"(idle {it.get('idle_in_gaps_under_20us_ms')} ms in {it.get('gaps_under_20us')} gaps < 20 us, "
                         f"{it.get('idle_in_gaps_over_20us_ms')} ms in {it.get('gaps_over_20us')} longer); gaps: {gaps}")
        elif "step_profile" in row:
            p = row["step_profile"]
            top = ", ".join(f"{k['name'][:40]} {k['ms']} ms" for k in p["top_kernels"][:3])
            lines.append(f"  - {row['setting']} step: wall {p['wall_ms']} ms, GPU busy {p['gpu_busy_ms']} ms, "
                         f"{p['kernels']} kernels; top: {top}")
        elif part in ("members", "npg", "rsl_rl"):
            lines.append("  - " + ", ".join(f"{k} {v}" for k, v in row.items() if k != "part"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the folder its files go to (at most 6)")
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument("--dry-run", action="store_true", help="every part at tiny sizes on the CPU")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS))
    parser.add_argument("--part", help=argparse.SUPPRESS)  # parts (comma-separated), in this process
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.part:
        unknown = [n for n in args.part.split(",") if n not in PARTS]
        if unknown:
            parser.error(f"--part: unknown parts {unknown}, expected some of {list(PARTS)}")
        return _run_parts_here(args.part.split(","), args.dry_run, out)
    import torch

    import rlx

    device = "cpu (dry run)" if args.dry_run else (torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA")
    header = (f"{device}, torch {torch.__version__}, rlx {rlx.__file__}, "
              f"{time.strftime('%Y-%m-%d %H:%M')}, budget {args.budget_s:.0f} s")
    print(header, flush=True)
    deadline = time.perf_counter() + args.budget_s
    rows, logs = [], []
    # On a GPU each part runs in a subprocess of its own, under its own limit. A dry run
    # runs the parts whose limits fit the budget in one subprocess, under their limits'
    # sum: the parts' code is what it checks, and five fewer starts of Python, torch and
    # rlx save about a third of its time on a CPU (tests/test_gpu_check.py checks the
    # isolation on its own).
    limits = {name: LIMITS[name][1 if args.dry_run else 0] for name in args.parts}
    groups = [([name], limits[name]) for name in args.parts]
    if args.dry_run:
        fit = [n for i, n in enumerate(args.parts) if sum(limits[m] for m in args.parts[: i + 1]) <= args.budget_s]
        groups = [(fit, sum(limits[n] for n in fit))] if fit else []
        groups += [([n], limits[n]) for n in args.parts if n not in fit]  # alone, if the budget left allows
    for names, limit in groups:
        left = deadline - time.perf_counter()
        if left < limit:
            rows += [{"part": n, "status": f"skipped: {left:.0f} s of the budget left, its limit is {limit} s",
                      "seconds": 0.0} for n in names]
            continue
        part_rows, stderr = _run_part(",".join(names), args.dry_run, out, limit)
        rows += part_rows
        logs.append(f"## {', '.join(names)}\n{stderr}\n")
        print(_summary(part_rows, ", ".join(names)).split("\n", 2)[2], end="", flush=True)
    summary = _summary(rows, header)
    (out / "summary.md").write_text(summary)
    with open(out / "results.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps({"device": device, **row}) + "\n")
    (out / "parts.log").write_text("\n".join(logs))
    print(f"\nwrote {', '.join(f for f in FILES if (out / f).exists())} to {out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX and torch share the GPU
    sys.exit(main())
