"""Where rlx's CPU iteration loses to JAX's: the cost of one epoch against the rest.

    python benchmarks/experiments/epoch_cost.py [--num-envs 64 1024] [--rounds 3]

vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 minibatches), one thread on one pinned
core (:func:`common.jax_on_cpu_threads`), rlx with
``compile=True`` and JAX timed warm, each run with 1 and with 4 epochs in the same
process. An iteration's time is ``fixed + epochs * per_epoch``, so
``per_epoch = (t4 - t1) / 3`` (the epoch's 4 minibatch updates and its gather) and
``fixed = t1 - per_epoch`` (collect, GAE, the statistics and, for rlx, the KL pass after
the update). Prints ms an iteration, medians of the rounds. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import jax_on_cpu_threads  # noqa: E402


def _jax_ms(s, iters: int, seed: int) -> float:
    import jax
    from jax_ppo import block, make_train

    train = make_train(s, iters).lower(jax.random.PRNGKey(seed)).compile()
    block(train(jax.random.PRNGKey(seed)))
    start = time.perf_counter()
    block(train(jax.random.PRNGKey(seed)))
    return 1e3 * (time.perf_counter() - start) / iters


def _rlx_ms(s, iters: int, seed: int) -> float:
    from rlx.envs import CartPole

    algo = s.rlx_config("cpu", seed=seed, compile=True).build(CartPole)
    for _ in range(4):
        algo.collect()
        algo.step()
    start = time.perf_counter()
    for _ in range(iters):
        algo.collect()
        algo.step()
    return 1e3 * (time.perf_counter() - start) / iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    jax_on_cpu_threads(1)
    import torch
    from ppo_settings import PPOSettings

    torch.set_num_threads(1)
    for B in args.num_envs:
        iters = max(4, 300_000 // (B * 32))
        times: dict[tuple[str, int], list[float]] = {}
        for r in range(args.rounds):
            for epochs in (1, 4):
                s = dataclasses.replace(PPOSettings(num_envs=B, horizon=32, minibatches=4), epochs=epochs)
                times.setdefault(("jax", epochs), []).append(_jax_ms(s, iters, r))
                times.setdefault(("rlx", epochs), []).append(_rlx_ms(s, iters, r))
        for side in ("jax", "rlx"):
            t1, t4 = (statistics.median(times[(side, e)]) for e in (1, 4))
            per_epoch = (t4 - t1) / 3
            print(f"B={B:>5} {side}: 1 epoch {t1:7.2f} ms, 4 epochs {t4:7.2f} ms an iteration -> "
                  f"per epoch {per_epoch:6.2f} ms, fixed {t1 - per_epoch:6.2f} ms", flush=True)


if __name__ == "__main__":
    main()
