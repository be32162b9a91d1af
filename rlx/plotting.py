"""Learning curves of a run directory (``rlx plot RUN_DIR``); matplotlib is an optional extra."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["plot_run", "read_metrics"]

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


def _series(rows: list[dict[str, Any]], x_key: str, y_key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for row in rows:
        x, y = row.get(x_key), row.get(y_key)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and math.isfinite(y):
            xs.append(x)
            ys.append(y)
    return xs, ys


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
