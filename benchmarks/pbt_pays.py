"""Does population-based training pay? PBT with 16 members against a same-size grid of
fixed learning rates, at equal env steps per member, over seeds.

    python benchmarks/pbt_pays.py [--config configs/pendulum_ppo.yaml] [--iterations 40] [--seeds 0 1 2]

The task is ``configs/pendulum_ppo.yaml`` (PPO on Pendulum), where the learning rate
matters: its return after a fixed budget swings by hundreds between 1e-4 and 3e-2. For
each seed, two populations of 16 members train for ``--iterations`` iterations each:

* **grid**: the 16 learning rates log-spaced over [``--low``, ``--high``], fixed;
* **PBT**: 16 learning rates drawn log-uniformly from the same range, then every
  ``--every`` iterations the bottom quarter by ``episodes/return_mean`` copies a
  top-quarter member and multiplies its LR by 0.8 or 1.25 (or, with probability 0.25,
  draws it afresh).

A member's result is its final ``episodes/return_mean`` (the mean of its last 5
reports). Per population: the median member and the best member. Over seeds: their IQM
with a 95% bootstrap interval. One JSON line per population in
``benchmarks/results/pbt_pays.jsonl``.
"""

from __future__ import annotations

import argparse
import math
import statistics

import torch

from common import ROOT, append_results, results_path
from rlx.config.run import load_run_config
from rlx.core.seed_stats import bootstrap_ci, iqm
from rlx.members.pbt import PBTConfig
from rlx.run.sweep import final_values, pbt_run_config, sweep_run_config
from rlx.run.trainer import Trainer


def train(run, iterations: int) -> tuple[list[float], float]:
    algo = run.config.build(run.env_cls)
    trainer = Trainer(algo, run.trainer)
    rows = []
    for _ in range(iterations):
        trainer._iteration(_NoSignals())  # the trainer's own iteration (PBT included), rows kept here
        rows.append(trainer.last_metrics)
    return final_values(rows, "episodes/return_mean", algo.num_seeds), trainer.wall_s


class _NoSignals:
    received = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "pendulum_ppo.yaml"))
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--low", type=float, default=1e-4)
    parser.add_argument("--high", type=float, default=3e-2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = results_path("pbt_pays")
    members = 16
    grid_lrs = [math.exp(math.log(args.low) + k * (math.log(args.high) - math.log(args.low)) / (members - 1))
                for k in range(members)]
    summary: dict[str, dict[str, list[float]]] = {"grid": {"median": [], "best": []}, "pbt": {"median": [], "best": []}}
    for seed in args.seeds:
        base = load_run_config(args.config, [f"config.seed={seed}", "trainer.progress=false", "trainer.stop_at=null",
                                             "trainer.eval_every=0", "trainer.tensorboard=false"])
        pbt = PBTConfig(members=members, every=args.every, hparams=["lr"], resample=0.25, seed=seed,
                        space={"lr": f"loguniform({args.low}, {args.high})"})
        runs = {"grid": sweep_run_config(base, [{"lr": lr} for lr in grid_lrs], 1), "pbt": pbt_run_config(base, pbt)}
        for name, run in runs.items():
            finals, wall = train(run, args.iterations)
            med, best = statistics.median(finals), max(finals)
            summary[name]["median"].append(med)
            summary[name]["best"].append(best)
            append_results(out, {"population": name, "seed": seed, "members": members, "iterations": args.iterations,
                                 "env_steps_per_member": args.iterations * run.config.num_envs * run.config.horizon,
                                 "median_member": med, "best_member": best, "finals": finals, "wall_s": round(wall, 1),
                                 "lr_range": [args.low, args.high], "every": args.every}, threads=args.threads)
            print(f"seed {seed} {name}: median member {med:.1f}, best {best:.1f} ({wall:.0f} s)", flush=True)
    for name, stats in summary.items():
        for which, values in stats.items():
            lo, hi = bootstrap_ci(values) if len(values) > 1 else (values[0], values[0])
            print(f"{name} {which} member: IQM {iqm(values):.1f} [{lo:.1f}, {hi:.1f}] over {len(values)} seeds")


if __name__ == "__main__":
    main()
