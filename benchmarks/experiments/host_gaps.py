"""Where a compiled CPU iteration's host time goes: the gaps between its compiled programs.

    python benchmarks/experiments/host_gaps.py [--num-envs 64] [--iterations 60]

vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs x 4 minibatches) with
``compile=True``, one thread, 3 warm-up iterations; then ``--iterations`` of ``collect()``
+ ``step()`` with each entry into and exit from an inductor program timestamped (at
``CompiledFxGraph.__call__``, which adds about a microsecond a call). Every stretch of
time outside the programs is named by the programs around it (``P0`` ... in the order
first seen: the T loop's program, collect's tail, GAE and the batch, the gather, the
minibatch update, the statistics; ``collect-start``, ``collect-end``, ``step-start``,
``step-end`` for the calls' edges) and printed by its total an iteration: the Python
around the programs, the eager ops between them, the host syncs. Then the time of the
value checks among them (:class:`rlx.core.compiling.WarmProgram`: each program's first
call in a ``collect()`` or ``step()`` checks dynamo's guards on the Python values it
read), program by program. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=60)
    args = parser.parse_args()
    from ppo_settings import warm_compiled_cartpole
    from torch._inductor import output_code

    algo = warm_compiled_cartpole(args.num_envs, warmups=3)
    checks: dict[str, list[float]] = collections.defaultdict(list)
    for program in _warm_programs(algo):
        for entries in program.programs.values():
            for entry in entries:
                if entry[0] is not None:
                    entry[0] = _timed_check(entry[0], checks[program._func.__name__])
    names: dict[int, str] = {}
    events: list[tuple[str, float, float]] = []
    call = output_code.CompiledFxGraph.__call__

    def timed_call(self, inputs):
        start = time.perf_counter()
        out = call(self, inputs)
        events.append((names.setdefault(id(self), f"P{len(names)}"), start, time.perf_counter()))
        return out

    gaps: dict[str, list[float]] = collections.defaultdict(list)
    walls, inside = [], []
    output_code.CompiledFxGraph.__call__ = timed_call
    try:
        for _ in range(args.iterations):
            events.clear()
            t0 = time.perf_counter()
            algo.collect()
            t1 = time.perf_counter()
            algo.step()
            t2 = time.perf_counter()
            walls.append(t2 - t0)
            inside.append(sum(e - s for _, s, e in events))
            last, end = "collect-start", t0
            for name, s, e in events:
                if end < t1 <= s:  # collect() returned between these programs
                    gaps[f"{last} -> collect-end"].append(t1 - end)
                    last, end = "step-start", t1
                gaps[f"{last} -> {name}"].append(s - end)
                last, end = name, e
            gaps[f"{last} -> step-end"].append(t2 - end)
    finally:
        output_code.CompiledFxGraph.__call__ = call
    n = args.iterations
    print(f"B={args.num_envs}: {1e3 * statistics.median(walls):.2f} ms an iteration (median), "
          f"{1e3 * statistics.median(inside):.2f} ms in programs, {len(names)} programs")
    total = 0.0
    for key, times in sorted(gaps.items(), key=lambda kv: -sum(kv[1])):
        per_iteration = 1e3 * sum(times) / n
        total += per_iteration
        print(f"  {key:28s} {len(times) // n:3d} an iteration, median {1e6 * statistics.median(times):6.1f} us, "
              f"{per_iteration:.3f} ms an iteration")
    print(f"  outside the programs: {total:.3f} ms an iteration; of it the value checks:")
    for name, times in checks.items():
        print(f"  {name:28s} {len(times) // n:3d} an iteration, median {1e6 * statistics.median(times):6.1f} us")


def _warm_programs(algo) -> list:
    """The algorithm's warm programs: the T loop's, the tail's, the update's and the phases'."""
    rollout = algo.rollout
    found = [rollout.compiled_loop.program, rollout.tail_warm, algo.compiled_update.program, *algo.phase_programs]
    return [p for p in found if p is not None]


def _timed_check(check, times: list[float]):
    def timed(values):
        start = time.perf_counter()
        passed = check(values)
        times.append(time.perf_counter() - start)
        return passed

    return timed


if __name__ == "__main__":
    main()
