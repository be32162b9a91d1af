"""Inductor's max-autotune on a CPU: vs_jax.py's compiled CartPole PPO iteration with and
without it.

    python benchmarks/experiments/max_autotune.py [--num-envs 64 1024] [--iterations 20]

Each side runs in a process of its own, one thread, with ``TORCHINDUCTOR_MAX_AUTOTUNE``
set to 0 or 1 and an empty inductor cache of its own (max-autotune benchmarks GEMM
templates, C++ ones on a CPU, against ATen's and keeps the faster, when it compiles):
3 warm-up iterations, then 3 rounds of ``--iterations`` ``collect()`` + ``step()``, the
median of each round printed. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _side(num_envs: int, iterations: int) -> None:
    sys.path.insert(0, str(HERE.parent))
    from ppo_settings import warm_compiled_cartpole

    start = time.perf_counter()
    algo = warm_compiled_cartpole(num_envs, 3)
    rounds = []
    for _ in range(3):
        times = []
        for _ in range(iterations):
            t0 = time.perf_counter()
            algo.collect()
            algo.step()
            times.append(time.perf_counter() - t0)
        rounds.append(1e3 * statistics.median(times))
    print(f"B={num_envs} max_autotune={os.environ['TORCHINDUCTOR_MAX_AUTOTUNE']}: warm-up "
          f"{time.perf_counter() - start:.0f} s, medians {', '.join(f'{r:.2f}' for r in rounds)} ms an iteration",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--side", type=int, help=argparse.SUPPRESS)  # num_envs, in this process
    args = parser.parse_args()
    if args.side:
        _side(args.side, args.iterations)
        return
    for B in args.num_envs:
        for flag in ("0", "1"):
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "TORCHINDUCTOR_MAX_AUTOTUNE": flag, "TORCHINDUCTOR_CACHE_DIR": cache}
                subprocess.run([sys.executable, __file__, "--side", str(B), "--iterations", str(args.iterations)],
                               env=env, check=True)


if __name__ == "__main__":
    main()
