"""PPO on the newer built-in envs: Acrobot, PointMass, MountainCarContinuous.

    python benchmarks/new_envs.py [--envs acrobot point_mass mountain_car_continuous] [--seed 0]

Trains each with its YAML config (``configs/<env>_ppo.yaml``) until the config's stop
condition or step budget and prints the best mean episode return (over the episodes that
ended in one iteration), the env steps and the training wall-clock. Appends to
``benchmarks/results/new_envs.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from pathlib import Path

import torch

from rlx.trainer import load_run_config

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
        start = time.perf_counter()
        while algo.env_steps < run.trainer.max_env_steps:
            value = algo.collect()[key]
            algo.step()
            if not math.isnan(value):
                best = max(best, value)
                if value >= threshold:
                    reached_at = algo.env_steps
                    break
        elapsed = time.perf_counter() - start
        status = f"reached {threshold:g}" if reached_at else f"NOT reached {threshold:g}"
        print(f"{name}: {status}; best {key} {best:.1f} after {algo.env_steps} env steps, {elapsed:.1f} s", flush=True)
        with open(ROOT / "benchmarks" / "results" / "new_envs.jsonl", "a") as f:
            f.write(json.dumps({"env": name, "seed": args.seed, "threshold": threshold, "reached": reached_at is not None,
                                "best": best, "env_steps": algo.env_steps, "train_s": elapsed,
                                "torch": torch.__version__, "commit": commit}) + "\n")


if __name__ == "__main__":
    main()
