"""Train with an rsl_rl runner, as Isaac Lab's ``rsl_rl/train.py`` does (its shape: CLI
overrides, the log directory, the dumped config, the runner, the git state, ``learn``)."""

from __future__ import annotations

import argparse
import os
from datetime import datetime

import torch

from rlx.runners import OnPolicyRunner  # the one line that differs from rsl_rl's script

from rlx.examples.rsl_rl.agent_cfg import agent_cfg, latest_checkpoint
from rlx.examples.windy_reach import WindyReach


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train an RL agent with RSL-RL.")
    parser.add_argument("--num_envs", type=int, default=256)
    parser.add_argument("--max_iterations", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--device", type=str, default="cpu")
    parser.add_argument("--log_root", type=str, default=os.path.join("logs", "rsl_rl"))
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)

    cfg = agent_cfg()
    cfg["max_iterations"] = args.max_iterations or cfg["max_iterations"]
    cfg["seed"] = args.seed if args.seed is not None else cfg["seed"]
    cfg["device"] = args.device
    torch.manual_seed(cfg["seed"])

    log_root_path = os.path.abspath(os.path.join(args.log_root, cfg["experiment_name"]))
    log_dir = os.path.join(log_root_path, datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
    os.makedirs(log_dir, exist_ok=True)
    print(f"[INFO] Logging experiment in directory: {log_dir}")

    env = WindyReach(args.num_envs, cfg["device"], seed=cfg["seed"])
    runner = OnPolicyRunner(env, cfg, log_dir=log_dir, device=cfg["device"])
    runner.add_git_repo_to_log(__file__)
    if args.resume:
        resume_path = latest_checkpoint(log_root_path)
        print(f"[INFO]: Loading model checkpoint from: {resume_path}")
        runner.load(resume_path)
    runner.learn(num_learning_iterations=cfg["max_iterations"], init_at_random_ep_len=True)
    print(f"[INFO] Trained {runner.current_learning_iteration + 1} iterations; log_dir {runner.logger.log_dir}; "
          f"distributed {runner.is_distributed}")


if __name__ == "__main__":
    main()
