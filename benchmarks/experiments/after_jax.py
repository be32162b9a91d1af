"""Whether running JAX's program in the process slows rlx's next iterations, and the two side by side.

    python benchmarks/experiments/after_jax.py [--num-envs 64] [--pairs 12]

vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs x 4 minibatches) with
``compile=True`` and JAX's whole-program PPO (``benchmarks/jax_ppo.py``) in one process,
one thread, pinned to one CPU with vs_jax.py's XLA flags (``common.jax_on_cpu_threads``);
rlx warmed up 4 iterations, JAX's program compiled for one block's iterations (about 60k
env steps) and called once. Then ``--pairs`` times: a JAX block, an rlx block, another
rlx block. Prints the medians (ms an iteration) of rlx's blocks that followed JAX's and of
those that followed rlx's own (the same unless JAX's call leaves something behind that
slows torch: spinning threads, evicted caches), of JAX's blocks, and rlx / JAX as the
median over the triples of JAX's block over the mean of rlx's two. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=12)
    args = parser.parse_args()
    from common import EXPERIMENT_RESULTS, append_results, jax_on_cpu_threads

    pinned = jax_on_cpu_threads(1)
    import jax
    from jax_ppo import block, make_train
    from ppo_settings import PPOSettings, warm_compiled_cartpole

    B, T = args.num_envs, 32
    iters = max(4, 60_000 // (B * T))
    algo = warm_compiled_cartpole(B, warmups=4)
    train = make_train(PPOSettings(num_envs=B, horizon=T, minibatches=4), iters).lower(jax.random.PRNGKey(0)).compile()
    key = jax.random.PRNGKey(0)
    block(train(key))

    def rlx_ms() -> float:
        start = time.perf_counter()
        for _ in range(iters):
            algo.collect()
            algo.step()
        return (time.perf_counter() - start) / iters * 1e3

    def jax_ms() -> float:
        start = time.perf_counter()
        block(train(key))
        return (time.perf_counter() - start) / iters * 1e3

    after_jax, after_rlx, jax_side = [], [], []
    for _ in range(args.pairs):
        jax_side.append(jax_ms())
        after_jax.append(rlx_ms())
        after_rlx.append(rlx_ms())
    row = {"num_envs": B, "iterations": iters, "pairs": args.pairs, "pinned_cpus": len(pinned) if pinned else None,
           "rlx_after_jax_ms": round(statistics.median(after_jax), 3),
           "rlx_after_rlx_ms": round(statistics.median(after_rlx), 3),
           "jax_ms": round(statistics.median(jax_side), 3),
           "after_jax_over_after_rlx": round(statistics.median(a / b for a, b in zip(after_jax, after_rlx)), 4),
           "rlx_over_jax": round(statistics.median(j / ((a + b) / 2) for j, a, b in zip(jax_side, after_jax, after_rlx)),
                                 4)}
    for name, value in row.items():
        print(f"{name}: {value}")
    append_results(EXPERIMENT_RESULTS / "after_jax.jsonl", row, threads=1)


if __name__ == "__main__":
    main()
