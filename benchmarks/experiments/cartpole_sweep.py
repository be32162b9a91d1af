"""Which PPO settings solve CartPole soonest in wall-clock on this machine?

    python benchmarks/experiments/cartpole_sweep.py [--seeds 0 1 2 3 4] [--budget-s 8] [--threads 2] [--start K] [--limit N]

A grid over (B, T) in {(32, 64), (64, 32), (64, 64), (128, 32), (16, 128)}, epochs in
{4, 6, 10}, minibatches per epoch in {1, 2, 4} and lr in {2e-3, 4e-3}, the rest as
``configs/cartpole_ppo.yaml`` (64x64 tanh, gamma 0.99, lambda 0.95, clip 0.2, grad clip
0.5, no value clip, no reward normalization). The goal and the clock are
``time_to_solve.py``'s: a mean episode length >= 475 over the episodes that ended in a
rollout, judged before training on it; training time only. Prints one line per setting
(solved seeds, median and worst seconds, env steps per seed) and appends it to
``benchmarks/experiments/results/cartpole_sweep.jsonl``. The whole grid takes about 30 minutes on 2
CPU cores; ``--start K`` skips the first K settings (to finish a grid run in parts), and
``--limit N`` stops after the N-th.
"""

from __future__ import annotations

import sys
from pathlib import Path

import argparse
import statistics

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import EXPERIMENT_RESULTS, append_results, results_path, train_until
from rlx import AlgorithmConfig
from rlx.envs import CartPole


def grid() -> list[dict]:
    settings = []
    for B, T in ((32, 64), (64, 32), (64, 64), (128, 32), (16, 128)):
        for epochs in (4, 6, 10):
            for minibatches in (1, 2, 4):
                for lr in (2e-3, 4e-3):
                    settings.append(dict(num_envs=B, horizon=T, num_sgd_iters=epochs, sgd_minibatch_size=B * T // minibatches,
                                         optimizer_config={"lr": lr}))
    return settings


def solve(setting: dict, seed: int, budget_s: float) -> tuple[int, float]:
    """``(env steps, seconds)`` to the goal, or ``(-1, budget_s)``."""
    algo = AlgorithmConfig(
        **setting, model_config={"hiddens": [64, 64], "activation_fn": "tanh"}, gamma=0.99, gae_lambda=0.95,
        clip_param=0.2, vf_clip_param=None, max_grad_norm=0.5, normalize_rewards=False, device="cpu", seed=seed,
    ).build(CartPole)
    run = train_until(algo, "episodes/length_mean", 475, budget_s=budget_s)
    return (run.env_steps, run.seconds) if run.solved else (-1, budget_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget-s", type=float, default=8.0, help="give up on a seed after this many seconds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--start", type=int, default=0, help="skip the first K settings of the grid")
    parser.add_argument("--limit", type=int, default=None, help="stop after the N-th setting of the grid")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for setting in grid()[args.start : args.limit]:
        runs = [solve(setting, seed, args.budget_s) for seed in args.seeds]
        seconds = [s for _, s in runs]
        row = {**setting, "seeds": args.seeds, "env_steps": [n for n, _ in runs], "seconds": seconds,
               "median_s": statistics.median(seconds), "max_s": max(seconds), "solved": sum(n > 0 for n, _ in runs)}
        append_results(results_path("cartpole_sweep", EXPERIMENT_RESULTS), row, threads=args.threads)
        print(f"B={setting['num_envs']:3d} T={setting['horizon']:3d} epochs={setting['num_sgd_iters']:2d} "
              f"minibatch={setting['sgd_minibatch_size']:4d} lr={setting['optimizer_config']['lr']:.0e}: solved "
              f"{row['solved']}/{len(runs)}, median {row['median_s']:.2f} s, worst {row['max_s']:.2f} s, "
              f"env steps {row['env_steps']}", flush=True)


if __name__ == "__main__":
    main()
