"""The gradient clip rule on the shipped PPO configs: joint norm (rlx's default) against
each network's own (``clip_grad_per_network``, rsl_rl's rule), side by side.

    python benchmarks/clip_rule.py [--configs configs/cartpole_ppo.yaml ...] [--seeds 0 1 2] [--threads 2]

For each config and seed, trains it twice, interleaved, with the two rules and
everything else as shipped, until the config's ``stop_at`` holds or its budget is spent
(the Trainer's own stop conditions): env steps and training wall-clock to the goal,
whether it was reached, and the last mean episode return. One JSON line per run in
``benchmarks/results/clip_rule.jsonl``; the medians per config and rule are printed.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from common import ROOT, append_results, results_path
from rlx.config.run import load_run_config
from rlx.run.trainer import Trainer

CONFIGS = ["cartpole_ppo", "pendulum_ppo", "acrobot_ppo", "point_mass_ppo", "mountain_car_continuous_ppo"]


def train(config: str, seed: int, per_network: bool) -> dict:
    run = load_run_config(config, [f"config.seed={seed}", f"config.clip_grad_per_network={str(per_network).lower()}",
                                   "trainer.progress=false", "trainer.eval_every=0"])
    algo = run.config.build(run.env_cls)
    trainer = Trainer(algo, run.trainer)
    last = trainer.run()
    reached = trainer.stop_reason is not None and not trainer.stop_reason.startswith("reached")  # a goal, not a budget
    return {"env_steps": algo.env_steps, "wall_s": round(trainer.wall_s, 2), "reached": bool(reached),
            "return_mean": last.get("episodes/return_mean"), "stop_reason": trainer.stop_reason}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=[str(ROOT / "configs" / f"{c}.yaml") for c in CONFIGS])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = results_path("clip_rule")
    for config in args.configs:
        results: dict[bool, list[dict]] = {False: [], True: []}
        for seed in args.seeds:
            for per_network in (False, True):
                row = train(config, seed, per_network)
                results[per_network].append(row)
                append_results(out, {"config": config.split("/")[-1], "seed": seed,
                                     "rule": "per_network" if per_network else "joint", **row}, threads=args.threads)
        for per_network, rows in results.items():
            steps = statistics.median(r["env_steps"] for r in rows)
            wall = statistics.median(r["wall_s"] for r in rows)
            print(f"{config.split('/')[-1]:>34} {'per-network' if per_network else 'joint':>11}: reached "
                  f"{sum(r['reached'] for r in rows)}/{len(rows)}, median {steps:,.0f} env steps, {wall:.1f} s", flush=True)
    print(f"results: {out}")


if __name__ == "__main__":
    main()
