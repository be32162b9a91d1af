"""Adam's bias corrections ``beta ** t`` as a pow or as ``exp(t log beta)``, in compiled CPU programs.

    python benchmarks/experiments/adam_power.py [--num-envs 64] [--minibatches 4] [--rounds 9]

Inductor's CPU code inlined the bias corrections into the Adam kernel's loop over every
parameter, recomputing two float64 ``std::pow`` calls for each vector of 16 floats (gcc
does not hoist ``pow`` out of a loop under ``-fmath-errno``); written as ``exp(t log
beta)`` (:func:`rlx.members.optim._power`), the reused result holds an ``exp``, which
inductor computes once. Builds vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs)
with ``compile=True`` twice in one process, the second with the pow put back, warms each
up and times ``collect()`` + ``step()`` of both, interleaved (one thread). Prints the
medians and the per-round ratios. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    import torch
    from ppo_settings import PPOSettings

    from rlx.envs import CartPole
    from rlx.members import optim

    torch.set_num_threads(1)
    B = args.num_envs

    def build():
        algo = PPOSettings(num_envs=B, horizon=32, minibatches=args.minibatches).rlx_config(
            "cpu", seed=0, compile=True).build(CartPole)
        for _ in range(3):  # the first compiles (with the _power in place at the time)
            algo.collect()
            algo.step()
        return algo

    exp_side = build()
    power = optim._power
    optim._power = lambda beta, t: beta**t  # the pow, as before
    try:
        pow_side = build()
    finally:
        optim._power = power
    times: dict[str, list[float]] = {"exp": [], "pow": []}
    n = max(2, 2000 // B)
    for _ in range(args.rounds):
        for name, algo in (("exp", exp_side), ("pow", pow_side)):
            start = time.perf_counter()
            for _ in range(n):
                algo.collect()
                algo.step()
            times[name].append((time.perf_counter() - start) / n)
    for name, ts in times.items():
        print(f"B={B} minibatches={args.minibatches} {name}: {1e3 * statistics.median(ts):.2f} ms an iteration")
    ratios = [p / e for p, e in zip(times["pow"], times["exp"])]
    print(f"pow / exp: median {statistics.median(ratios):.3f} ({', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
