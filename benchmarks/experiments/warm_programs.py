"""Compiled programs called directly against through dynamo, on a CPU, side by side.

    python benchmarks/experiments/warm_programs.py [--num-envs 64 1024] [--rounds 8] [--iterations 30] [--algo ppo|npg] [--only-scan]

vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs x 4 minibatches) with
``compile=True``, one thread. Two algorithms built with the same seed: one as rlx runs
(:class:`rlx.core.compiling.WarmProgram` calls the compiled code of the T loop's programs,
collect's tail, the minibatch update and the phases around the epochs directly once
compiled, checking their Python values once a collect and a step), one with every
:class:`WarmProgram` kept on dynamo's path (its fallback, set on that algorithm's
programs: guards skipped once warm by :func:`rlx.core.compiling.call_warm`). Both are
warmed up alike, then timed in alternating blocks of ``--iterations`` ``collect()`` +
``step()``, each side first in every other round (median ms an iteration per block, then
the median of the blocks), and their parameters compared bit for bit after the same
iterations (the draws differ from another process's: each side is seeded before each
block). ``--algo npg``: Pendulum's NPG (T = 32, critic minibatches of 256 rows), whose
natural step and critic loss are its own warm programs. ``--only-scan``: only the
program of PPO's scanned minibatch updates (:mod:`rlx.core.scanned`) on dynamo's path on
the second side, every other program called directly on both. Results:
``benchmarks/experiments/results/warm_programs.jsonl``. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--algo", choices=["ppo", "npg"], default="ppo")
    parser.add_argument("--only-scan", action="store_true")
    args = parser.parse_args()
    import torch
    from common import EXPERIMENT_RESULTS, append_results, interleaved_ms, results_path
    from ppo_settings import PPOSettings

    from rlx import NPGConfig
    from rlx.envs import CartPole, Pendulum

    def programs(algo):
        scans = [program for _, program in algo.scanned_updates._captures.values()] if getattr(
            algo, "scanned_updates", None) is not None else []
        if args.only_scan:
            return scans
        own = (algo.compiled_update.program, *algo.phase_programs) if args.algo == "ppo" else algo.warm_programs
        return (*own, *scans, algo.rollout.compiled_loop.program, algo.rollout.tail_warm)

    def timed_iteration(algo) -> float:
        start = time.perf_counter()
        algo.collect()
        algo.step()
        return time.perf_counter() - start

    torch.set_num_threads(1)
    rows = []
    for B in args.num_envs:
        if args.algo == "ppo":
            config, env = PPOSettings(num_envs=B, horizon=32, minibatches=4).rlx_config("cpu", seed=0, compile=True), CartPole
        else:  # Pendulum's NPG, its critic regressed in minibatches of 256 rows
            config = NPGConfig(num_envs=B, horizon=32, device="cpu", seed=0, compile=True, critic_minibatch_size=256)
            env = Pendulum
        direct, dynamo = config.build(env), config.build(env)
        for algo in (direct, dynamo):  # its programs made (the scan's at its first step)
            torch.manual_seed(0)
            algo.collect()
            algo.step()
        for program in programs(dynamo):  # made again through dynamo (from its cache) at the next call
            program._direct = lambda args, kwargs, program=program: program._guarded("timed through dynamo")
            program.programs.clear()
        sides = {"direct": direct, "dynamo": dynamo}
        iterations = max(2, args.iterations * 64 // B)
        ms = interleaved_ms(sides, args.rounds, iterations, timed_iteration)
        same = all(torch.equal(a, b) for a, b in zip(direct.policy.state_dict().values(),
                                                        dynamo.policy.state_dict().values()))
        fallback = [p.fallback for p in programs(direct)]
        row = {"algo": args.algo, "num_envs": B, "direct_ms": round(ms["direct"], 2), "dynamo_ms": round(ms["dynamo"], 2),
               "speedup": round(ms["dynamo"] / ms["direct"], 3), "same_parameters": same,
               "rounds": args.rounds, "iterations": iterations,
               "programs": "scan" if args.only_scan else "all"}
        rows.append(row)
        print(f"B={B:>5}: direct {ms['direct']:.2f} ms, through dynamo {ms['dynamo']:.2f} ms an iteration "
              f"({row['speedup']:.3f}x), parameters bit for bit the same: {same}; fallbacks {fallback}", flush=True)
    append_results(results_path("warm_programs", EXPERIMENT_RESULTS), rows, threads=1)


if __name__ == "__main__":
    main()
