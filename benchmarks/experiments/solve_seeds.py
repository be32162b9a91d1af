"""Env steps to solve CartPole over many seeds: whether a change that moves the arithmetic
(rounding, an RNG draw) moves learning.

    python benchmarks/experiments/solve_seeds.py [--seeds 0 48]

``floor.py``'s rlx side (B = 32, T = 64, 10 epochs x 4 minibatches, lr 2e-3, 64x64 tanh;
solved at a mean episode length of 475, judged on each rollout before training on it),
one thread, seeds ``[first, last)``. Prints each seed's env steps, their mean and median.
Run it at two commits (each from its own checkout, ``PYTHONPATH`` at it) and compare the
seeds pairwise: rounding changes make runs part, so single seeds differ either way, and
only a shift over many seeds is a change in learning. See docs/benchmarks.md ("Against a
hand-written floor").
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from floor import solve  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs=2, default=[0, 48], metavar=("FIRST", "END"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps = [solve("rlx", seed)[0] for seed in range(*args.seeds)]
    solved = [s for s in steps if s > 0]
    print(f"env steps to solve, seeds {args.seeds[0]}-{args.seeds[1] - 1} (-1: not solved): {steps}")
    if solved:
        print(f"solved {len(solved)} of {len(steps)}: mean {statistics.fmean(solved):.0f}, "
              f"median {statistics.median(solved):.0f}")


if __name__ == "__main__":
    main()
