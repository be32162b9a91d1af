"""How many CPU threads torch should use when other processes share the cores.

torch's default (one thread per core) is the fastest on an idle machine and the slowest
on a shared one: its OpenMP threads wait for each other at the end of every parallel
op, so one thread descheduled by another process (a second training run, a test suite)
stalls all of them, and a small-network update runs tens of times slower. rlx therefore
counts the cores other processes keep busy and leaves them alone: :func:`choose_threads`
at the start, and :class:`AutoThreads` again every few seconds of a run, as load comes
and goes.

The thread count can change a float reduction's rounding. A run that must reproduce
another bit for bit (an exact resume under changing load) fixes it: ``--threads N``,
``OMP_NUM_THREADS`` or ``torch.set_num_threads``.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch

__all__ = ["AutoThreads", "busy_cores_of_others", "choose_threads", "threads_are_set_by_user", "usable_cores"]


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; a container's limit)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _running_of_this_process() -> int:
    """This process's threads that are running or runnable now (state R)."""
    count = 0
    for stat in Path("/proc/self/task").glob("*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the thread ended
            continue
        if text[text.rindex(")") + 2 :].startswith("R"):
            count += 1
    return count


def busy_cores_of_others(samples: int = 5, interval_s: float = 0.002) -> float:
    """How many threads of other processes are running or runnable, the median of
    ``samples`` looks ``interval_s`` apart (Linux ``/proc``; 0 where it is missing)."""
    seen = []
    for i in range(samples):
        try:
            stat = Path("/proc/stat").read_text()
        except OSError:
            return 0.0
        running = next((int(line.split()[1]) for line in stat.splitlines() if line.startswith("procs_running")), 0)
        seen.append(max(0, running - _running_of_this_process()))
        if i + 1 < samples:
            time.sleep(interval_s)
    return float(statistics.median(seen))


def choose_threads(limit: int | None = None) -> int:
    """Threads for torch: the usable cores other processes leave free, at least 1 and at
    most ``limit`` (default: torch's own default, one per physical core)."""
    limit = limit or _default_threads()
    free = usable_cores() - round(busy_cores_of_others())
    return max(1, min(limit, free))


_DEFAULT_THREADS: int | None = None


def _default_threads() -> int:
    """torch's thread count before rlx changed it (one per physical core)."""
    global _DEFAULT_THREADS
    if _DEFAULT_THREADS is None:
        _DEFAULT_THREADS = torch.get_num_threads()
    return _DEFAULT_THREADS


class AutoThreads:
    """Keeps torch's CPU threads at :func:`choose_threads`, looking again at most every
    ``period_s`` seconds (each look costs about 10 ms).

    Call :meth:`update` between units of work (the trainer calls it before every
    iteration); a count in force is never changed inside one.
    """

    def __init__(self, period_s: float = 5.0) -> None:
        self.period_s = period_s
        self.threads = 0
        self._next = 0.0
        _default_threads()

    def update(self) -> int:
        """Set torch's threads if the look is due; returns the count in force."""
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.period_s
            threads = choose_threads()
            if threads != torch.get_num_threads():
                torch.set_num_threads(threads)
            self.threads = threads
        return self.threads


def threads_are_set_by_user() -> bool:
    """Whether the environment fixes the thread count (``OMP_NUM_THREADS`` or
    ``MKL_NUM_THREADS``): then rlx leaves it alone."""
    return bool(os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS"))
