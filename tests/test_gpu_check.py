"""``benchmarks/gpu_check.py``, the command run whenever an H100 is available, dry-run on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_dry_runs_every_part_on_the_cpu_and_writes_its_files(tmp_path: Path) -> None:
    """Every part runs (at tiny sizes, on the CPU, in one subprocess: each part's own
    subprocess and limit are tested below), the summary is printed, and at most 6 files
    land in ``--out``, among them one result row per part."""
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry-run", "--out", str(tmp_path),
                           "--budget-s", "400"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) <= 6 and {"summary.md", "results.jsonl"} <= set(files), files
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    status = {r["part"]: r["status"] for r in rows if "status" in r}
    assert status == {p: "exit 0" for p in ("gpu_tests", "vs_jax", "profile", "members", "npg", "rsl_rl")}, (
        status, (tmp_path / "parts.log").read_text()[-3000:])
    by_part = {part: [r for r in rows if r["part"] == part and "status" not in r] for part in status}
    assert by_part["vs_jax"] and all(r["steps_per_s"] > 0 and r["precision"] == "float32" for r in by_part["vs_jax"])
    profile = by_part["profile"][0]
    assert profile["collect"]["wall_ms"] > 0 and profile["step"]["wall_ms"] > 0
    it = profile["iteration"]  # on the CPU: the host's side only
    assert it["wall_ms"] > 0 and it["host_ms"] == pytest.approx(it["wall_ms"] - it["collect_wait_ms"] - it["step_wait_ms"])
    assert any(r.get("members_over_one_run") for r in by_part["members"])
    assert {r["algo"]: r["step_ms"] > 0 for r in by_part["npg"] if "algo" in r} == {
        "npg": True, "npg_graphed": True, "npg_4mb_graphed": True, "ppo": True}
    assert any(r.get("npg_step_over_ppo_step") for r in by_part["npg"])
    profiled = {(r["part"], r["setting"]) for r in rows if r.get("step_profile", {}).get("wall_ms", 0) > 0}
    assert profiled == {("members", "4_members"), ("members", "one_run"), ("npg", "npg_4mb_graphed")}, profiled
    assert any(r.get("side") == "rlx" and r["steps_per_s"] > 0 for r in by_part["rsl_rl"])
    assert "gpu_check:" in (tmp_path / "summary.md").read_text() and "members" in done.stdout


def test_a_part_past_its_limit_is_stopped_and_the_rest_still_run(tmp_path: Path) -> None:
    """A part that outlives its time limit is killed and reported by name; the parts after
    it still run, and one whose limit no longer fits the budget is skipped by name."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check

    rows, _ = gpu_check._run_part("members", True, tmp_path, limit=0.5)
    assert rows[-1]["status"].startswith("timed out after")
    assert gpu_check.main(["--dry-run", "--out", str(tmp_path), "--budget-s", "1", "--parts", "members"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert rows[0]["status"].startswith("skipped: ") and rows[0]["part"] == "members"


def test_parts_run_together_each_report_on_their_own(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A dry run's parts share one subprocess: a part that raises is reported by name and
    the next one still runs; a part the subprocess never finished gets its outcome."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check

    def boom(dry_run: bool, out: Path) -> None:
        raise RuntimeError("no such device")

    def fine(dry_run: bool, out: Path) -> None:
        gpu_check._emit({"part": "fine", "value": 1})

    saved = dict(gpu_check.PARTS)
    gpu_check.PARTS.update(boom=boom, fine=fine)
    try:
        assert gpu_check._run_parts_here(["boom", "fine"], True, tmp_path) == 1
    finally:
        gpu_check.PARTS.clear()
        gpu_check.PARTS.update(saved)
    rows = [json.loads(line[4:]) for line in capsys.readouterr().out.splitlines() if line.startswith("ROW ")]
    status = {r["part"]: r["status"] for r in rows if "status" in r}
    assert status == {"boom": "error: RuntimeError: no such device", "fine": "exit 0"}
    assert {"part": "fine", "value": 1} in rows
    rows, _ = gpu_check._run_part("members,npg", True, tmp_path, limit=0.5)  # neither finishes
    assert [(r["part"], r["status"]) for r in rows] == [("members", "timed out after 0 s"), ("npg", "timed out after 0 s")]


def test_a_vs_jax_mode_that_fails_is_a_row_and_the_next_mode_still_runs(monkeypatch, capsys) -> None:
    """On 2026-11-27 one compiled mode's error took its size's finished rows with it: each
    mode now runs on its own, and its error is its row."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check
    import vs_jax

    def run(device, sizes, minibatches, modes, **kwargs):
        if modes == ["boom"]:
            raise RuntimeError("inductor said no")
        return [{"side": m, "num_envs": sizes[0], "steps_per_s": 1000, "precision": "float32", "compile_s": 0.0}
                for m in modes or ["jax"]]

    monkeypatch.setattr(vs_jax, "run", run)
    monkeypatch.setattr(gpu_check, "VS_JAX_DRY", [(64, ["boom", "eager"]), (64, ["compile"])])
    gpu_check.part_vs_jax(True, Path("."))
    rows = [json.loads(line[4:]) for line in capsys.readouterr().out.splitlines() if line.startswith("ROW ")]
    sides = [(r["side"], r.get("error")) for r in rows]
    assert ("boom", "RuntimeError: inductor said no") in sides and ("eager", None) in sides, sides
    # A size listed again (a later, lower-priority group of its modes) reuses its JAX rate.
    assert ("compile", None) in sides and sum(side == "jax" for side, _ in sides) <= 1, sides
    assert all(r["vs_jax"] == 1.0 for r in rows if r["side"] in ("eager", "compile") and r["jax"] == "warm"), rows


def test_idle_gaps_measures_the_union_of_the_kernels_and_names_the_gaps() -> None:
    """The device's busy time is the union of its kernels' intervals (overlapping kernels,
    from streams or a graph's branches, count once), its idle time the rest of the span,
    and each gap is named by the kernel that ended last before it and the one after."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_timeline import idle_gaps

    none = {"short_count": 0, "short_total": 0.0, "long_count": 0, "long_total": 0.0}
    assert idle_gaps([]) == (0.0, 0.0, 0.0, [], none)
    kernels = [(10.0, 12.0, "c"), (0.0, 4.0, "a"), (1.0, 3.0, "inside_a"), (3.5, 5.0, "b"), (20.0, 21.0, "d"),
               (12.0, 13.0, "touching_c")]
    span, busy, idle, gaps, sizes = idle_gaps(kernels)
    assert (span, busy, idle) == (21.0, 5.0 + 3.0 + 1.0, 21.0 - 9.0)
    assert gaps == [{"length": 7.0, "after": "touching_c", "before": "d"}, {"length": 5.0, "after": "b", "before": "c"}]
    assert sizes == {"short_count": 0, "short_total": 0.0, "long_count": 2, "long_total": 12.0}
    assert idle_gaps(kernels, top=1)[3] == gaps[:1]
    *_, long_gaps, sizes = idle_gaps(kernels, at_least=6.0)
    assert long_gaps == gaps[:1] and sizes == {"short_count": 1, "short_total": 5.0, "long_count": 1, "long_total": 7.0}
    assert idle_gaps([(2.0, 3.0, "only")]) == (1.0, 1.0, 0.0, [], none)


def test_vs_jax_combo_mode_sets_inductors_combo_kernels_for_rlx_cuda_programs_and_restores_them() -> None:
    """``+combo``'s programs are made with ``combo_kernels`` (rlx reads its CUDA options when
    it makes a compiled function); the options are as they were afterwards, raise or not."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import vs_jax

    from rlx.core.compiling import CUDA_INDUCTOR_OPTIONS

    before = dict(CUDA_INDUCTOR_OPTIONS)
    with vs_jax.combo_kernels(True):
        assert CUDA_INDUCTOR_OPTIONS == {**before, "combo_kernels": True}
    assert CUDA_INDUCTOR_OPTIONS == before
    with pytest.raises(RuntimeError), vs_jax.combo_kernels(True):
        raise RuntimeError("inductor said no")
    assert CUDA_INDUCTOR_OPTIONS == before
    with vs_jax.combo_kernels(False):
        assert CUDA_INDUCTOR_OPTIONS == before
