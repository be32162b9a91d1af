"""rlx plot: a PNG of the learning curves, and clear errors for bad metrics files."""

from __future__ import annotations

import json

import pytest

from rlx.run.plotting import plot_run, read_metrics


def _write_metrics(run_dir, n: int = 50) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "metrics.jsonl", "w") as f:
        for i in range(1, n + 1):
            row = {
                "iteration": i, "env_steps": 2048 * i, "wall_s": 0.1 * i,
                "episodes/return_mean": None if i % 7 == 0 else float(i), "episodes/length_mean": float(i),
                "losses/policy": -0.01 * i, "losses/vf": 1.0 / i, "monitors/kl_div": 0.01,
            }
            if i % 10 == 0:
                row.update({"eval/return_mean": float(i + 1), "eval/length_mean": float(i + 1)})
            f.write(json.dumps(row) + "\n")


def test_plot_writes_a_png_of_the_expected_size(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.image

    _write_metrics(tmp_path / "run")
    out = plot_run(tmp_path / "run")
    assert out == tmp_path / "run" / "curves.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    height, width = matplotlib.image.imread(out).shape[:2]
    assert (width, height) == (1200, 900)


def test_metrics_errors_name_the_file_and_line(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no metrics file"):
        read_metrics(tmp_path)
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="has no iterations yet"):
        read_metrics(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a JSON line"):
        read_metrics(tmp_path)
