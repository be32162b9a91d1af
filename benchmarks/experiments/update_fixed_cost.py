"""The fixed cost of one compiled minibatch update call, on a CPU, at vs_jax.py's setting.

    python benchmarks/experiments/update_fixed_cost.py [--num-envs 64] [--rounds 5] [--calls 100]

Builds vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs) with ``compile=True`` twice,
with 4 and with 32 minibatches, warms each up, then times ``algo.update`` on the first
``B * 32 / minibatches`` rows of ``algo.prepare()`` (medians of ``--rounds`` x ``--calls``
calls, one thread). With the arithmetic linear in the rows, the two times give the fixed
cost per call (Python around the program, the C++ wrapper, per-GEMM costs) and the
arithmetic per row. Also prints ``collect()`` and ``step()`` times of the 4-minibatch
config (medians of 40 iterations). Prints only; see docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from ppo_settings import PPOSettings  # noqa: E402

from rlx.envs import CartPole  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    B, T = args.num_envs, 32
    per_call = {}
    for minibatches in (4, 32):
        algo = PPOSettings(num_envs=B, horizon=T, minibatches=minibatches).rlx_config("cpu", seed=0, compile=True).build(CartPole)
        for _ in range(3):
            algo.collect()
            algo.step()
        if minibatches == 4:
            collect, step = [], []
            for _ in range(40):
                t0 = time.perf_counter()
                algo.collect()
                t1 = time.perf_counter()
                algo.step()
                collect.append(t1 - t0)
                step.append(time.perf_counter() - t1)
            print(f"B={B}: collect() {1e3 * statistics.median(collect):.2f} ms, step() {1e3 * statistics.median(step):.2f} ms")
        algo.collect()
        rows = B * T // minibatches
        mb = {k: v[:rows] for k, v in algo.prepare().items()}
        for _ in range(5):
            algo.update(mb)
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for _ in range(args.calls):
                algo.update(mb)
            times.append((time.perf_counter() - t0) / args.calls)
        per_call[rows] = statistics.median(times)
        print(f"{rows} rows: {1e3 * per_call[rows]:.3f} ms per update")
    (big, t_big), (small, t_small) = sorted(per_call.items(), reverse=True)
    per_row = (t_big - t_small) / (big - small)
    print(f"fixed cost per call {1e3 * (t_small - per_row * small):.3f} ms; arithmetic {1e3 * per_row * big:.3f} ms at {big} rows")


if __name__ == "__main__":
    main()
