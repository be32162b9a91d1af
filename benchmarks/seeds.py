"""S seeds in one process against one seed: wall-clock to the stop threshold, side by side.

    python benchmarks/seeds.py [--configs configs/cartpole_ppo.yaml configs/pendulum_ppo.yaml]
        [--seeds 8] [--repeats 3] [--threads 2]

For each shipped config, trains it with ``num_seeds = 1`` and with ``num_seeds = S``
(``rlx train CONFIG --seeds S``: one process, S agents, S * B sub-envs), alternating the
two ``--repeats`` times, each until the config's ``stop_at`` holds (for S seeds: until
every seed has met it) or its budget is spent. Reported per config: the median
wall-clock of each (training only, as the Trainer counts it, build excluded), the
ratio S-seeds / 1-seed (issue #20's goal: at most 2x for 8 seeds), and how many seeds
reached the threshold. One JSON line per run goes to ``benchmarks/results/seeds.jsonl``
and a table to ``benchmarks/results/seeds.md``.

The throughput of S = 1, 4, 16, 64 seeds at a fixed B per seed is ``rlx bench``'s:
``rlx bench --algos ppo --envs CartPole --num-envs 64 --seeds 1 4 16 64 --tag seeds``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from common import RESULTS, ROOT, append_results, results_path, run_fields
from rlx.config.run import load_run_config
from rlx.run.trainer import Trainer


def train_once(config_path: str, seeds: int) -> dict:
    run = load_run_config(config_path, [f"config.num_seeds={seeds}"])
    algo = run.config.build(run.env_cls)
    trainer = Trainer(algo, run.trainer)
    trainer.run()
    rows = trainer.last_metrics
    if seeds > 1:
        reached = int(sum(algo.seeds._done_host))
    else:
        reached = int(trainer.stop_reason is not None and "=" in trainer.stop_reason)
    return {"config": Path(config_path).name, "seeds": seeds, "wall_s": trainer.wall_s, "env_steps": algo.env_steps,
            "iterations": trainer.iteration, "reached": reached, "stop_reason": trainer.stop_reason,
            "final_return_mean": rows.get("episodes/return_mean")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["configs/cartpole_ppo.yaml", "configs/pendulum_ppo.yaml"])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--table", default="seeds.md", help="markdown table's name in benchmarks/results/")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    meta = run_fields()
    commit = meta["commit"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    table = []
    for config in args.configs:
        runs: dict[int, list[dict]] = {1: [], args.seeds: []}
        for _ in range(args.repeats):
            for seeds in (1, args.seeds):  # interleaved: drift hits both alike
                row = train_once(str(ROOT / config), seeds)
                runs[seeds].append(row)
                append_results(results_path("seeds"), row, threads=args.threads)
                print(f"{config} seeds={seeds}: {row['wall_s']:.1f} s, {row['env_steps']:,} env steps per seed, "
                      f"{row['reached']}/{seeds} reached ({row['stop_reason']})", flush=True)
        one = statistics.median(r["wall_s"] for r in runs[1])
        many = statistics.median(r["wall_s"] for r in runs[args.seeds])
        reached = min(r["reached"] for r in runs[args.seeds])
        steps = [statistics.median(r["env_steps"] for r in runs[k]) for k in (1, args.seeds)]
        per_it = [statistics.median(r["wall_s"] / max(r["iterations"], 1) for r in runs[k]) for k in (1, args.seeds)]
        table.append(f"| {config} | {one:.1f} | {many:.1f} | {many / one:.2f}x | {steps[0]:,.0f} / {steps[1]:,.0f} | "
                     f"{per_it[0]:.3f} / {per_it[1]:.3f} ({per_it[1] / per_it[0]:.2f}x) | {reached}/{args.seeds} |")
    lines = [
        f"# {args.seeds} seeds in one process against one seed ({meta['cpu']}, {args.threads} threads, "
        f"torch {meta['torch']}, commit {commit}, {meta['date']})", "",
        f"Command: `python benchmarks/seeds.py --configs {' '.join(args.configs)} --seeds {args.seeds} "
        f"--repeats {args.repeats} --threads {args.threads}`. Training wall-clock to the config's stop_at (every "
        f"seed's, for {args.seeds} seeds), medians of {args.repeats} interleaved runs.", "",
        f"| config | 1 seed (s) | {args.seeds} seeds (s) | ratio | env steps per seed (1 / {args.seeds} seeds, median) | "
        f"s per iteration (1 / {args.seeds} seeds) | seeds that reached it (worst run) |",
        "|---|---|---|---|---|---|---|", *table,
    ]
    (RESULTS / args.table).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
