"""The plots of a sweep and of a PBT run (``rlx plot RUN_DIR``); matplotlib is an optional extra.

* :func:`plot_sweep`: the ranked metric against each swept hyperparameter (each member's
  final value, and each point's IQM over its seeds with a 95% bootstrap interval), and the
  learning curves of the best points;
* :func:`plot_pbt`: each member's metric over env steps with its copies marked, and each
  explored hyperparameter's value per member over env steps (the lineage: a copy is a
  jump to the source's value, times the perturbation).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rlx.run.plotting import _member_series, read_metrics
from rlx.run.sweep import read_sweep, sweep_table

__all__ = ["is_pbt_run", "is_sweep_run", "plot_pbt", "plot_sweep"]


def _figure(size: tuple[float, float]) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("rlx plot needs matplotlib: pip install 'rlx[plot]'") from e
    return Figure(figsize=size, layout="constrained")


def is_sweep_run(run_dir: str | Path) -> bool:
    return (Path(run_dir) / "sweep.json").is_file()


def is_pbt_run(run_dir: str | Path) -> bool:
    return (Path(run_dir) / "lineage.jsonl").is_file()


def _log_scale(values: list[float]) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) == len(values) and len(values) > 1 and max(positive) / min(positive) >= 10


def plot_sweep(run_dir: str | Path, out: str | Path | None = None, metric: str | None = None,
               top: int = 3) -> tuple[Path, list[dict[str, Any]]]:
    """Draw a sweep (see the module docstring) into ``RUN_DIR/sweep.png``; returns the
    path and :func:`~rlx.run.sweep.sweep_table`'s ranked rows."""
    import numpy as np

    from rlx.core.seed_stats import align, iqm

    run_dir = Path(run_dir)
    sweep = read_sweep(run_dir)
    metric, rows = sweep_table(run_dir, metric)
    keys, K = sweep["keys"], sweep["seeds"]
    metrics = read_metrics(run_dir)
    fig = _figure((4.2 * (len(keys) + 1), 4.2))
    for j, key in enumerate(keys):
        ax = fig.add_subplot(1, len(keys) + 1, j + 1)
        xs = [r["hparams"][key] for r in rows]
        for r in rows:
            ax.scatter([r["hparams"][key]] * len(r["values"]), r["values"], s=10, color="gray", alpha=0.5)
        order = sorted(range(len(rows)), key=lambda i: xs[i])
        centre = [rows[i]["iqm"] for i in order]
        low = [rows[i]["iqm"] - rows[i]["ci"][0] for i in order]
        high = [rows[i]["ci"][1] - rows[i]["iqm"] for i in order]
        ax.errorbar([xs[i] for i in order], centre, yerr=[low, high], fmt="o", color="tab:blue", capsize=3,
                    label=f"IQM over {K} seed(s), 95% CI")
        # The marginal: every member with this value, whatever the other hyperparameters.
        levels = sorted(set(xs))
        if len(levels) > 1 and len(keys) > 1:
            marginal = [iqm([v for r in rows if r["hparams"][key] == x for v in r["values"] if math.isfinite(v)] or [math.nan])
                        for x in levels]
            ax.plot(levels, marginal, color="black", linewidth=1.5, label="IQM of every member with this value")
        if _log_scale(xs):
            ax.set_xscale("log")
        ax.set_xlabel(key)
        ax.set_ylabel(f"final {metric}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax = fig.add_subplot(1, len(keys) + 1, len(keys) + 1)
    for rank, r in enumerate(rows[:top], start=1):
        members = range(r["point"] * K, (r["point"] + 1) * K)
        curves = [_member_series(metrics, i, metric) for i in members]
        curves = [c for c in curves if c[0]]
        if not curves:
            continue
        for xs_, ys_ in curves:
            ax.plot(xs_, ys_, linewidth=0.6, alpha=0.35, color=f"C{rank - 1}")
        grid, values = align(curves)
        ax.plot(grid, [iqm(c) if not np.isnan(c).any() else math.nan for c in values.T], linewidth=2,
                color=f"C{rank - 1}", label=f"#{rank}: " + ", ".join(f"{k}={r['hparams'][k]:.3g}" for k in keys))
    ax.set_xlabel("env steps")
    ax.set_ylabel(metric)
    ax.set_title(f"top {min(top, len(rows))} points (thin: seeds)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(f"sweep {run_dir.resolve().name}: {len(rows)} points x {K} seeds", fontsize=12)
    out = Path(out) if out is not None else run_dir / "sweep.png"
    fig.savefig(out, dpi=100)
    return out, rows


def plot_pbt(run_dir: str | Path, out: str | Path | None = None, metric: str | None = None) -> Path:
    """Draw a PBT run (see the module docstring) into ``RUN_DIR/pbt.png``."""
    from rlx.core.yaml_types import load_yaml

    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    config = load_yaml((run_dir / "config.yaml").read_text())
    pbt = config["trainer"]["pbt"]
    metric = metric or pbt["metric"]
    hparams = pbt.get("hparams") or ["lr"]
    members = pbt["members"]
    lineage = [json.loads(x) for x in (run_dir / "lineage.jsonl").read_text().splitlines() if x.strip()]
    fig = _figure((6 * (1 + len(hparams)), 4.5))
    ax = fig.add_subplot(1, 1 + len(hparams), 1)
    for i in range(members):
        xs, ys = _member_series(rows, i, metric)
        ax.plot(xs, ys, linewidth=0.8, alpha=0.6, color=f"C{i % 10}")
    if lineage:
        ax.scatter([e["env_steps"] for e in lineage], [e["source_score"] for e in lineage], marker="v", s=18,
                   color="black", zorder=3, label=f"a copy ({len(lineage)} in all)")
        ax.legend(fontsize=7)
    ax.set_xlabel("env steps")
    ax.set_ylabel(metric)
    ax.set_title(f"{members} members, ranked every {pbt['every']} iterations", fontsize=10)
    ax.grid(alpha=0.3)
    for j, name in enumerate(hparams):
        ax = fig.add_subplot(1, 1 + len(hparams), j + 2)
        values = []
        for i in range(members):
            xs, ys = _member_series(rows, i, f"hparams/{name}")
            values += ys
            ax.step(xs, ys, where="post", linewidth=0.8, alpha=0.7, color=f"C{i % 10}")
        events = [e for e in lineage if name in e["hparams"]]
        ax.scatter([e["env_steps"] for e in events], [e["hparams"][name] for e in events], s=10, color="black",
                   zorder=3)
        if values and _log_scale(values):
            ax.set_yscale("log")
        ax.set_xlabel("env steps")
        ax.set_ylabel(name)
        ax.set_title(f"{name} per member (dots: after a copy and its perturbation)", fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle(f"PBT run {run_dir.resolve().name}", fontsize=12)
    out = Path(out) if out is not None else run_dir / "pbt.png"
    fig.savefig(out, dpi=100)
    return out
