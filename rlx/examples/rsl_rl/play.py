"""Play a checkpoint with an rsl_rl runner, as Isaac Lab's ``rsl_rl/play.py`` does: fewer
envs than training, ``load``, the inference policy, both exports, and the play loop that
resets a recurrent policy's state for the envs that ended."""

from __future__ import annotations

import argparse
import os

import torch

from rlx.runners import OnPolicyRunner  # the one line that differs from rsl_rl's script

from rlx.examples.rsl_rl.agent_cfg import agent_cfg, latest_checkpoint
from rlx.examples.windy_reach import EPISODE, WindyReach


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description="Play an RL agent trained with RSL-RL.")
    parser.add_argument("--num_envs", type=int, default=50)
    parser.add_argument("--device", type=str, default="cpu")
    parser.add_argument("--log_root", type=str, default=os.path.join("logs", "rsl_rl"))
    parser.add_argument("--checkpoint", type=str, default=None)
    parser.add_argument("--steps", type=int, default=2 * EPISODE)
    args = parser.parse_args(argv)

    cfg = agent_cfg()
    cfg["device"] = args.device
    resume_path = args.checkpoint or latest_checkpoint(os.path.abspath(os.path.join(args.log_root, cfg["experiment_name"])))
    env = WindyReach(args.num_envs, cfg["device"], seed=7)
    print(f"[INFO]: Loading model checkpoint from: {resume_path}")
    runner = OnPolicyRunner(env, cfg, log_dir=None, device=cfg["device"])
    runner.load(resume_path)
    policy = runner.get_inference_policy(device=args.device)

    export_model_dir = os.path.join(os.path.dirname(resume_path), "exported")
    runner.export_policy_to_jit(path=export_model_dir, filename="policy.pt")
    runner.export_policy_to_onnx(path=export_model_dir, filename="policy.onnx")

    obs = env.get_observations()
    returns, running = [], torch.zeros(args.num_envs, device=args.device)
    for _ in range(args.steps):
        with torch.inference_mode():
            actions = policy(obs)
            obs, rewards, dones, _ = env.step(actions)
            policy.reset(dones)  # a recurrent policy forgets the envs that ended
        running += rewards
        ended = dones.bool()
        returns.append(running[ended].clone())
        running[ended] = 0.0
    mean = float(torch.cat(returns).mean())  # SYNC: the play's result
    print(f"[INFO] Mean episode return over {args.steps} steps: {mean:.2f}")
    return mean


if __name__ == "__main__":
    main()
