"""PPO on the newer built-in envs: Acrobot, PointMass, MountainCarContinuous.

    python benchmarks/new_envs.py [--envs acrobot point_mass mountain_car_continuous] [--seed 0]

Trains each with its YAML config (``configs/<env>_ppo.yaml``) until the config's stop
condition holds or the step budget runs out, and prints the env steps and training
wall-clock. The threshold only counts once every env has run for one full time limit:
before that, the episodes that end are the lucky short ones (a goal reached by chance)
and their mean return is biased upwards. Then the deterministic policy is evaluated on
256 fresh episodes (``eval/return_mean``). Appends to ``benchmarks/results/new_envs.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from pathlib import Path

import torch

from rlx.trainer import evaluate_policy, load_run_config

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["acrobot", "point_mass", "mountain_car_continuous"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    for name in args.envs:
        run = load_run_config(ROOT / "configs" / f"{name}_ppo.yaml", [f"config.seed={args.seed}"])
        algo = run.config.build(run.env_cls)
        (key, threshold), = run.trainer.stop_at.items()
        best, reached_at = -math.inf, None
        warmup = getattr(algo.env, "max_episode_steps", 0) * algo.num_envs
        start = time.perf_counter()
        while algo.env_steps < run.trainer.max_env_steps:
            value = algo.collect()[key]
            algo.step()
            if not math.isnan(value) and algo.env_steps >= warmup:
                best = max(best, value)
                if value >= threshold:
                    reached_at = algo.env_steps
                    break
        elapsed = time.perf_counter() - start
        env = run.env_cls(256, None, device=algo.device)
        limit = getattr(env, "max_episode_steps", 1000)
        evaluation = evaluate_policy(algo.policy, env, episodes=256, max_steps=2 * limit)
        status = f"reached {threshold:g}" if reached_at else f"NOT reached {threshold:g}"
        print(f"{name}: {status}; best {key} {best:.1f} after {algo.env_steps} env steps, {elapsed:.1f} s; "
              f"deterministic eval return {evaluation['eval/return_mean']:.1f} over "
              f"{evaluation['eval/episodes']:.0f} episodes", flush=True)
        with open(ROOT / "benchmarks" / "results" / "new_envs.jsonl", "a") as f:
            f.write(json.dumps({"env": name, "seed": args.seed, "threshold": threshold, "reached": reached_at is not None,
                                "best": best, "env_steps": algo.env_steps, "train_s": elapsed, **evaluation,
                                "torch": torch.__version__, "commit": commit}) + "\n")


if __name__ == "__main__":
    main()
