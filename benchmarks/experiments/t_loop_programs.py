"""compile=True's T loop by steps per program: the loop's time against its compile time.

    python benchmarks/experiments/t_loop_programs.py [--steps 1 2 4 8] [--num-envs 64] [--horizon 32]

For each ``--steps`` K, a fresh process (so each compiles from nothing, into an empty
``TORCHINDUCTOR_CACHE_DIR``) builds CartPole PPO with ``compile=True`` (64x64 tanh, one
thread) and ``rlx.collect.compiled_loop.STEPS_PER_PROGRAM = K``, times the first T loop
(compiling included), then the median of 30 warm T loops. ``STEPS_PER_PROGRAM`` (4) comes
from this table. Results: ``benchmarks/experiments/results/t_loop_programs.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def one(steps: int, num_envs: int, horizon: int) -> dict[str, float]:
    """In this process: the first and the median warm T loop with ``steps`` per program."""
    import torch

    import rlx.collect.compiled_loop as compiled_loop
    from rlx import AlgorithmConfig
    from rlx.envs import CartPole

    torch.set_num_threads(1)
    compiled_loop.STEPS_PER_PROGRAM = steps
    algo = AlgorithmConfig(num_envs=num_envs, horizon=horizon, device="cpu", seed=0, compile=True,
                           model_config={"hiddens": [64, 64], "activation_fn": "tanh"}).build(CartPole)
    rollout = algo.rollout
    assert rollout.compiled_loop is not None and rollout.compiled_loop.steps_per_program <= steps
    start = time.perf_counter()
    rollout.begin(True)
    rollout.steps(False)
    first = time.perf_counter() - start
    loops = []
    for _ in range(30):
        start = time.perf_counter()
        rollout.steps(False)
        loops.append(time.perf_counter() - start)
    return {"steps_per_program": rollout.compiled_loop.steps_per_program, "first_s": round(first, 2),
            "loop_ms": round(1e3 * statistics.median(loops), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--horizon", type=int, default=32)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child process's K
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.num_envs, args.horizon)))
        return
    from common import EXPERIMENT_RESULTS, append_results, results_path

    rows = []
    for steps in args.steps:
        with tempfile.TemporaryDirectory() as cache:
            out = subprocess.run(
                [sys.executable, __file__, "--one", str(steps), "--num-envs", str(args.num_envs),
                 "--horizon", str(args.horizon)],
                env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}, capture_output=True, text=True, check=True)
        row = {"num_envs": args.num_envs, "horizon": args.horizon, **json.loads(out.stdout.strip().splitlines()[-1])}
        rows.append(row)
        print(f"{steps} steps a program: T loop {row['loop_ms']:.2f} ms, first loop (compiling) {row['first_s']:.1f} s",
              flush=True)
    print(f"results: {append_results(results_path('t_loop_programs', EXPERIMENT_RESULTS), rows, threads=1)}")


if __name__ == "__main__":
    main()
