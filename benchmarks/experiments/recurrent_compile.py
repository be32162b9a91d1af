"""Recurrent PPO on a CPU, eager against ``compile=True`` (the whole update, the phases
and collect's T loop compiled), side by side in one process.

    python benchmarks/experiments/recurrent_compile.py [--rounds 5] [--iterations 5]

docs/algorithms.md's LSTM example config on CartPoleNoVelocity (B = 64, T = 32,
``seq_len`` 16, a 64-wide encoder and LSTM, minibatches of 512 samples), one thread:
three warm-up iterations each (the compiled one's include compiling), then ``--rounds``
blocks of ``--iterations`` collect() + step() per mode, interleaved. Prints the warm-up
seconds, ms an iteration (median of the blocks) and eager / compiled. See
docs/benchmarks.md ("Recurrent PPO compiled").
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    import torch

    from rlx import RecurrentAlgorithmConfig
    from rlx.envs import CartPoleNoVelocity

    torch.set_num_threads(1)
    config = dict(num_envs=64, horizon=32, seq_len=16, burn_in=0, sgd_minibatch_size=512,
                  model_config={"cell": "lstm", "hidden_size": 64, "hiddens": [64]}, optimizer_config={"lr": 2e-3},
                  gamma=0.99, device="cpu", seed=0)
    algos = {mode: RecurrentAlgorithmConfig(**config, compile=mode == "compiled").build(CartPoleNoVelocity)
             for mode in ("eager", "compiled")}
    for mode, algo in algos.items():
        start = time.perf_counter()
        for _ in range(3):
            algo.collect()
            algo.step()
        print(f"{mode}: warm-up {time.perf_counter() - start:.1f} s")
    times: dict[str, list[float]] = {mode: [] for mode in algos}
    for _ in range(args.rounds):
        for mode, algo in algos.items():
            start = time.perf_counter()
            for _ in range(args.iterations):
                algo.collect()
                algo.step()
            times[mode].append(1e3 * (time.perf_counter() - start) / args.iterations)
    medians = {mode: statistics.median(t) for mode, t in times.items()}
    for mode, t in times.items():
        print(f"{mode}: {medians[mode]:.1f} ms an iteration (blocks: {', '.join(f'{x:.1f}' for x in t)})")
    print(f"eager / compiled: {medians['eager'] / medians['compiled']:.2f}")


if __name__ == "__main__":
    main()
