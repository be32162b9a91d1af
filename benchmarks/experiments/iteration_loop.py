"""A compiled CPU iteration in a plain loop, for a native profiler (``perf``, ``py-spy``).

    python benchmarks/experiments/iteration_loop.py [--num-envs 64] [--iterations 900]
    perf record -D 32000 -F 2000 -o perf.data python benchmarks/experiments/iteration_loop.py
    perf report -i perf.data --sort dso,sym --stdio

vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs x 4 minibatches) with
``compile=True``, one thread: 5 warm-up iterations, then ``--iterations`` of
``collect()`` + ``step()``, and the median ms an iteration on stderr. Nothing is
instrumented: what a native profiler samples is the iteration as rlx runs it. Start the
profiler's recording after the warm-up (``perf record -D``, milliseconds: the imports and
the first iteration's compile take about 16 s here from inductor's cache, more under
perf). The script leaves without Python's finalization (``os._exit``), whose collections
over the compiler's objects would otherwise show as ``gc_collect_main``. See
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=900)
    args = parser.parse_args()
    from ppo_settings import warm_compiled_cartpole

    algo = warm_compiled_cartpole(args.num_envs, warmups=5)
    times = []
    for _ in range(args.iterations):
        start = time.perf_counter()
        algo.collect()
        algo.step()
        times.append(time.perf_counter() - start)
    print(f"B = {args.num_envs}: {1e3 * statistics.median(times):.2f} ms an iteration (median of {args.iterations})",
          file=sys.stderr, flush=True)
    os._exit(0)  # the profile ends with the loop: no finalization


if __name__ == "__main__":
    main()
