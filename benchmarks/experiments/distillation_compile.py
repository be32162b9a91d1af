"""Teacher-student distillation on a CPU, eager against ``compile=True`` (each minibatch
update compiled whole), side by side in one process.

    python benchmarks/experiments/distillation_compile.py [--rounds 5] [--iterations 5]

A PPO teacher on WindyReach through rsl_rl's VecEnv (its actor sees the privileged
group; 3 iterations, enough to have weights), then two students of it as
``tests/algorithms/test_distillation.py`` builds them (the ``policy`` group only, 64x64
ELU), B = 256, T = 24, 2 epochs of 1536-sample minibatches, one thread: three warm-up
iterations each (the compiled one's include compiling), then ``--rounds`` blocks of
``--iterations`` collect() + step() per mode, interleaved. Prints the warm-up seconds,
ms a step() and an iteration (medians of the blocks) and eager / compiled. See
docs/benchmarks.md ("Distillation compiled").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from rlx import DistillationConfig
    from tests.algorithms.test_distillation import STUDENT, _teacher, _windy

    torch.set_num_threads(1)
    teacher = Path(tempfile.mkdtemp(prefix="rlx_distillation_teacher_"))
    _teacher(teacher, 3)
    algos = {mode: DistillationConfig(teacher=str(teacher), **STUDENT, compile=mode == "compiled").build(_windy(1))
             for mode in ("eager", "compiled")}
    for mode, algo in algos.items():
        start = time.perf_counter()
        for _ in range(3):
            algo.collect()
            algo.step()
        print(f"{mode}: warm-up {time.perf_counter() - start:.1f} s")
    steps: dict[str, list[float]] = {mode: [] for mode in algos}
    iterations: dict[str, list[float]] = {mode: [] for mode in algos}
    for _ in range(args.rounds):
        for mode, algo in algos.items():
            step = 0.0
            start = time.perf_counter()
            for _ in range(args.iterations):
                algo.collect()
                t = time.perf_counter()
                algo.step()
                step += time.perf_counter() - t
            iterations[mode].append(1e3 * (time.perf_counter() - start) / args.iterations)
            steps[mode].append(1e3 * step / args.iterations)
    for mode in algos:
        print(f"{mode}: step() {statistics.median(steps[mode]):.1f} ms, an iteration "
              f"{statistics.median(iterations[mode]):.1f} ms")
    ratio = statistics.median(steps["eager"]) / statistics.median(steps["compiled"])
    print(f"eager / compiled: step() {ratio:.2f}, an iteration "
          f"{statistics.median(iterations['eager']) / statistics.median(iterations['compiled']):.2f}")


if __name__ == "__main__":
    main()
