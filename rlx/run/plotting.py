"""Learning curves of a run directory (``rlx plot RUN_DIR``); matplotlib is an optional extra."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["plot_run", "plot_seeds", "read_metrics", "seed_summary"]

LOSS_KEYS = ("losses/policy", "losses/vf", "losses/entropy", "monitors/kl_div")


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The iterations of ``RUN_DIR/metrics.jsonl``, one dict each.

    Raises:
        FileNotFoundError: no metrics file.
        ValueError: a malformed line (naming the file and line number), or no lines.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no metrics file at {path}")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{number}: not a JSON line ({e.msg})") from e
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path} has no iterations yet")
    return rows


def seed_runs(run_dirs: list[str | Path]) -> list[tuple[str, list[dict[str, Any]]]]:
    """``(label, rows)`` per seed: one per run directory, and one per member of a run that
    trained ``num_seeds > 1`` agents at once (its ``member{i}/...`` metrics, or
    ``seed{i}/...`` in runs written before 2026-11-27, as a run of its own with the
    shared ``env_steps``)."""
    out = []
    for d in (Path(d) for d in run_dirs):
        rows = read_metrics(d)
        heads = {k.split("/", 1)[0] for row in rows for k in row if "/" in k}
        word = next((w for w in ("member", "seed") if f"{w}1" in heads), None)
        if word is None:  # one member: the run's own rows
            out.append((d.name, rows))
            continue
        count = sum(1 for h in heads if h.startswith(word) and h[len(word):].isdigit())
        for i in range(count):
            prefix = f"{word}{i}/"
            out.append((f"{d.name}/member{i}", [{"env_steps": r.get("env_steps"),
                                                 **{k[len(prefix):]: v for k, v in r.items() if k.startswith(prefix)}}
                                                for r in rows]))
    return out


def is_multi_seed_run(run_dir: str | Path) -> bool:
    """Whether a run directory holds the metrics of several seeds (``num_seeds > 1``)."""
    return len(seed_runs([run_dir])) > 1


def _series(rows: list[dict[str, Any]], x_key: str, y_key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for row in rows:
        x, y = row.get(x_key), row.get(y_key)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and math.isfinite(y):
            xs.append(x)
            ys.append(y)
    return xs, ys


def _member_series(rows: list[dict[str, Any]], i: int, name: str) -> tuple[list[float], list[float]]:
    """Member ``i``'s ``name`` against env steps (:func:`rlx.members.member_metric`: either naming)."""
    from rlx.members.axis import member_metric

    return _series([{"env_steps": r.get("env_steps"), name: member_metric(r, i, name)} for r in rows], "env_steps", name)


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw episode return and length against env steps and wall-clock, with the losses
    and KL in smaller panels below, into a PNG.

    Args:
        run_dir: A run directory with ``metrics.jsonl``.
        out: The PNG to write (default ``RUN_DIR/curves.png``).

    Returns:
        The path written.

    Raises:
        ImportError: matplotlib is not installed.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("rlx plot needs matplotlib: pip install 'rlx[plot]'") from e
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    out = Path(out) if out is not None else run_dir / "curves.png"
    out.parent.mkdir(parents=True, exist_ok=True)

    fig = Figure(figsize=(12, 9), layout="constrained")
    grid = fig.add_gridspec(3, 4, height_ratios=[1, 1, 0.6])
    big = [
        ("episodes/return_mean", "eval/return_mean", "episode return", "env_steps", "env steps", grid[0, 0:2]),
        ("episodes/return_mean", "eval/return_mean", "episode return", "wall_s", "training time (s)", grid[0, 2:4]),
        ("episodes/length_mean", "eval/length_mean", "episode length", "env_steps", "env steps", grid[1, 0:2]),
        ("episodes/length_mean", "eval/length_mean", "episode length", "wall_s", "training time (s)", grid[1, 2:4]),
    ]
    for train_key, eval_key, label, x_key, x_label, cell in big:
        ax = fig.add_subplot(cell)
        xs, ys = _series(rows, x_key, train_key)
        ax.plot(xs, ys, color="tab:blue", linewidth=1.2, label="train")
        ex, ey = _series(rows, x_key, eval_key)
        if ex:
            ax.plot(ex, ey, "o-", color="tab:orange", markersize=3, linewidth=1.0, label="eval")
        ax.set_title(f"{label} vs {x_label}", fontsize=10)
        ax.set_xlabel(x_label)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if xs or ex:
            ax.legend(fontsize=8, loc="best")
    for i, key in enumerate(LOSS_KEYS):
        ax = fig.add_subplot(grid[2, i])
        xs, ys = _series(rows, "env_steps", key)
        if xs:
            ax.plot(xs, ys, color="tab:green", linewidth=1.0)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("env steps", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(f"rlx run: {run_dir.resolve().name}  ({len(rows)} iterations)", fontsize=12)
    fig.savefig(out, dpi=100)
    return out


def _metric_of(rows_per_run: list[list[dict[str, Any]]], metric: str | None) -> str:
    if metric is not None:
        return metric
    has_eval = all(any(isinstance(r.get("eval/return_mean"), (int, float)) for r in rows) for rows in rows_per_run)
    return "eval/return_mean" if has_eval else "episodes/return_mean"


def _threshold_of(run_dir: Path, metric: str) -> float | None:
    """``trainer.stop_at[metric]`` from the run's ``config.yaml``, when it has one."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return None
    from rlx.core.yaml_types import load_yaml

    stop_at = ((load_yaml(path.read_text()) or {}).get("trainer") or {}).get("stop_at") or {}
    value = stop_at.get(metric, stop_at.get(metric.replace("eval/", "episodes/")))
    return float(value) if isinstance(value, (int, float)) else None


def seed_summary(
    run_dirs: list[str | Path], metric: str | None = None, threshold: float | None = None
) -> dict[str, Any]:
    """IQM and 95% bootstrap interval over runs (seeds) of the final value of ``metric``
    (default ``eval/return_mean`` when every run evaluated, else
    ``episodes/return_mean``), of its best value, and of the env steps to reach
    ``threshold`` (default: the runs' ``trainer.stop_at`` for that metric), ``inf`` for a
    seed that never did."""
    from rlx.core.seed_stats import bootstrap_ci, iqm, steps_to_reach

    dirs = [Path(d) for d in run_dirs]
    runs = seed_runs(dirs)
    rows_per_run = [rows for _, rows in runs]
    metric = _metric_of(rows_per_run, metric)
    curves = [_series(rows, "env_steps", metric) for rows in rows_per_run]
    for (label, _), (xs, _) in zip(runs, curves):
        if not xs:
            raise ValueError(f"{label}: metrics.jsonl reports no finite {metric!r}")
    finals = [ys[-1] for _, ys in curves]
    bests = [max(ys) for _, ys in curves]
    out: dict[str, Any] = {"metric": metric, "seeds": len(runs), "final": finals, "best": bests,
                           "final_iqm": iqm(finals), "final_ci": bootstrap_ci(finals),
                           "best_iqm": iqm(bests), "best_ci": bootstrap_ci(bests)}
    threshold = threshold if threshold is not None else _threshold_of(dirs[0], metric)
    if threshold is not None:
        steps = [steps_to_reach(xs, ys, threshold) for xs, ys in curves]
        out.update(threshold=threshold, steps_to_threshold=steps, steps_iqm=iqm(steps), steps_ci=bootstrap_ci(steps))
    return out


def plot_seeds(
    run_dirs: list[str | Path], out: str | Path, metric: str | None = None, threshold: float | None = None
) -> tuple[Path, dict[str, Any]]:
    """Draw several runs of one setup (seeds): each seed's curve of ``metric`` against env
    steps, thin, and their interquartile mean with a 95% bootstrap band over seeds, into a
    PNG. Returns the path and :func:`seed_summary`'s statistics.

    Raises:
        ImportError: matplotlib is not installed.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("rlx plot needs matplotlib: pip install 'rlx[plot]'") from e
    import numpy as np

    from rlx.core.seed_stats import align, bootstrap_ci, iqm

    summary = seed_summary(run_dirs, metric, threshold)
    metric = summary["metric"]
    runs = seed_runs(run_dirs)
    curves = [_series(rows, "env_steps", metric) for _, rows in runs]
    grid, values = align(curves)
    centre = np.full(len(grid), np.nan)
    low, high = centre.copy(), centre.copy()
    for j in range(len(grid)):
        column = values[:, j]
        if np.isnan(column).any():
            continue
        centre[j] = iqm(column)
        low[j], high[j] = bootstrap_ci(column, resamples=1000)
    fig = Figure(figsize=(9, 5.5), layout="constrained")
    ax = fig.add_subplot()
    for (label, _), (xs, ys) in zip(runs, curves):
        ax.plot(xs, ys, linewidth=0.7, alpha=0.45, label=label if len(runs) <= 10 else None)
    ax.fill_between(grid, low, high, color="black", alpha=0.15, linewidth=0, label="95% bootstrap CI of the IQM")
    ax.plot(grid, centre, color="black", linewidth=2.0, label="IQM over seeds")
    if "threshold" in summary:
        ax.axhline(summary["threshold"], color="tab:red", linestyle="--", linewidth=1.0, label="threshold")
    ax.set_xlabel("env steps")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.set_title(f"{len(runs)} seeds: final {metric} IQM {summary['final_iqm']:.1f} "
                 f"[{summary['final_ci'][0]:.1f}, {summary['final_ci'][1]:.1f}]", fontsize=10)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return out, summary
