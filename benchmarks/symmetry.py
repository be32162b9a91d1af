"""Symmetry augmentation on WindyReach: normalized return with and without mirrored twins.

    python benchmarks/symmetry.py [--seeds 0 1 2] [--eval-at 10 20 30] [--threads 1]

rlx PPO (256 envs x 24 steps, [64, 64] ELU, 5 epochs x 4 minibatches, adaptive LR with
target KL 0.01, rewards unscaled) on :class:`rlx.examples.windy_reach.WindyReach`, with
and without ``symmetry_augment`` (its ``mirror`` flips the x components). The
deterministic policy is evaluated on 512 fresh episodes after each ``--eval-at``
iteration; 0 is the random policy's return and 1 the PD controller's. Results:
``benchmarks/results/symmetry.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from common import append_results, results_path
from rlx import AlgorithmConfig
from rlx.envs import RslRlVecEnv
from rlx.examples.windy_reach import WindyReach, episode_return, mirror, pd_controller


def curve(augment: bool, seed: int, eval_at: list[int]) -> list[float]:
    config = AlgorithmConfig(
        num_envs=256, horizon=24, num_sgd_iters=5, sgd_minibatch_size=256 * 24 // 4, vf_clip_param=0.2, vf_coeff=1.0,
        entropy_coeff=0.005, gamma=0.99, max_grad_norm=1.0, optimizer_config={"lr": 1e-3}, kl_adaptive_lr=True,
        target_kl_div=0.01, model_config={"hiddens": [64, 64], "activation_fn": "elu"},
        obs_groups={"actor": ["policy"], "critic": ["policy", "critic"]}, normalize_rewards=False, device="cpu",
        seed=seed, symmetry_fn=mirror if augment else None, symmetry_augment=augment)
    algo = config.build(RslRlVecEnv.factory(lambda n, d: WindyReach(n, d, seed=seed)))
    returns = []
    for i in range(1, max(eval_at) + 1):
        algo.collect()
        algo.step()
        if i in eval_at:
            returns.append(episode_return(lambda o: algo.policy.act(o, deterministic=True).env_actions, 512, "cpu"))
    return returns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-at", type=int, nargs="+", default=[10, 20, 30])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    random = episode_return(lambda obs: torch.randn(obs.batch_size[0], 2), 512, "cpu")
    pd = episode_return(pd_controller, 512, "cpu")
    rows = []
    for augment in (False, True):
        curves = [[(r - random) / (pd - random) for r in curve(augment, seed, args.eval_at)] for seed in args.seeds]
        for seed, c in zip(args.seeds, curves):
            rows.append({"augment": augment, "seed": seed, "eval_at": args.eval_at, "normalized_returns": [round(x, 4) for x in c]})
        medians = [statistics.median(c[i] for c in curves) for i in range(len(args.eval_at))]
        print(f"{'augmented' if augment else 'plain':>9}: median " + " / ".join(f"{m:.3f}" for m in medians)
              + f" at {args.eval_at}; per seed " + "; ".join(" / ".join(f"{x:.2f}" for x in c) for c in curves), flush=True)
    append_results(results_path("symmetry"), rows, threads=args.threads)


if __name__ == "__main__":
    main()
