"""``compile=True`` on a CPU with inductor's C++ wrapper (rlx's default,
``rlx.core.compiling.CPU_INDUCTOR_OPTIONS``) and with the Python one, side by side.

    python benchmarks/experiments/cpp_wrapper.py [--num-envs 64 1024] [--rounds 20] [--threads 1] [--apart]

CartPole PPO as ``vs_jax.py`` runs it (T = 32, 64x64 tanh, 4 epochs of 4 minibatches).
Both algorithms are built in one process (the option applies when a function is
compiled), warmed up, then timed interleaved: medians of ``collect()`` and ``step()``
over rounds, and env steps/s end to end. ``--apart`` adds a third: the C++ wrapper
compiled at ``-O1`` apart from its kernels (inductor's ``cpp_wrapper_build_separate``) for
every program built with the algorithm (the T loop, the tail, the phases).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlx import AlgorithmConfig
from rlx.core import compiling
from rlx.envs import CartPole


def build(num_envs: int, cpp_wrapper: bool | str):
    T = 32
    saved = dict(compiling.CPU_INDUCTOR_OPTIONS)
    if not cpp_wrapper:
        compiling.CPU_INDUCTOR_OPTIONS.pop("cpp_wrapper", None)
    elif cpp_wrapper == "separate":
        compiling.CPU_INDUCTOR_OPTIONS["cpp_wrapper_build_separate"] = True
    try:
        algo = AlgorithmConfig(
            num_envs=num_envs, horizon=T, num_sgd_iters=4, sgd_minibatch_size=num_envs * T // 4,
            optimizer_config={"lr": 2.5e-3}, gamma=0.99, gae_lambda=0.95, clip_param=0.2, vf_clip_param=None,
            vf_coeff=0.5, entropy_coeff=0.01, max_grad_norm=0.5,
            model_config={"hiddens": [64, 64], "activation_fn": "tanh"}, device="cpu", seed=0, compile=True,
        ).build(CartPole)
    finally:
        compiling.CPU_INDUCTOR_OPTIONS.clear()
        compiling.CPU_INDUCTOR_OPTIONS.update(saved)
    return algo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--apart", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for B in args.num_envs:
        algos = {"C++ wrapper": build(B, True), "Python wrapper": build(B, False)}
        if args.apart:
            algos["C++ apart"] = build(B, "separate")
        for algo in algos.values():  # compile (the options are read then) and warm up
            for _ in range(3):
                algo.collect()
                algo.step()
        collect: dict[str, list[float]] = {name: [] for name in algos}
        step: dict[str, list[float]] = {name: [] for name in algos}
        for _ in range(args.rounds):
            for name, algo in algos.items():
                start = time.perf_counter()
                algo.collect()
                middle = time.perf_counter()
                algo.step()
                collect[name].append(middle - start)
                step[name].append(time.perf_counter() - middle)
        for name in algos:
            c, s = statistics.median(collect[name]), statistics.median(step[name])
            print(f"B={B:>5} {name:>14}: collect {c * 1e3:7.2f} ms  step {s * 1e3:7.2f} ms  "
                  f"{B * 32 / (c + s):>9,.0f} env steps/s", flush=True)


if __name__ == "__main__":
    main()
