"""PPO, NPG or TRPO on the built-in batched Pendulum until the mean episode return reaches -250.

    python benchmarks/pendulum.py --algo {ppo,npg,trpo} [--seeds 0 1 2] [--max-env-steps 2000000]

For each seed, prints the env steps and training wall-clock (imports and build excluded)
at which the mean return of the episodes that ended in one iteration first reaches the
threshold, then the medians over the seeds. Results are appended as JSON lines to
``benchmarks/results/pendulum.jsonl``.
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch

from common import append_results, results_path, train_until
from rlx import AlgorithmConfig, NPGConfig
from rlx.config import CommonConfig
from rlx.envs import Pendulum

THRESHOLD = -250.0


MODEL = {"hiddens": [64, 64], "activation_fn": "tanh"}


def pendulum_config(algo: str, seed: int, device: str = "cpu") -> CommonConfig:
    """The config this benchmark measures for ``algo``."""
    shared = dict(num_envs=64, horizon=64, optimizer_config={"lr": 1e-3}, model_config=MODEL, gamma=0.9,
                  gae_lambda=0.95, max_grad_norm=0.5, normalize_rewards=True, device=device, seed=seed)
    if algo in ("npg", "trpo"):
        return NPGConfig(**shared, max_kl=0.02, line_search=algo == "trpo", critic_minibatch_size=1024,
                         optim_critic_iters=5)
    return AlgorithmConfig(**shared, num_sgd_iters=10, sgd_minibatch_size=1024, clip_param=0.2, vf_clip_param=None)


def run(algo_name: str, seed: int, max_env_steps: int, device: str) -> dict:
    algo = pendulum_config(algo_name, seed, device).build(Pendulum)
    run = train_until(algo, "episodes/return_mean", THRESHOLD, max_env_steps=max_env_steps, step_on_goal=True)
    return {"algo": algo_name, "seed": seed, "solved": run.solved, "env_steps": run.env_steps, "train_s": run.seconds,
            "best_return": run.best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=["ppo", "npg", "trpo"], default="ppo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-env-steps", type=int, default=2_000_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = []
    for seed in args.seeds:
        r = run(args.algo, seed, args.max_env_steps, args.device)
        results.append(r)
        print(
            f"{args.algo} seed {seed}: {'solved' if r['solved'] else 'NOT solved'} at {r['env_steps']} env steps, "
            f"{r['train_s']:.1f} s, best return {r['best_return']:.1f}"
        )
    solved = [r for r in results if r["solved"]]
    if solved:
        print(
            f"median over {len(solved)}/{len(results)} solved seeds: "
            f"{statistics.median(r['env_steps'] for r in solved):.0f} env steps, "
            f"{statistics.median(r['train_s'] for r in solved):.1f} s"
        )
    append_results(results_path("pendulum"), results, threads=args.threads, device=args.device,
                   machine=platform.processor() or platform.machine())


if __name__ == "__main__":
    main()
