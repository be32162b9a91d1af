"""What one compiled program per epoch would save against 4 compiled minibatch-update calls, on a CPU.

    python benchmarks/experiments/epoch_program.py [B]    # default B = 64

Builds vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 minibatches) with ``compile=True``,
warms it up, then compiles a function that runs the epoch's 4 minibatch updates
(``PPO.minibatch_update``, unrolled by dynamo) as one program, and times it against the
4 calls of ``algo.update`` on the same minibatches, interleaved (medians of 7 x 25
epochs, one thread). Prints the epoch program's compile time and both times per epoch.
Not adopted (docs/benchmarks.md): 6.22 -> 5.20 ms an epoch at B = 64 for a 62 s compile.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from ppo_settings import PPOSettings  # noqa: E402

from rlx.core.compiling import CompiledCall  # noqa: E402
from rlx.envs import CartPole  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    B, T = (int(sys.argv[1]) if len(sys.argv) > 1 else 64), 32
    algo = PPOSettings(num_envs=B, horizon=T, minibatches=4).rlx_config("cpu", seed=0, compile=True).build(CartPole)
    for _ in range(3):
        algo.collect()
        algo.step()
    algo.collect()
    batch = algo.prepare()
    rows = B * T // 4

    def epoch(eb):
        for lo in range(0, 4 * rows, rows):
            algo.minibatch_update({k: v[lo : lo + rows] for k, v in eb.items()})
        return algo._sums

    start = time.perf_counter()
    program = CompiledCall(epoch, device="cpu")
    program(batch)
    print(f"epoch program compiled in {time.perf_counter() - start:.1f} s")
    views = [{k: v[lo : lo + rows] for k, v in batch.items()} for lo in range(0, 4 * rows, rows)]
    for _ in range(3):
        program(batch)
        for view in views:
            algo.update(view)
    calls, whole = [], []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(25):
            for view in views:
                algo.update(view)
        t1 = time.perf_counter()
        for _ in range(25):
            program(batch)
        t2 = time.perf_counter()
        calls.append((t1 - t0) / 25)
        whole.append((t2 - t1) / 25)
    print(f"B={B}: 4 update calls {1e3 * statistics.median(calls):.2f} ms an epoch, "
          f"one epoch program {1e3 * statistics.median(whole):.2f} ms")


if __name__ == "__main__":
    main()
