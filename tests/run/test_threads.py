"""rlx.run.threads: torch's CPU threads kept off the cores another process keeps busy."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from rlx.run.threads import AutoThreads, busy_cores_of_others, choose_threads, usable_cores

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")

BUSY = "import time\nwhile True: pass"


def _busy_processes(n: int) -> list[subprocess.Popen]:
    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(n)]
    time.sleep(0.5)  # running, not starting
    return procs


def test_choose_threads_leaves_the_cores_another_process_keeps_busy() -> None:
    cores = usable_cores()
    limit = max(cores, 2)
    procs = _busy_processes(1)
    try:
        others = busy_cores_of_others(samples=9)
        chosen = choose_threads(limit)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert others >= 1  # the busy loop, seen from here
    assert 1 <= chosen <= max(1, cores - 1)  # its core left to it


def test_auto_threads_looks_again_after_its_period_and_sets_torchs_threads() -> None:
    before = torch.get_num_threads()
    try:
        if usable_cores() > 8:
            pytest.skip("keeps every core busy: meant for small machines")
        auto = AutoThreads(period_s=0.0)
        procs = _busy_processes(usable_cores())  # every core busy: one thread
        try:
            assert auto.update() == 1 and torch.get_num_threads() == 1
        finally:
            for p in procs:
                p.kill()
                p.wait()
        slow = AutoThreads(period_s=3600.0)
        first = slow.update()
        torch.set_num_threads(max(1, first - 1) if first > 1 else 2)
        assert slow.update() == first  # not due: nothing looked at or changed
    finally:
        torch.set_num_threads(before)
