"""Recurrent PPO on the partially observed tasks: steps and wall-clock to solve, and what a
feedforward policy reaches with the same budget.

    python benchmarks/recurrent.py [--seeds 0 1 2] [--tasks cue_recall cartpole_no_velocity]
        [--threads 2]

Tasks, each from its shipped config (training time only: build and imports excluded):

* ``cue_recall``: ``configs/cue_recall_recurrent_ppo.yaml`` (CueRecall, delay 16) to a mean
  return >= 0.95; feedforward PPO (64x64 tanh MLP, the same PPO settings) for the same
  number of env steps, reporting its mean return over the last 20 collects (chance: 0).
* ``cartpole_no_velocity``: ``configs/cartpole_no_velocity_recurrent_ppo.yaml`` to a mean
  episode length >= 400; feedforward PPO with ``configs/cartpole_ppo.yaml``'s settings on
  the same env for the same number of env steps, reporting its best mean length.

Medians over the seeds go to stdout; every run is appended to
``benchmarks/results/recurrent.jsonl`` with the torch version, threads and git commit.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics

import torch

from common import ROOT, append_results, results_path, train_until
from rlx import AlgorithmConfig
from rlx.run.trainer import load_run_config

TASKS = {
    "cue_recall": ("cue_recall_recurrent_ppo.yaml", "episodes/return_mean", 0.95, 2_000_000),
    "cartpole_no_velocity": ("cartpole_no_velocity_recurrent_ppo.yaml", "episodes/length_mean", 400.0, 2_000_000),
}


def _feedforward(task: str, run, seed: int):
    if task == "cue_recall":
        fields = {f.name: getattr(run.config, f.name) for f in dataclasses.fields(AlgorithmConfig) if f.name != "model_config"}
        config = AlgorithmConfig(**{**fields, "seed": seed, "model_config": {"hiddens": [64, 64], "activation_fn": "tanh"}})
        return config.build(run.env_cls)
    cartpole = load_run_config(ROOT / "configs" / "cartpole_ppo.yaml", [f"config.seed={seed}"])
    return cartpole.config.build(run.env_cls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for task in args.tasks:
        file, key, threshold, budget = TASKS[task]
        rows = []
        for seed in args.seeds:
            run = load_run_config(ROOT / "configs" / file, [f"config.seed={seed}"])
            algo = run.config.build(run.env_cls)
            training = train_until(algo, key, threshold, max_env_steps=budget, step_on_goal=True)
            values, seconds, solved, steps = training.values, training.seconds, training.solved, training.env_steps
            ff = _feedforward(task, run, seed)
            # The feedforward policy trains for the same env steps, whatever it reaches.
            ff_values = train_until(ff, key, math.inf, max_env_steps=steps).values
            finite = [v for v in ff_values if not math.isnan(v)]
            ff_last = statistics.mean(finite[-20:]) if finite else math.nan
            row = {
                "task": task, "seed": seed, "key": key, "threshold": threshold, "solved": solved, "env_steps": steps,
                "seconds": seconds, "best": training.best,
                "feedforward_best": max(finite) if finite else math.nan, "feedforward_last20_mean": ff_last,
            }
            rows.append(row)
            print(
                f"{task} seed {seed}: recurrent {'solved' if solved else 'NOT solved'} ({key} {values[-1]:.2f}) in "
                f"{steps:,} env steps, {seconds:.1f} s; feedforward, same steps: best {row['feedforward_best']:.2f}, "
                f"last-20 mean {ff_last:.2f}",
                flush=True,
            )
            append_results(results_path("recurrent"), row, threads=args.threads)
        print(
            f"{task}: median {statistics.median(r['env_steps'] for r in rows):,.0f} env steps, "
            f"{statistics.median(r['seconds'] for r in rows):.1f} s; solved {sum(r['solved'] for r in rows)}/{len(rows)}; "
            f"feedforward median best {statistics.median(r['feedforward_best'] for r in rows):.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
