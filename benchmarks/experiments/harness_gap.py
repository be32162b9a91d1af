"""vs_jax.py's rlx side timed outside its harness: a compiled CartPole PPO's iterations in blocks.

    python benchmarks/experiments/harness_gap.py [--num-envs 64] [--jax] [--xla-flags]

vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs x 4 minibatches) with
``compile=True``, one thread: built, 4 warm-up iterations, then 8 blocks of 30
``collect()`` + ``step()`` timed (ms an iteration per block, and env steps/s over all),
with the share of the wall time the main thread and the whole process spent on a CPU
(below 1.0 on one pinned CPU: another thread, such as a runtime's spinning workers, took it).
``--jax``: first JAX's whole-program PPO for 244 iterations is compiled, called once and
timed on a second call in the same process, as vs_jax.py does before rlx's side;
``--xla-flags``: with vs_jax.py's XLA flags and pinning (``common.jax_on_cpu_threads``).
Run it pinned (``taskset -c 1``) to compare with vs_jax.py's rows. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--jax", action="store_true")
    parser.add_argument("--xla-flags", action="store_true")
    args = parser.parse_args()
    if args.xla_flags:
        from common import jax_on_cpu_threads

        jax_on_cpu_threads(1)
    import torch
    from ppo_settings import PPOSettings, warm_compiled_cartpole

    torch.set_num_threads(1)
    B, T = args.num_envs, 32
    s = PPOSettings(num_envs=B, horizon=T, minibatches=4)
    if args.jax:
        import jax
        from jax_ppo import block, make_train

        iters = max(4, 500_000 // (B * T))
        train = make_train(s, iters).lower(jax.random.PRNGKey(0)).compile()
        block(train(jax.random.PRNGKey(0)))
        start = time.perf_counter()
        block(train(jax.random.PRNGKey(0)))
        print(f"JAX: {iters * B * T / (time.perf_counter() - start):,.0f} env steps/s")
    algo = warm_compiled_cartpole(B, warmups=4)
    blocks, start, thread, process = [], time.perf_counter(), time.thread_time(), time.process_time()
    for _ in range(8):
        t = time.perf_counter()
        for _ in range(30):
            algo.collect()
            algo.step()
        blocks.append(1e3 * (time.perf_counter() - t) / 30)
    wall = time.perf_counter() - start
    thread, process = (time.thread_time() - thread) / wall, (time.process_time() - process) / wall
    print(f"rlx: {240 * B * T / wall:,.0f} env steps/s; ms an iteration by block: {[round(x, 2) for x in blocks]}; "
          f"CPU time / wall: main thread {thread:.3f}, process {process:.3f}")


if __name__ == "__main__":
    main()
