"""What the benchmark scripts share: training to a threshold, and appending results.

Scripts run as ``python benchmarks/x.py``, so this folder leads ``sys.path`` and they
import this module as ``common``; a script loaded by its path instead (``gpu_suite.py``
under pytest or ``rlx bench --suite gpu``) puts this folder on ``sys.path`` first.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterable

#: The repository the benchmarks belong to (and whose commit the results record).
ROOT = Path(__file__).resolve().parents[1]
#: Where the results files live: ``<name>.jsonl``, and the scripts' markdown tables.
RESULTS = ROOT / "benchmarks" / "results"
#: Results of the one-off scripts in ``benchmarks/experiments/``.
EXPERIMENT_RESULTS = ROOT / "benchmarks" / "experiments" / "results"

__all__ = ["EXPERIMENT_RESULTS", "ISA_VARIABLES", "RESULTS", "ROOT", "Training", "append_results", "git_commit", "git_dirty", "interleaved_ms", "jax_on_cpu_threads", "paired_blocks", "results_path",
           "run_fields", "train_until"]


@dataclasses.dataclass
class Training:
    """How a :func:`train_until` run ended."""

    #: The goal was reached.
    solved: bool
    #: ``algo.env_steps`` at the end: at the goal, or all that the budget allowed.
    env_steps: int
    #: Wall-clock of the training loop (``collect()`` and ``step()``), in seconds.
    seconds: float
    #: ``collect()`` calls.
    iterations: int
    #: The best value of the metric that counted; ``-inf`` when none did.
    best: float
    #: The metric of every collect, NaN where no episode ended.
    values: list[float]


def train_until(algo: Any, metric: str, goal: float, *, max_env_steps: int | None = None,
                budget_s: float | None = None, min_env_steps: int = 0, step_on_goal: bool = False) -> Training:
    """Alternate ``algo.collect()`` and ``algo.step()`` until ``metric`` reaches ``goal``,
    or until the env-step or time budget is spent.

    Each collect's ``metric`` is judged before training on that rollout; the budgets are
    checked before each collect, so a collect that has started always finishes.

    Args:
        algo: A built algorithm: ``collect()`` returns a dict of stats, ``step()`` trains
            on that rollout, and ``env_steps`` counts the env steps collected.
        metric: The stat of ``collect()`` to judge, e.g. ``"episodes/length_mean"``
            (NaN, when no episode ended, never counts).
        goal: The value to reach (``>=``); ``math.inf`` trains until the budget is spent.
        max_env_steps: Stop once ``algo.env_steps`` reaches it (``None``: no limit).
        budget_s: Stop once this many seconds of training have passed (``None``: no limit).
        min_env_steps: A value counts (for ``best`` and the goal) only once
            ``algo.env_steps`` has reached this, e.g. once every sub-env has run a full
            time limit, before which the episodes that ended are the short ones.
        step_on_goal: Also ``step()`` on the rollout that reached the goal, whose time
            then counts (the order of the scripts that collect, step, then judge).

    Returns:
        The :class:`Training` record.
    """
    best, values = -math.inf, []
    start = time.perf_counter()
    while ((budget_s is None or time.perf_counter() - start < budget_s)
           and (max_env_steps is None or algo.env_steps < max_env_steps)):
        value = algo.collect()[metric]
        values.append(value)
        counts = not math.isnan(value) and algo.env_steps >= min_env_steps
        if counts:
            best = max(best, value)
        if counts and value >= goal:
            if step_on_goal:
                algo.step()
            return Training(True, int(algo.env_steps), time.perf_counter() - start, len(values), best, values)
        algo.step()
    return Training(False, int(algo.env_steps), time.perf_counter() - start, len(values), best, values)


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def git_commit() -> str:
    """This checkout's short commit hash, ``"unknown"`` outside a git checkout."""
    return _git("rev-parse", "--short", "HEAD") or "unknown"


def git_dirty(*paths: str, untracked: bool = False) -> bool:
    """Whether the checkout differs from its commit: tracked files (and untracked ones
    with ``untracked=True``) under ``paths``, or anywhere when none are given."""
    flag = "--untracked-files=" + ("normal" if untracked else "no")
    return bool(_git("status", "--porcelain", flag, "--", *paths))


#: Environment variables that change which instructions a side's kernels run with: a row
#: measured under one of them records it (``isa_env``).
ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "XLA_FLAGS")


@functools.cache
def _host() -> tuple[str, str, str]:
    import torch

    from rlx.run.bench import cpu_name

    return torch.__version__, cpu_name(), torch.backends.cpu.get_cpu_capability()


