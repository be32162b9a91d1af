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
