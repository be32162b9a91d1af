"""Statistics over seeds (IQM, bootstrap interval, curve alignment) and rlx plot of several runs."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import numpy as np
import pytest

from rlx.run.plotting import seed_summary
from rlx.core.seed_stats import align, bootstrap_ci, iqm, steps_to_reach


def slow_iqm(values: list[float]) -> float:
    """scipy.stats.trim_mean(values, 0.25), written out."""
    xs = sorted(values)
    cut = int(0.25 * len(xs))
    kept = xs[cut:len(xs) - cut]
    return math.fsum(kept) / len(kept)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 16, 33])
def test_iqm_matches_the_trimmed_mean_written_out(n: int) -> None:
    rng = random.Random(n)
    for _ in range(20):
        values = [rng.gauss(0, 100) for _ in range(n)]
        assert iqm(values) == pytest.approx(slow_iqm(values), rel=1e-12, abs=1e-12)
    assert iqm([1.0, 2.0, 3.0]) == 2.0  # 3 seeds: nothing trimmed
    assert iqm([0, 1, 2, 3, 4, 5, 6, 1000]) == 3.5  # 8 seeds: the middle 4; the outlier is gone


def test_iqm_along_an_axis_and_with_a_seed_that_never_reached() -> None:
    x = np.random.default_rng(0).normal(size=(8, 5))
    assert np.allclose(iqm(x, axis=0), [slow_iqm(list(x[:, j])) for j in range(5)])
    assert iqm([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, math.inf]) == 4.5  # trimmed away
    assert iqm([1.0, 2.0, math.inf, math.inf]) == math.inf  # kept: the IQM is not reached either


def test_bootstrap_interval_matches_a_slow_resampling_and_holds_the_iqm() -> None:
    values = [3.0, 9.0, 4.0, 10.0, 7.0, 1.0, 8.0, 5.0]
    low, high = bootstrap_ci(values, resamples=500, seed=3)
    # The same draws, one resample at a time.
    picks = np.random.default_rng(3).integers(0, len(values), size=(500, len(values)))
    stats = sorted(slow_iqm([values[i] for i in row]) for row in picks)
    want = (np.quantile(stats, 0.025, method="lower"), np.quantile(stats, 0.975, method="higher"))
    assert (low, high) == pytest.approx(want, rel=1e-12)
    assert stats[12] == pytest.approx(low) and stats[487] == pytest.approx(high)  # order statistics 13 and 488 of 500
    assert low <= iqm(values) <= high
    assert bootstrap_ci([5.0]) == (5.0, 5.0)
    assert bootstrap_ci(values, seed=1) == bootstrap_ci(values, seed=1)  # deterministic


def test_align_holds_each_curve_until_its_next_point_and_stops_at_the_shortest_run() -> None:
    grid, values = align([([10, 30, 50], [1.0, 3.0, 5.0]), ([20, 40], [2.0, 4.0])])
    assert grid.tolist() == [10, 20, 30, 40]
    assert np.array_equal(values, np.array([[1, 1, 3, 3], [np.nan, 2, 2, 4]]), equal_nan=True)
    with pytest.raises(ValueError, match="at least one point"):
        align([([], [])])


def test_steps_to_reach_is_the_first_crossing_or_inf() -> None:
    assert steps_to_reach([1, 2, 3], [0.0, 5.0, 9.0], 5.0) == 2
    assert steps_to_reach([1, 2], [0.0, float("nan")], 5.0) == math.inf


def _run(run_dir, finals: list[float], stop_at: float | None = None) -> None:
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.jsonl", "w") as f:
        for i, value in enumerate(finals, start=1):
            f.write(json.dumps({"iteration": i, "env_steps": 1000 * i, "wall_s": i, "episodes/return_mean": value,
                                "eval/return_mean": value if i % 2 == 0 else None}) + "\n")
    if stop_at is not None:
        (run_dir / "config.yaml").write_text(f"trainer:\n  stop_at: {{eval/return_mean: {stop_at}}}\n")


def test_seed_summary_of_several_runs(tmp_path) -> None:
    _run(tmp_path / "s0", [0, 10, 20, 30], stop_at=20)
    _run(tmp_path / "s1", [0, 5, 10, 15], stop_at=20)
    _run(tmp_path / "s2", [0, 20, 40, 60], stop_at=20)
    s = seed_summary([tmp_path / f"s{i}" for i in range(3)])
    assert s["metric"] == "eval/return_mean"  # every run evaluated
    assert s["final"] == [30, 15, 60] and s["final_iqm"] == 35.0
    assert s["threshold"] == 20 and s["steps_to_threshold"] == [4000, math.inf, 2000]
    assert s["final_ci"][0] <= 35.0 <= s["final_ci"][1]
    assert seed_summary([tmp_path / "s0", tmp_path / "s1"], metric="episodes/return_mean")["best"] == [30, 15]


def test_rlx_plot_of_several_runs_draws_and_prints_the_iqm(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    for i in range(4):
        _run(tmp_path / f"s{i}", [0, 10 * i, 20 * i, 30 * i], stop_at=20)
    out = tmp_path / "seeds.png"
    result = subprocess.run([sys.executable, "-m", "rlx", "plot", *[str(tmp_path / f"s{i}") for i in range(4)],
                             "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "4 seeds, eval/return_mean" in result.stdout
    assert "final: 45.00" in result.stdout  # the IQM of 0, 30, 60, 90: the middle two
    assert "reached by 3 of 4 seeds" in result.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