def run_fields() -> dict[str, str]:
    """Where and when a result was measured: ``date``, ``commit``, ``torch`` version, ``cpu``
    and ``cpu_capability`` (the vector ISA torch's kernels run with, e.g. ``AVX2`` or
    ``AVX512``: machines sold under one model name, "Intel(R) Xeon(R) Processor" here,
    differ in it, and CPU ratios against JAX with it), and ``isa_env``, the
    :data:`ISA_VARIABLES` set for the run, where any is."""
    torch_version, cpu, capability = _host()
    fields = {"date": time.strftime("%Y-%m-%d"), "commit": git_commit(), "torch": torch_version, "cpu": cpu,
              "cpu_capability": capability}
    isa = {name: os.environ[name] for name in ISA_VARIABLES if name in os.environ}
    return {**fields, "isa_env": isa} if isa else fields


def jax_on_cpu_threads(threads: int) -> list[int] | None:
    """Run JAX on the CPU with ``threads`` threads (XLA's Eigen pool off) and pin this
    process to ``threads`` CPUs: call before JAX is imported, to compare it with torch at
    ``torch.set_num_threads(threads)``.

    The flags alone do not hold XLA to ``threads``: its CPU runtime runs work on threads
    of its own (on a 2-core machine at ``threads=1``, the warm vs_jax program kept 1.3-1.5
    cores busy, measured with ``getrusage``). The affinity mask does; torch, in the same
    process, gets the same CPUs, so both sides of a side-by-side run share them.

    Returns:
        The CPUs the process is pinned to, or ``None`` where the OS has no affinity
        masks (the flags are then all that holds JAX).
    """
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                               f" intra_op_parallelism_threads={threads}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))[:threads]
    os.sched_setaffinity(0, cpus)
    return cpus


def per_call_us(fn: Callable[[], Any], calls: int, rounds: int) -> float:
    """Microseconds a call of ``fn``: 10 warm-up calls, then the median over ``rounds``
    blocks of ``calls`` calls."""
    import statistics

    for _ in range(10):
        fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return 1e6 * statistics.median(times)


def interleaved_ms(sides: dict[str, Any], rounds: int, iterations: int, iteration: Callable[[Any], float]) -> dict[str, float]:
    """Two or more ways of running the same work, timed side by side in one process:
    ``rounds + 1`` rounds (the first warms up and is not kept), in each a block of
    ``iterations`` calls of ``iteration(side)`` (which returns the seconds it timed) per
    side, every side first in turn, each block seeded alike (``torch.manual_seed(round)``).
    Returns each side's median over the rounds of its blocks' median, in ms."""
    import statistics

    import torch

    names = sorted(sides)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds + 1):
        for name in names[r % len(names):] + names[: r % len(names)]:
            torch.manual_seed(r)
            block = [iteration(sides[name]) for _ in range(iterations)]
            if r:
                times[name].append(1e3 * statistics.median(block))
    return {name: statistics.median(t) for name, t in times.items()}


def paired_blocks(first: Callable[[], float], second: Callable[[], float], blocks: int) -> tuple[list[float], list[float]]:
    """Two sides timed side by side in ``blocks`` pairs of blocks: each callable runs one
    block of work and returns the seconds it timed; a pair's two blocks run back to back,
    and which side goes first alternates from pair to pair (``first`` leads the even
    pairs). A drift in the machine's speed then reaches both sides of a pair nearly alike,
    and neither side always follows the other. Returns each side's block times, pair by
    pair (``first``'s, ``second``'s)."""
    if blocks < 1:
        raise ValueError(f"blocks must be at least 1, got {blocks}")
    times: tuple[list[float], list[float]] = ([], [])
    for k in range(blocks):
        for side in ((0, 1) if k % 2 == 0 else (1, 0)):
            times[side].append((first, second)[side]())
    return times


def results_path(name: str, folder: Path = RESULTS) -> Path:
    """``benchmarks/results/<name>.jsonl`` (or ``<folder>/<name>.jsonl``)."""
    return folder / f"{name}.jsonl"


def append_results(path: str | Path, rows: dict[str, Any] | Iterable[dict[str, Any]], **fields: Any) -> Path:
    """Append each row to ``path`` as one JSON line.

    After its own keys, a line gets ``fields`` (what the whole run shares, e.g.
    ``threads``) and :func:`run_fields`, each only where the row has no such key, so
    every results file records the date, commit, torch version and CPU of its lines.

    Args:
        path: The ``.jsonl`` file, created with its folders if missing (see :func:`results_path`).
        rows: One row or several.
        **fields: Keys added to every row.

    Returns:
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    shared = {**run_fields(), **fields}
    with open(path, "a") as f:
        for row in [rows] if isinstance(rows, dict) else rows:
            line = {**row, **{k: v for k, v in shared.items() if k not in row}}
            f.write(json.dumps(line, default=str) + "\n")
    return path
