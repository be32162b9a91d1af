"""Where a compiled PPO step's time goes on a CPU, phase by phase.

    python benchmarks/experiments/step_split.py [B]    # default B = 64

vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs x 4 minibatches) with
``compile=True``, one thread, 4 warm-up iterations; then 30 iterations with each of
``prepare``, ``gather``, ``update``, ``scanned_updates`` (a step's updates as one program,
where it replaces the gathers and updates), ``finish_statistics``, ``run_epochs`` and
``_finish_step`` timed where step() calls them, and the rollout's ``begin``, ``steps``
(the T loop), ``tail``, ``finish`` and ``report`` where collect() calls them. Prints the
medians of collect() and step() and each phase's mean time an iteration (and its calls).
See docs/benchmarks.md.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from ppo_settings import warm_compiled_cartpole  # noqa: E402

PHASES = ("prepare", "gather", "update", "scanned_updates", "finish_statistics", "run_epochs", "_finish_step")
ROLLOUT_PHASES = ("begin", "steps", "tail", "finish", "report")


def main() -> None:
    torch.set_num_threads(1)
    B = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    algo = warm_compiled_cartpole(B, warmups=4)
    spent: dict[str, list[float]] = {}

    def timed(name: str, owner=algo):
        fn = getattr(owner, name)

        def call(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            spent.setdefault(name, []).append(time.perf_counter() - start)
            return out

        return call

    for name in PHASES:  # instance attributes: step() finds these first
        if getattr(algo, name) is not None:
            setattr(algo, name, timed(name))
    for name in ROLLOUT_PHASES:
        setattr(algo.rollout, name, timed(name, algo.rollout))
    n, collect, step = 30, [], []
    for _ in range(n):
        t0 = time.perf_counter()
        algo.collect()
        t1 = time.perf_counter()
        algo.step()
        collect.append(t1 - t0)
        step.append(time.perf_counter() - t1)
    print(f"B={B}: collect {1e3 * statistics.median(collect):.2f} ms, step {1e3 * statistics.median(step):.2f} ms")
    for name, times in spent.items():
        print(f"  {name}: {1e3 * sum(times) / n:.2f} ms an iteration ({len(times) // n} calls)")


if __name__ == "__main__":
    main()
