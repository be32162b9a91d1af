"""benchmarks/common.py: what the side-by-side runs rely on."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity masks on this OS")
def test_jax_on_cpu_threads_pins_the_process_to_that_many_cpus():
    # In a child process: the mask would otherwise pin this test worker.
    code = (
        "import json, os; from common import jax_on_cpu_threads\n"
        "before = sorted(os.sched_getaffinity(0)); pinned = jax_on_cpu_threads(1)\n"
        "print(json.dumps([before, pinned, sorted(os.sched_getaffinity(0)), os.environ['XLA_FLAGS']]))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=BENCHMARKS, capture_output=True, text=True, check=True)
    before, pinned, after, flags = json.loads(out.stdout.strip().splitlines()[-1])
    assert pinned == after == before[:1]
    assert "--xla_cpu_multi_thread_eigen=false" in flags


def test_paired_blocks_alternate_which_side_leads_and_keep_each_sides_times_by_pair():
    sys.path.insert(0, str(BENCHMARKS))
    from common import paired_blocks

    order, clock = [], iter(range(1, 100))

    def side(name):
        def block():
            order.append(name)
            return float(next(clock))
        return block

    a, b = paired_blocks(side("a"), side("b"), 3)
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert a == [1.0, 4.0, 5.0] and b == [2.0, 3.0, 6.0]  # pair k's times at index k
    with pytest.raises(ValueError, match="blocks must be at least 1, got 0"):
        paired_blocks(side("a"), side("b"), 0)
