"""Where a compiled CPU iteration's time goes, by Python function and compiled program.

    python benchmarks/experiments/cprofile_iteration.py [--num-envs 64] [--iterations 30] [--rows 30]
        [--algo ppo|npg] [--sort tottime|cumulative]

vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs x 4 minibatches; ``--algo npg``:
Pendulum's NPG with critic minibatches of 256 rows, as ``warm_programs.py --algo npg``)
with ``compile=True``, one thread, 4 warm-up iterations, then ``--iterations`` of
``collect()`` + ``step()`` under :mod:`cProfile`, printed by own time (``--sort
cumulative``: by the time under each function). Each inductor
program shows as one ``inductor_entry_cpp`` line (its calls and time); the Python around
the programs (dynamo's path for the phases it still guards, AOT's runtime wrappers, rlx's
own code) shows as the rest. cProfile adds about a microsecond to each Python call: read
shares. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--rows", type=int, default=30)
    parser.add_argument("--algo", choices=["ppo", "npg"], default="ppo")
    parser.add_argument("--sort", choices=["tottime", "cumulative"], default="tottime")
    args = parser.parse_args()
    from ppo_settings import warm_compiled_cartpole

    if args.algo == "ppo":
        algo = warm_compiled_cartpole(args.num_envs, warmups=4)
    else:  # warm_programs.py's NPG: Pendulum, critic minibatches of 256 rows
        import torch

        from rlx import NPGConfig
        from rlx.envs import Pendulum

        torch.set_num_threads(1)
        algo = NPGConfig(num_envs=args.num_envs, horizon=32, device="cpu", seed=0, compile=True,
                         critic_minibatch_size=256).build(Pendulum)
        for _ in range(4):
            algo.collect()
            algo.step()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.iterations):
        algo.collect()
        algo.step()
    profiler.disable()
    pstats.Stats(profiler).sort_stats(args.sort).print_stats(args.rows)


if __name__ == "__main__":
    main()
