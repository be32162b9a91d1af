"""PPO on the newer built-in envs: Acrobot, PointMass, MountainCarContinuous.

    python benchmarks/experiments/new_envs.py [--envs acrobot point_mass mountain_car_continuous]
                                  [--seeds 0 1 2] [--set config.gamma=0.99 ...] [--out FILE]

Trains each env with its YAML config (``configs/<env>_ppo.yaml``, the same run that
``rlx train`` makes) until the config's ``stop_at`` threshold on
``episodes/return_mean`` (the mean return of the episodes that ended during the last
``collect()``) holds, or ``trainer.max_env_steps`` runs out. It prints, per env and
seed, the best mean return, the env steps and the training wall-clock (collect and
update only), then the deterministic policy's mean return over 256 fresh episodes.

The threshold only counts once every sub-env has run for one full time limit: before
that, the episodes that have ended are the lucky short ones (a goal reached by chance)
and their mean return is biased upwards.

Thresholds (in the configs):

* Acrobot, -100: a random policy scores about -500 (rarely reaching the line);
  gymnasium's own "solved" bar for Acrobot-v1 is -100.
* PointMass, -1: a random policy scores about -190 and one that never reaches its goal
  cannot beat about -19; a hand-tuned PD controller reaches every goal in about 16
  steps and scores +0.3. Above -1 the stochastic policy reaches nearly every goal about
  as fast as that controller.
* MountainCarContinuous, 90: gymnasium's "solved" bar for MountainCarContinuous-v0;
  standing still scores 0, and a policy that reaches the goal pays for its pushes.

Appends one JSON line per env and seed to ``--out`` (``benchmarks/experiments/results/new_envs.jsonl``
by default; ``--out ''`` records nothing).
"""

from __future__ import annotations

import sys
from pathlib import Path

import argparse
import statistics
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import EXPERIMENT_RESULTS, ROOT, append_results, results_path, train_until
from rlx.run.trainer import evaluate_policy, load_run_config

METRIC = "episodes/return_mean"


def train_to_threshold(name: str, seed: int, overrides: list[str]) -> dict[str, Any]:
    """Train ``configs/<name>_ppo.yaml`` with ``seed`` until its threshold or its step budget.

    Returns:
        The threshold, whether and when it was reached, the best mean return, the env
        steps and training seconds, and the deterministic evaluation's metrics.
    """
    run = load_run_config(ROOT / "configs" / f"{name}_ppo.yaml", [f"config.seed={seed}", *overrides])
    threshold = run.trainer.stop_at[METRIC]
    algo = run.config.build(run.env_cls)
    warmup = getattr(algo.env, "max_episode_steps", 0) * algo.num_envs
    training = train_until(algo, METRIC, threshold, max_env_steps=run.trainer.max_env_steps, min_env_steps=warmup,
                           step_on_goal=True)
    env = run.env_cls(256, None, device=algo.device)
    evaluation = evaluate_policy(algo.policy, env, episodes=256, max_steps=2 * env.max_episode_steps)
    return {
        "env": name,
        "seed": seed,
        "overrides": overrides,
        "threshold": threshold,
        "reached": training.solved,
        "best": training.best,
        "env_steps": algo.env_steps,
        "train_s": training.seconds,
        **evaluation,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["acrobot", "point_mass", "mountain_car_continuous"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--set", dest="overrides", nargs="*", default=[], help="config overrides, as rlx train --set")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(results_path("new_envs", EXPERIMENT_RESULTS)))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.envs:
        results = []
        for seed in args.seeds:
            result = train_to_threshold(name, seed, args.overrides)
            results.append(result)
            status = "reached" if result["reached"] else "NOT reached"
            print(
                f"{name} seed {seed}: {status} {result['threshold']:g}; best {METRIC} {result['best']:.1f} after "
                f"{result['env_steps']} env steps, {result['train_s']:.1f} s; deterministic eval return "
                f"{result['eval/return_mean']:.1f}, length {result['eval/length_mean']:.1f}",
                flush=True,
            )
            if args.out:
                append_results(args.out, result)
        if len(results) > 1:
            print(
                f"{name}: reached {sum(r['reached'] for r in results)}/{len(results)} seeds; median "
                f"{statistics.median(r['env_steps'] for r in results):.0f} env steps, "
                f"{statistics.median(r['train_s'] for r in results):.1f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
