"""Statistics over seeds: the interquartile mean and its bootstrap confidence interval.

A result from a handful of seeds is reported as the IQM (the mean of the middle half of
the seeds' values, robust to one lucky or broken seed) with a 95% percentile-bootstrap
interval over seeds, as Agarwal et al. (2021, "Deep RL at the edge of the statistical
precipice") recommend. :func:`align` puts several runs' curves on one env-step grid.
Pure numpy, float64.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["align", "bootstrap_ci", "iqm", "steps_to_reach"]


def iqm(values: Sequence[float] | np.ndarray, axis: int = 0) -> np.ndarray | float:
    """Interquartile mean along ``axis``: sort, drop ``floor(n / 4)`` values from each end,
    average the rest (``scipy.stats.trim_mean(x, 0.25)``, what rliable reports). 3 seeds
    keep all 3; 8 seeds the middle 4. ``inf`` sorts last and counts where it is kept."""
    x = np.sort(np.asarray(values, dtype=np.float64), axis=axis)
    n = x.shape[axis]
    if n == 0:
        raise ValueError("iqm of no values")
    cut = n // 4
    out = np.take(x, np.arange(cut, n - cut), axis=axis).mean(axis=axis)
    return float(out) if np.ndim(out) == 0 else out


def bootstrap_ci(
    values: Sequence[float] | np.ndarray, *, stat=iqm, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``stat`` over the seeds (axis 0): resample the
    seeds with replacement ``resamples`` times and take the order statistics just outside
    the central ``confidence`` share. Deterministic for a given ``seed``."""
    x = np.asarray(values, dtype=np.float64)
    if x.shape[0] == 0:
        raise ValueError("bootstrap of no values")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, x.shape[0], size=(resamples, x.shape[0]))
    stats = np.asarray(stat(x[picks], axis=1))  # [resamples, ...]
    tail = (1.0 - confidence) / 2
    # No interpolation between resamples (the outer order statistics), so a seed that
    # never reached a threshold (inf) gives inf, not inf - inf.
    low = np.quantile(stats, tail, axis=0, method="lower")
    high = np.quantile(stats, 1.0 - tail, axis=0, method="higher")
    return (float(low), float(high)) if np.ndim(low) == 0 else (low, high)


def align(curves: Sequence[tuple[Sequence[float], Sequence[float]]]) -> tuple[np.ndarray, np.ndarray]:
    """Several ``(env_steps, values)`` curves on one grid: the env steps any of them
    reports, up to the shortest run's last one; each curve holds its latest value
    (a step function, as an evaluation holds until the next), NaN before its first.

    Returns:
        ``(grid [G], values [runs, G])``.
    """
    if not curves or any(len(xs) == 0 for xs, _ in curves):
        raise ValueError("align needs curves with at least one point each")
    end = min(max(xs) for xs, _ in curves)
    grid = np.unique(np.concatenate([np.asarray(xs, dtype=np.float64) for xs, _ in curves]))
    grid = grid[grid <= end]
    out = np.full((len(curves), len(grid)), np.nan)
    for i, (xs, ys) in enumerate(curves):
        xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
        order = np.argsort(xs, kind="stable")
        xs, ys = xs[order], ys[order]
        index = np.searchsorted(xs, grid, side="right") - 1
        out[i] = np.where(index >= 0, ys[np.clip(index, 0, None)], np.nan)
    return grid, out


def steps_to_reach(xs: Sequence[float], ys: Sequence[float], threshold: float) -> float:
    """The first env step at which the curve is at least ``threshold``; ``inf`` if never."""
    for x, y in zip(xs, ys):
        if y is not None and not math.isnan(y) and y >= threshold:
            return float(x)
    return math.inf
