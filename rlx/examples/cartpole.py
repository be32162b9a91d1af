"""Train PPO on the built-in batched CartPole until it is solved.

    python -m rlx.examples.cartpole [--seed 0] [--max-env-steps 300000] [--device auto]

Prints one progress line per iteration and stops once the mean length of the episodes
that ended in an iteration reaches 475 (CartPole-v1 truncates at 500).
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from rlx import AlgorithmConfig
from rlx.envs import CartPole

SOLVED_LENGTH = 475.0


def cartpole_config(seed: int = 0, device: str = "auto") -> AlgorithmConfig:
    """The tuned PPO config for CartPole on a small CPU (about 2 s of training)."""
    return AlgorithmConfig(
        num_envs=32,
        horizon=64,
        num_sgd_iters=10,
        sgd_minibatch_size=512,
        optimizer_config={"lr": 2e-3},
        model_config={"hiddens": [64, 64], "activation_fn": "tanh"},
        gamma=0.99,
        gae_lambda=0.95,
        clip_param=0.2,
        vf_clip_param=None,
        max_grad_norm=0.5,
        normalize_rewards=False,
        device=device,
        seed=seed,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0, help="seed for torch's RNGs (default 0)")
    parser.add_argument("--max-env-steps", type=int, default=300_000, help="give up after this many env steps")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda', ...")
    args = parser.parse_args(argv)

    torch.set_num_threads(min(torch.get_num_threads(), 2))
    algo = cartpole_config(args.seed, args.device).build(CartPole)
    print(f"PPO on CartPole: {algo.num_envs} envs x {algo.horizon} steps per iteration on {algo.device}")
    start = time.perf_counter()
    iteration = 0
    while algo.env_steps < args.max_env_steps:
        collect_stats = algo.collect()
        step_stats = algo.step()
        iteration += 1
        elapsed = time.perf_counter() - start
        length = collect_stats["episodes/length_mean"]
        print(
            f"iter {iteration:4d}  env steps {algo.env_steps:8d}  "
            f"episode length {length:6.1f}  return {collect_stats['episodes/return_mean']:6.1f}  "
            f"kl {step_stats['monitors/kl_div']:.4f}  {algo.env_steps / elapsed:8.0f} steps/s"
        )
        if not math.isnan(length) and length >= SOLVED_LENGTH:
            print(f"solved: mean episode length {length:.1f} after {algo.env_steps} env steps in {elapsed:.1f} s")
            return 0
    print(f"not solved within {args.max_env_steps} env steps")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
