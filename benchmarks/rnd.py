"""Random network distillation where exploration is the hard part: MountainCarContinuous
with and without RND's novelty bonus.

    python benchmarks/rnd.py [--seeds 0 1 2] [--max-env-steps 1000000] [--weight 1.0] [--threads 2]

``configs/mountain_car_continuous_ppo.yaml`` finds the goal because it normalizes the
observations (the velocity is within +-0.07); without ``normalize_obs`` its PPO had not
found it after 3M env steps (its header). Here both arms drop ``normalize_obs``; the RND
arm adds ``rnd: {weight: 100, normalize_state: true, learning_rate: 1e-4}`` (its state
normalized, so the bonus sees the velocity). Tried on seed 0 first, 1M env steps: weight
1 with the intrinsic reward normalized (``normalize_reward``: with gamma 0.999 its
discounted return's std is large, and the bonus vanishes) and predictor LR 1e-3 ended at
-97 (PPO alone -87); weight 1, LR 1e-4, unnormalized at +29; weight 100 at +79. Each run trains until the mean return
reaches 90 (gymnasium's "solved") or the budget is spent. One JSON line per run in
``benchmarks/results/rnd.jsonl``: env steps and wall-clock to the goal, whether it was
reached, the last mean return.
"""

from __future__ import annotations

import argparse

import torch

from common import ROOT, append_results, results_path
from rlx.config.run import load_run_config
from rlx.run.trainer import Trainer


def train(seed: int, rnd: dict | None, max_env_steps: int) -> dict:
    run = load_run_config(ROOT / "configs" / "mountain_car_continuous_ppo.yaml",
                          [f"config.seed={seed}", "config.normalize_obs=false", "trainer.progress=false",
                           f"trainer.max_env_steps={max_env_steps}"])
    if rnd is not None:
        import dataclasses

        run = dataclasses.replace(run, config=dataclasses.replace(run.config, rnd=rnd))
    algo = run.config.build(run.env_cls)
    trainer = Trainer(algo, run.trainer)
    last = trainer.run()
    reached = trainer.stop_reason is not None and trainer.stop_reason.startswith("episodes/return_mean")
    return {"env_steps": algo.env_steps, "wall_s": round(trainer.wall_s, 1), "reached": bool(reached),
            "return_mean": last.get("episodes/return_mean"), "stop_reason": trainer.stop_reason}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-env-steps", type=int, default=1_000_000)
    parser.add_argument("--weight", type=float, default=100.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rnd = {"weight": args.weight, "normalize_state": True, "normalize_reward": False, "predictor_hiddens": [64, 64],
           "target_hiddens": [64, 64], "embedding_dim": 16, "learning_rate": 1e-4}
    out = results_path("rnd")
    for seed in args.seeds:
        for arm, settings in (("ppo", None), ("ppo+rnd", rnd)):
            row = train(seed, settings, args.max_env_steps)
            append_results(out, {"arm": arm, "seed": seed, **row, "rnd": settings,
                                 "config": "mountain_car_continuous_ppo.yaml, normalize_obs false"}, threads=args.threads)
            print(f"seed {seed} {arm}: {'reached 90' if row['reached'] else 'did not reach 90'} after "
                  f"{row['env_steps']:,} env steps ({row['wall_s']} s), last return {row['return_mean']}", flush=True)


if __name__ == "__main__":
    main()
