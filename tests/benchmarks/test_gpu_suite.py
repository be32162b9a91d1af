"""``benchmarks/gpu_suite.py --dry-run``: every part of the GPU suite runs, or says why
not, on the CPU at tiny sizes, and its results files hold what the GPU run will."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_suite.py"
ENVS = ("CartPole", "Pendulum")
ALGORITHMS = ("ppo", "npg", "recurrent_ppo")
THROUGHPUTS = ("collect_steps_per_s", "update_samples_per_s", "end_to_end_steps_per_s")


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def gpu_suite() -> ModuleType:
    # pytest runs with --import-mode=importlib and benchmarks/ is no package: load it by path.
    spec = importlib.util.spec_from_file_location("gpu_suite", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """torch on one thread, restored after: at these tiny sizes a second thread gains
    nothing, and when another process shares the 2 cores its spin-waits cost 4x."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def dry_run(gpu_suite: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One dry run for the whole module (about 15 s on 2 cores): its rows, report and output."""
    out = tmp_path_factory.mktemp("gpu_suite")
    printed = io.StringIO()
    with _one_thread(), contextlib.redirect_stdout(printed):
        assert gpu_suite.main(["--dry-run", "--out", str(out)]) == 0
    (jsonl,) = out.glob("gpu_suite_*_dry-run.jsonl")
    (md,) = out.glob("gpu_suite_*_dry-run.md")
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    return {"rows": rows, "markdown": md.read_text(), "printed": printed.getvalue()}


def _rows(dry_run: dict[str, Any], **match: Any) -> list[dict[str, Any]]:
    return [r for r in dry_run["rows"] if all(r.get(k) == v for k, v in match.items())]


def test_every_row_names_its_measurement_and_holds_numbers_or_a_reason(
    gpu_suite: ModuleType, dry_run: dict[str, Any]
) -> None:
    rows = dry_run["rows"]
    assert rows
    for row in rows:
        for key in (*gpu_suite.ROW_KEYS, "commit", "torch"):
            assert key in row, (key, row)
        assert row["device"] and isinstance(row["num_envs"], int)
        if "skipped" in row:
            assert isinstance(row["skipped"], str) and row["skipped"], row
            assert not row.get("error"), row  # nothing failed on a healthy CPU
        elif row["part"] == "throughput":
            assert all(_positive(row[key]) for key in THROUGHPUTS), row
        elif row["part"] == "solve":
            assert isinstance(row["solved"], bool) and row["env_steps"] > 0 and row["iterations"] >= 1, row
            assert math.isfinite(row["seconds"]) and row["seconds"] >= 0, row
        elif row["part"] == "gpu_tests":
            assert row["collected"] > 0 and row["gpu_collected"] > 0 and row["returncode"] == 0, row
        elif row["part"] == "rl8":
            assert _positive(row["ratio_eager"]), row


def test_every_part_of_the_suite_appears(dry_run: dict[str, Any]) -> None:
    (preflight,) = _rows(dry_run, part="preflight")
    assert preflight["rlx_is_this_checkout"] and "tensordict" in preflight["packages"]
    (tests,) = _rows(dry_run, part="gpu_tests")
    assert tests["mode"] == "collect-only" and "tests/test_gpu.py" in tests["modules"]
    assert not any("benchmarks" in m for m in tests["modules"])  # the suite must not run itself
    for env in ENVS:
        for algorithm in ALGORITHMS:
            for b in (64, 128):
                (eager,) = _rows(dry_run, part="throughput", env=env, algorithm=algorithm, mode="eager", num_envs=b)
                assert "skipped" not in eager
                for mode in ("cudagraphs", "compile"):
                    (row,) = _rows(dry_run, part="throughput", env=env, algorithm=algorithm, mode=mode, num_envs=b)
                    assert "skipped" in row
        for algorithm in ("ppo", "npg", "recurrent_ppo"):  # all capture on CUDA (NPG its whole step)
            assert _rows(dry_run, part="throughput", env=env, algorithm=algorithm, mode="cudagraphs")[0]["skipped"] == "needs CUDA"
        # Recurrent PPO compiles (skipped in a dry run as every compile is).
        assert "dry run" in _rows(dry_run, part="throughput", env=env, algorithm="recurrent_ppo", mode="compile")[0]["skipped"]
        for algorithm in ("ppo", "npg"):
            (solve,) = _rows(dry_run, part="solve", env=env, algorithm=algorithm, mode="eager")
            assert "skipped" not in solve and solve["env_steps"] <= 2 * 64 * 8
        assert _rows(dry_run, part="solve", env=env, mode="cudagraphs")[0]["skipped"] == "needs CUDA"
    (check,) = _rows(dry_run, part="graphed_vs_eager")
    assert check["skipped"] == "needs CUDA"
    (rl8,) = _rows(dry_run, part="rl8")
    if "skipped" in rl8:
        assert "pip install 'rlx[bench]'" in rl8["skipped"]
    (vs_jax,) = _rows(dry_run, part="vs_jax")
    assert "rlx[jax]" in vs_jax["skipped"] or "dry run" in vs_jax["skipped"]


def test_markdown_report_and_summary_name_each_env_and_goal(dry_run: dict[str, Any]) -> None:
    md = dry_run["markdown"]
    for env in ENVS:
        assert f"| {env} |" in md
    for heading in ("## Summary", "## Preflight", "## GPU tests", "## Throughput", "## Time to solve", "## Skipped"):
        assert heading in md
    printed = dry_run["printed"]
    assert "50.00M/s goal" in printed and "10.00M/s goal" in printed
    assert "NPG step at B=128" in printed and "graphed collect / eager" in printed
    assert "wrote " in printed


