"""Inside collect's compiled programs on a CPU: the time of each kernel and library call.

    python benchmarks/experiments/kernel_profile.py [--part loop|tail] [--num-envs 1024] [--rows 25]

vs_jax.py's CartPole PPO (T = 32, 64x64 tanh) with ``compile=True``, one thread, compiled
into an empty inductor cache with ``TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1`` (each
generated kernel then shows in :mod:`torch.profiler`), 3 warm-up iterations; then 20 T
loops (``--part loop``: the 4-step programs) or 10 tails (``--part tail``: the values of
every column, the truncation pass, the statistics) profiled. Prints the profiler's table
by self time; the instrumentation slows each kernel a little, so read shares, not
absolute times. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["loop", "tail"], default="loop")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=25)
    args = parser.parse_args()
    # Before torch compiles anything: the instrumented kernels, in a cache of their own.
    os.environ["TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE"] = "1"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="rlx_kernel_profile_")
    from ppo_settings import warm_compiled_cartpole
    from torch.profiler import ProfilerActivity, profile

    algo = warm_compiled_cartpole(args.num_envs, warmups=3)
    rollout = algo.rollout
    run, calls = ((lambda: rollout.steps(False)), 20) if args.part == "loop" else ((lambda: rollout.tail(None)), 10)
    for _ in range(3):
        run()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            run()
    print(f"{args.part} at B = {args.num_envs}, {calls} calls:")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=60))


if __name__ == "__main__":
    main()
