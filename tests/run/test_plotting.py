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


@pytest.mark.parametrize("word", ["member", "seed"])  # seed: how rlx named them before 2026-11-27
def test_a_population_runs_members_read_back_under_either_name(tmp_path, word: str) -> None:
    """``rlx plot`` (one curve per member) and ``rlx export --best`` read a population's
    per-member metrics as rlx writes them (``member{i}/``) and as older runs wrote them."""
    from rlx.members import member_metric
    from rlx.run.plotting import is_multi_seed_run, seed_runs
    from rlx.run.sweep import best_member, final_values

    run = tmp_path / "run"
    run.mkdir()
    with open(run / "metrics.jsonl", "w") as f:
        for it in range(1, 4):
            row = {"iteration": it, "env_steps": 100 * it, "members/active": 3, "eval/return_mean": 0.0}
            row.update({f"{word}{i}/eval/return_mean": float(10 * i + it) for i in range(3)})
            f.write(json.dumps(row) + "\n")
    rows = read_metrics(run)
    assert [member_metric(rows[-1], i, "eval/return_mean") for i in range(3)] == [3.0, 13.0, 23.0]
    assert member_metric(rows[-1], 3, "eval/return_mean", "absent") == "absent"
    runs = seed_runs([run])
    assert is_multi_seed_run(run) and [label for label, _ in runs] == [f"run/member{i}" for i in range(3)]
    assert [r["eval/return_mean"] for r in runs[2][1]] == [21.0, 22.0, 23.0]
    assert final_values(rows, "eval/return_mean", 3, tail=1) == [3.0, 13.0, 23.0]
    assert best_member(run) == (2, 22.0, "eval/return_mean")  # the mean of its last (up to FINAL_TAIL) values
