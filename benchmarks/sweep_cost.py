"""What a sweep in one process costs: a 16-member sweep (4 learning rates x 4 entropy
coefficients) of a shipped config against one member's run, to the same env steps per
member, side by side.

    python benchmarks/sweep_cost.py [--configs configs/cartpole_ppo.yaml ...] [--iterations 20] [--rounds 3] [--threads 1]

Each round trains, alternately, one member (the config as shipped) and the sweep
(``rlx sweep``'s population: ``config.num_seeds = 16`` and ``member_hparams``) for the
same number of iterations, timing ``collect()`` + ``step()`` from the first iteration on
(build excluded, first iteration included). One JSON line per run in
``benchmarks/results/sweep_cost_<device>.jsonl``; the medians and their ratio are printed
(goal on a CPU: the sweep within 4x one member's wall).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from common import ROOT, append_results, results_path
from rlx.config.run import load_run_config
from rlx.run.sweep import sweep_points, sweep_run_config

LRS = [3e-4, 1e-3, 3e-3, 1e-2]
ENTROPIES = [0.0, 0.001, 0.01, 0.03]


def timed(run, iterations: int) -> tuple[float, float]:
    algo = run.config.build(run.env_cls)
    start = time.perf_counter()
    for _ in range(iterations):
        algo.collect()
        algo.step()
    if algo.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, float(algo.env_steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+",
                        default=[str(ROOT / "configs" / f"{c}.yaml") for c in ("cartpole_ppo", "pendulum_ppo")])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = results_path(f"sweep_cost_{args.device.split(':')[0]}")
    points = sweep_points({"lr": LRS, "entropy_coeff": ENTROPIES}, None, {})
    for config in args.configs:
        one = load_run_config(config, [f"config.device={args.device}"])
        sweep = sweep_run_config(one, points, 1)
        walls: dict[str, list[float]] = {"one": [], "sweep": []}
        for r in range(args.rounds):
            for name, run in (("one", one), ("sweep", sweep)):
                wall, steps = timed(run, args.iterations)
                walls[name].append(wall)
                append_results(out, {"config": config.rsplit("/", 1)[-1], "run": name, "members": run.config.num_seeds,
                                     "iterations": args.iterations, "env_steps_per_member": steps, "wall_s": round(wall, 3),
                                     "round": r}, threads=args.threads, device=args.device)
        a, b = statistics.median(walls["one"]), statistics.median(walls["sweep"])
        print(f"{config.rsplit('/', 1)[-1]}: one member {a:.2f} s, 16-member sweep {b:.2f} s "
              f"(median of {args.rounds}): sweep / one = {b / a:.2f}x for 16x the members")


if __name__ == "__main__":
    main()
