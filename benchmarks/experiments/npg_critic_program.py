"""NPG's critic minibatch as one compiled program against a compiled loss, on a CPU, side by side.

    python benchmarks/experiments/npg_critic_program.py [--num-envs 64] [--rounds 4] [--iterations 10]

Pendulum's NPG (T = 32, 256x256 networks, critic minibatches of 256 rows: 40 a step) with
``compile=True``, one thread. Two algorithms built with the same seed: one as rlx runs
(each critic minibatch one program: its passes' losses and backward, the clipped Adam
step), one whose critic minibatches run as ``critic_fallback`` runs them (a compiled
pass's loss, autograd's backward through its compiled backward, the Adam step eagerly).
Both warmed up alike, then timed in alternating blocks of ``--iterations`` ``step()``
calls after a ``collect()`` each, each side first in every other round; medians of the
blocks' medians. Results: ``benchmarks/experiments/results/npg_critic_program.jsonl``.
See docs/performance.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=10)
    args = parser.parse_args()
    import torch
    from common import EXPERIMENT_RESULTS, append_results, interleaved_ms, results_path

    from rlx import NPGConfig
    from rlx.core.compiling import WarmProgram
    from rlx.envs import Pendulum

    def timed_step(algo) -> float:
        algo.collect()
        start = time.perf_counter()
        algo.step()
        return time.perf_counter() - start

    torch.set_num_threads(1)
    rows = []
    for B in args.num_envs:
        config = NPGConfig(num_envs=B, horizon=32, device="cpu", seed=0, compile=True, critic_minibatch_size=256)
        program, loss_only = config.build(Pendulum), config.build(Pendulum)
        assert program.critic_fallback is None
        loss = WarmProgram(loss_only._critic_losses, device="cpu", dynamic=None)  # critic_fallback's program
        loss_only._critic_loss = lambda obs, returns: loss(returns.shape[0], obs, returns)
        loss_only._critic_update = loss_only.critic_minibatch
        ms = interleaved_ms({"program": program, "loss_only": loss_only}, args.rounds, args.iterations, timed_step)
        row = {"num_envs": B, "program_step_ms": round(ms["program"], 2), "loss_only_step_ms": round(ms["loss_only"], 2),
               "speedup": round(ms["loss_only"] / ms["program"], 3), "rounds": args.rounds,
               "iterations": args.iterations}
        rows.append(row)
        print(f"B={B:>5}: step() with the critic minibatch one program {ms['program']:.1f} ms, with a compiled loss "
              f"{ms['loss_only']:.1f} ms ({row['speedup']:.3f}x)", flush=True)
    append_results(results_path("npg_critic_program", EXPERIMENT_RESULTS), rows, threads=1)


if __name__ == "__main__":
    main()
