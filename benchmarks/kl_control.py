"""How well PPO's KL controls hold the KL each update reaches, on CartPole.

    python benchmarks/kl_control.py [--iterations 60] [--seeds 0 1 2] [--out FILE]

For each setting the KL of every ``step()`` is measured outside the algorithm, as a user
would: ``E[(r - 1) - log r]`` over the rollout, with the collect-time log-probabilities
and ``policy.evaluate`` after the step. Reported: the median over the last half of the run
of KL / target, per seed, and the median over seeds.

* adaptive LR, ``target_kl_div=0.002``, B=32, T=32, 4 epochs, with one minibatch per
  epoch, with 4 accumulated minibatches, and with 4 minibatches (issue #17's settings);
* the adaptive LR with 4 minibatches and rsl_rl's rules: applied before every
  minibatch's step (``kl_adaptive_lr_per_minibatch``), with each network's gradient
  clipped apart (``clip_grad_per_network``), and both;
* early stop, ``target_kl_div=0.002``, 10 epochs of 4 minibatches, lr 1e-3, and the same
  with no target.

Uses only the public API, so it runs on any rlx commit that has the settings' fields
(``PYTHONPATH=<checkout>``).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from common import append_results, results_path
from rlx import AlgorithmConfig
from rlx.envs import CartPole

TARGET = 0.002
BASE = dict(num_envs=32, horizon=32, device="cpu", gamma=0.99, num_sgd_iters=4,
            model_config={"hiddens": [64, 64], "activation_fn": "tanh"})
SETTINGS = {
    "adaptive, one minibatch": dict(target_kl_div=TARGET, kl_adaptive_lr=True),
    "adaptive, 4 accumulated": dict(target_kl_div=TARGET, kl_adaptive_lr=True, sgd_minibatch_size=256, accumulate_grads=True),
    "adaptive, 4 minibatches": dict(target_kl_div=TARGET, kl_adaptive_lr=True, sgd_minibatch_size=256),
    "adaptive per minibatch, 4 mb": dict(target_kl_div=TARGET, kl_adaptive_lr=True, sgd_minibatch_size=256,
                                         kl_adaptive_lr_per_minibatch=True),
    "adaptive, 4 mb, per-net clip": dict(target_kl_div=TARGET, kl_adaptive_lr=True, sgd_minibatch_size=256,
                                         clip_grad_per_network=True),
    "rsl_rl's rules, 4 mb": dict(target_kl_div=TARGET, kl_adaptive_lr=True, sgd_minibatch_size=256,
                                 kl_adaptive_lr_per_minibatch=True, clip_grad_per_network=True),
    "early stop, 10x4 lr 1e-3": dict(target_kl_div=TARGET, sgd_minibatch_size=256, num_sgd_iters=10),
    "no target, 10x4 lr 1e-3": dict(sgd_minibatch_size=256, num_sgd_iters=10),
}


def reached_kl(algo) -> float:
    """E[(r - 1) - log r] over the rollout after ``step()``."""
    T = algo.horizon
    buf = algo.buffer
    obs = buf.get("obs")[:, :T].reshape(-1, *buf.get("obs").shape[2:])
    actions = buf.get("actions")[:, :T].reshape(-1, *buf.get("actions").shape[2:])
    with torch.no_grad():
        log_ratio = algo.policy.evaluate(obs, actions).logp - buf.get("logp")[:, :T].reshape(-1, 1)
    return float((torch.expm1(log_ratio) - log_ratio).mean())


def run(setting: dict, seed: int, iterations: int) -> float:
    algo = AlgorithmConfig(**{**BASE, **setting, "seed": seed}).build(CartPole)
    kls = []
    for _ in range(iterations):
        algo.collect()
        algo.step()
        kls.append(reached_kl(algo))
    return statistics.median(kls[iterations // 2 :]) / TARGET


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default=str(results_path("kl_control")))
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name, setting in SETTINGS.items():
        ratios = [run(setting, seed, args.iterations) for seed in args.seeds]
        row = {"setting": name, "median_kl_over_target": statistics.median(ratios), "per_seed": ratios,
               "iterations": args.iterations}
        rows.append(row)
        print(f"{name:28s} median KL / target {row['median_kl_over_target']:6.2f}  per seed "
              + " ".join(f"{r:.2f}" for r in ratios), flush=True)
    append_results(args.out, rows)


if __name__ == "__main__":
    main()
