"""Products with a narrow result on a CPU: MKL's time each way round, and what computing
them transposed (:mod:`rlx.core.narrow_products`) saves a compiled iteration.

    python benchmarks/experiments/narrow_products.py [--part products iteration] [--num-envs 64 1024]
        [--algo ppo|npg] [--rounds 6] [--iterations 30]

``products``: ``torch.mm(gᵀ, x)`` (a weight gradient: ``g`` a ``[K, M]`` output gradient, ``x``
the ``[K, N]`` inputs, ``gᵀ`` a view as autograd passes it) against ``mm(xᵀ, g)ᵀ``, the same
product transposed, for K (rows) 512 to 4096, M (outputs) 64 and 256, N (inputs) 1 to 16:
median microseconds a call, one thread.

``iteration``: two algorithms built with the same seed, one with the pass in its compiled
programs (as rlx runs) and one without, then timed as ``warm_programs.py`` times its two
sides: alternating blocks of ``--iterations`` ``collect()`` + ``step()``, each side first
in every other round. ``--algo ppo``: vs_jax.py's CartPole PPO (T = 32, 64x64 tanh,
4 epochs x 4 minibatches); ``--algo npg``: Pendulum's NPG (T = 32, 256x256 networks,
critic minibatches of 256 rows). Results:
``benchmarks/experiments/results/narrow_products.jsonl``. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_call_us(fn, seconds: float = 0.05, rounds: int = 5) -> float:
    for _ in range(20):
        fn()
    times = []
    for _ in range(rounds):
        start, calls = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            fn()
            calls += 1
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def products() -> list[dict]:
    import torch

    rows = []
    for K in (512, 2048, 4096):
        for M in (64, 256):
            for N in (1, 2, 4, 8, 16):
                g, x = torch.randn(K, M), torch.randn(K, N)
                direct = per_call_us(lambda: torch.mm(g.t(), x))
                swapped = per_call_us(lambda: torch.mm(x.t(), g).t())
                rows.append({"part": "products", "rows": K, "outputs": M, "inputs": N, "direct_us": round(direct, 1),
                             "transposed_us": round(swapped, 1), "speedup": round(direct / swapped, 2)})
                print(f"[{M}, {K}] x [{K}, {N}]: {direct:7.1f} us, transposed {swapped:7.1f} us "
                      f"({direct / swapped:.1f}x)", flush=True)
    return rows


def iteration(args) -> list[dict]:
    from common import interleaved_ms
    from ppo_settings import PPOSettings

    from rlx import NPGConfig
    from rlx.core import compiling
    from rlx.envs import CartPole, Pendulum

    def timed_iteration(algo) -> float:
        start = time.perf_counter()
        algo.collect()
        algo.step()
        return time.perf_counter() - start

    rows = []
    for B in args.num_envs:
        if args.algo == "ppo":
            config, env = PPOSettings(num_envs=B, horizon=32, minibatches=4).rlx_config("cpu", seed=0, compile=True), CartPole
        else:
            config = NPGConfig(num_envs=B, horizon=32, device="cpu", seed=0, compile=True, critic_minibatch_size=256)
            env = Pendulum
        with_pass = config.build(env)
        compiling.NARROW_PRODUCTS = False
        try:  # each program's options are read when it is made: at build
            without = config.build(env)
        finally:
            compiling.NARROW_PRODUCTS = True
        sides = {"transposed": with_pass, "mkl_as_is": without}
        iterations = max(2, args.iterations * 64 // B)
        ms = interleaved_ms(sides, args.rounds, iterations, timed_iteration)
        row = {"part": "iteration", "algo": args.algo, "num_envs": B, "transposed_ms": round(ms["transposed"], 2),
               "mkl_as_is_ms": round(ms["mkl_as_is"], 2), "speedup": round(ms["mkl_as_is"] / ms["transposed"], 3),
               "rounds": args.rounds, "iterations": iterations}
        rows.append(row)
        print(f"{args.algo} B={B:>5}: transposed {ms['transposed']:.2f} ms, as MKL gets them {ms['mkl_as_is']:.2f} ms "
              f"an iteration ({row['speedup']:.3f}x)", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", nargs="+", choices=["products", "iteration"], default=["products", "iteration"])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--algo", choices=["ppo", "npg"], default="ppo")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args()
    import torch
    from common import EXPERIMENT_RESULTS, append_results, results_path

    torch.set_num_threads(1)
    rows = products() if "products" in args.part else []
    if "iteration" in args.part:
        rows += iteration(args)
    append_results(results_path("narrow_products", EXPERIMENT_RESULTS), rows, threads=1)


if __name__ == "__main__":
    main()
