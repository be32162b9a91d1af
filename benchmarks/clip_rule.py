"""The gradient clip rule on the shipped PPO configs: joint norm (rlx's default) against
each network's own (``clip_grad_per_network``, rsl_rl's rule), side by side.

    python benchmarks/clip_rule.py [--configs configs/cartpole_ppo.yaml ...] [--seeds 0 1 2] [--threads 2] [--eval]

For each config and seed, trains it twice, interleaved, with the two rules and
everything else as shipped, until the config's ``stop_at`` holds or its budget is spent
(the Trainer's own stop conditions): env steps and training wall-clock to the goal,
whether it was reached, and the last mean episode return. With ``--eval`` (for the MuJoCo
configs, which train to a budget) the config's own evaluations run too, and each run
records tianshou's metric, the max over evaluations of the mean test return, and the
last evaluation's (``max_eval``, ``final_eval``). One JSON line per run in
``benchmarks/results/clip_rule.jsonl``; the medians per config and rule are printed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile

import torch
from common import ROOT, append_results, results_path

from rlx.config.run import load_run_config
from rlx.run.trainer import Trainer

CONFIGS = ["cartpole_ppo", "pendulum_ppo", "acrobot_ppo", "point_mass_ppo", "mountain_car_continuous_ppo"]


def train(config: str, seed: int, per_network: bool, evaluate: bool = False) -> dict:
    overrides = [f"config.seed={seed}", f"config.clip_grad_per_network={str(per_network).lower()}",
                 "trainer.progress=false", "trainer.checkpoint_every=0", "trainer.tensorboard=false"]
    run = load_run_config(config, overrides if evaluate else [*overrides, "trainer.eval_every=0"])
    algo = run.config.build(run.env_cls)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(algo, run.trainer, run_dir=run_dir if evaluate else None)
        last = trainer.run()
        evals = []
        if evaluate:
            with open(f"{run_dir}/metrics.jsonl") as f:
                rows = [json.loads(line) for line in f]
            evals = [r["eval/return_mean"] for r in rows if isinstance(r.get("eval/return_mean"), float)
                     and math.isfinite(r["eval/return_mean"])]
    reached = trainer.stop_reason is not None and not trainer.stop_reason.startswith("reached")  # a goal, not a budget
    row = {"env_steps": algo.env_steps, "wall_s": round(trainer.wall_s, 2), "reached": bool(reached),
           "return_mean": last.get("episodes/return_mean"), "stop_reason": trainer.stop_reason}
    if evals:
        row.update(max_eval=round(max(evals), 1), final_eval=round(evals[-1], 1), evaluations=len(evals))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=[str(ROOT / "configs" / f"{c}.yaml") for c in CONFIGS])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--eval", action="store_true", help="run the configs' evaluations; record max and final eval")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = results_path("clip_rule")
    for config in args.configs:
        results: dict[bool, list[dict]] = {False: [], True: []}
        for seed in args.seeds:
            for per_network in (False, True):
                row = train(config, seed, per_network, args.eval)
                results[per_network].append(row)
                append_results(out, {"config": config.split("/")[-1], "seed": seed,
                                     "rule": "per_network" if per_network else "joint", **row}, threads=args.threads)
        for per_network, rows in results.items():
            steps = statistics.median(r["env_steps"] for r in rows)
            wall = statistics.median(r["wall_s"] for r in rows)
            line = (f"{config.split('/')[-1]:>34} {'per-network' if per_network else 'joint':>11}: reached "
                    f"{sum(r['reached'] for r in rows)}/{len(rows)}, median {steps:,.0f} env steps, {wall:.1f} s")
            if all("max_eval" in r for r in rows):
                line += (f", max eval median {statistics.median(r['max_eval'] for r in rows):.1f}"
                         f", final eval median {statistics.median(r['final_eval'] for r in rows):.1f}")
            print(line, flush=True)
    print(f"results: {out}")


if __name__ == "__main__":
    main()
