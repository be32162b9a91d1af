"""``step()`` with the KL early stop, ``compile=True``: the fused update (the stop judged
inside the program) against the loss-only compile the stop used to fall back to.

    python benchmarks/experiments/fused_kl_stop.py [--num-envs 64 1024] [--rounds 5] [--threads 1]

CartPole PPO, 64x64 tanh, T = 32, 4 epochs of 4 minibatches, ``target_kl_div = 1.0`` (the
stop never fires, so both sides run every step). Both algorithms are built in one
process and timed interleaved, on their own rollouts; medians over rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlx import AlgorithmConfig
from rlx.envs import CartPole


def build(num_envs: int, fused: bool):
    T = 32
    algo = AlgorithmConfig(num_envs=num_envs, horizon=T, num_sgd_iters=4, sgd_minibatch_size=num_envs * T // 4,
                           optimizer_config={"lr": 2.5e-3}, model_config={"hiddens": [64, 64], "activation_fn": "tanh"},
                           device="cpu", seed=0, compile=True, target_kl_div=1.0).build(CartPole)
    assert algo.fused is not None
    if not fused:  # what compile=True ran with the KL early stop before: the compiled losses, an eager step
        algo.fused, algo.update = None, algo.minibatch_update
    return algo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for B in args.num_envs:
        algos = {"fused": build(B, True), "loss-only compile": build(B, False)}
        for algo in algos.values():  # compile and warm up
            for _ in range(3):
                algo.collect()
                algo.step()
        times: dict[str, list[float]] = {name: [] for name in algos}
        for _ in range(args.rounds):
            for name, algo in algos.items():
                algo.collect()
                start = time.perf_counter()
                algo.step()
                times[name].append(time.perf_counter() - start)
        med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        print(f"B={B:>5}: fused {med['fused']:.1f} ms, loss-only compile {med['loss-only compile']:.1f} ms "
              f"({med['loss-only compile'] / med['fused']:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