def test_the_check_harness_finds_two_eager_collects_from_the_same_state_equal(gpu_suite: ModuleType) -> None:
    with _one_thread():
        result = gpu_suite.graphed_vs_eager("CartPole", 32, 8, "cpu", rounds=2, cudagraphs=False)
    assert result["equal_sampling"] and result["equal_deterministic"] and not result["mismatched"]


def test_exceptions_and_the_time_budget_become_skip_rows(gpu_suite: ModuleType, tmp_path: Path) -> None:
    args = gpu_suite.build_parser().parse_args(["--dry-run", "--out", str(tmp_path)])
    suite = gpu_suite.Suite(args)

    def boom() -> dict[str, Any]:
        raise RuntimeError("boom")

    with contextlib.redirect_stdout(io.StringIO()):
        failed = suite.guarded("throughput", "CartPole", "ppo", "eager", 64, boom)
        suite.budget_s = 0.0
        late = suite.guarded("throughput", "CartPole", "ppo", "eager", 128, boom)
    assert failed["skipped"] == "RuntimeError: boom" and failed["error"] is True
    assert late["skipped"] == "time budget" and "error" not in late
    assert len(suite.jsonl.read_text().splitlines()) == 2


def test_rlx_bench_suite_gpu_hands_the_remaining_arguments_to_the_suite(capsys: pytest.CaptureFixture[str]) -> None:
    from rlx.run.bench import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--suite", "gpu", "--help"])
    assert exit_info.value.code == 0 and "--dry-run" in capsys.readouterr().out
    with pytest.raises(ValueError, match="only suite is 'gpu'"):
        main(["--suite", "cpu"])


def test_the_report_renders_the_rows_only_a_gpu_run_writes(gpu_suite: ModuleType, tmp_path: Path) -> None:
    # Graphed rows, a finished check, real test counts and rl8 ratios never occur in a
    # dry run: render synthetic ones at the GPU sizes so their branches run here.
    args = gpu_suite.build_parser().parse_args(["--dry-run", "--out", str(tmp_path)])
    suite = gpu_suite.Suite(args)
    suite.dry_run, suite.sizes = False, gpu_suite.GPU_SIZES
    base = {"device": "NVIDIA H100 80GB HBM3", "device_type": "cuda", "commit": "abc1234", "torch": "2.11.0"}
    rows = [{**base, "part": "preflight", "env": "-", "algorithm": "-", "mode": "preflight", "num_envs": 0,
             "python": "3.12", "cuda": "13.0", "packages": {"tensordict": "0.14.3", "rl8": None}}]
    rows.append({**base, "part": "gpu_tests", "env": "-", "algorithm": "-", "mode": "run", "num_envs": 0,
                 "collected": 900, "gpu_collected": 32, "gpu_passed": 31, "gpu_failed": 1, "gpu_skipped": 0,
                 "gpu_error": 0, "other_passed": 868, "other_failed": 0, "other_skipped": 0, "other_error": 0,
                 "failures": ["tests/test_gpu.py::test_x"], "returncode": 1, "timed_out": False, "not_finished": 0,
                 "seconds": 80.0, "modules": ["tests/test_gpu.py"], "command": "python -m pytest tests/test_gpu.py"})
    rows.append({**base, "part": "graphed_vs_eager", "env": "CartPole", "algorithm": "ppo", "mode": "cudagraphs_vs_eager",
                 "num_envs": 4096, "equal": False, "equal_sampling": False, "equal_deterministic": True,
                 "mismatched": ["sampling:logp"], "rounds": 3, "horizon": 32})
    for env in ENVS:
        for algorithm, mode, speed in (("ppo", "eager", 1e6), ("ppo", "cudagraphs", 5e6), ("npg", "eager", 2e6)):
            for b in (4096, 16384, 65536):
                rows.append({**base, "part": "throughput", "env": env, "algorithm": algorithm, "mode": mode, "num_envs": b,
                             "collect_steps_per_s": 2 * speed, "update_samples_per_s": 4 * speed,
                             "end_to_end_steps_per_s": speed, "step_ms": 1e3 * b * 32 / speed, "peak_memory_mb": 100.0})
        rows.append({**base, "part": "solve", "env": env, "algorithm": "ppo", "mode": "cudagraphs", "num_envs": 4096,
                     "solved": True, "seconds": 3.2, "env_steps": 6_291_456, "iterations": 48, "best": 480.0,
                     "metric": "episodes/length_mean", "goal": 475.0})
    rows.append({**base, "part": "rl8", "env": "DiscreteDummyEnv", "algorithm": "ppo", "mode": "rlx_vs_rl8",
                 "num_envs": 4096, "rl8_end_to_end_steps_per_s": 1e6, "rlx_eager_end_to_end_steps_per_s": 2e6,
                 "rlx_cudagraphs_end_to_end_steps_per_s": 4e6, "ratio_eager": 2.0, "ratio_cudagraphs": 4.0})
    suite.rows = rows
    summary = "\n".join(gpu_suite.summary_lines(suite))
    assert "best 0.1x the 50.00M/s goal" in summary and "best 0.5x the 10.00M/s goal" in summary
    assert "CartPole graphed collect / eager: B=4096 5.00x" in summary
    assert "NPG step at B=65536" in summary and "sampling False" in summary and "test_x" in summary
    md = gpu_suite.markdown(suite, [])
    assert "| 4096 | 1,000,000 | 2,000,000 (2.00x) | 4,000,000 (4.00x) |" in md
    assert "sampling:logp" in md and "| CartPole | ppo | cudagraphs | True | 3.2 |" in md
