"""Time one NPG step() against one PPO step() on the same buffer, and NPG's own modes.

    python benchmarks/experiments/npg_vs_ppo_step.py [--num-envs 4096] [--horizon 32] [--repeats 5] [--threads 2]
        [--npg-modes default whole compile]

Both algorithms use their default configs (256x256 ReLU actor and critic; PPO: 4 epochs
over the whole buffer as one minibatch, and a second PPO with 8192-sample minibatches;
NPG: 10 CG iterations on a 20% subsample, 5 critic epochs). NPG and TRPO
(``line_search=True``) run in each of ``--npg-modes``: ``default`` (on a CPU, passes of
``micro_batch_size`` rows), ``whole`` (``micro_batch_size=0``: whole-batch passes, rlx
before 2026-11-25) and ``compile`` (``compile=True``: the natural step as one program).
PPO collects one CartPole buffer, which is copied into every algorithm's; then the steps
run interleaved, ``--repeats`` times each after one warm-up (which compiles), and the
medians and their ratios are printed and appended to
``benchmarks/experiments/results/npg_vs_ppo_step.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import argparse
import platform
import statistics
import time

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import EXPERIMENT_RESULTS, append_results, results_path
from rlx import AlgorithmConfig, NPGConfig
from rlx.envs import CartPole


def _time_step(algo, buffer) -> float:
    algo.buffer.update_(buffer)
    algo._buffered = True
    if algo.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    algo.step()
    if algo.device.type == "cuda":
        torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--horizon", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--npg-modes", nargs="+", default=["default", "whole", "compile"],
                        choices=["default", "whole", "compile"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    common = dict(num_envs=args.num_envs, horizon=args.horizon, device=args.device, seed=0, gamma=0.99)
    algos = {
        "ppo": AlgorithmConfig(**common).build(CartPole),
        "ppo_mb8192": AlgorithmConfig(**common, sgd_minibatch_size=8192).build(CartPole),
    }
    modes = {"default": {}, "whole": {"micro_batch_size": 0}, "compile": {"compile": True}}
    for mode in args.npg_modes:
        suffix = "" if mode == "default" else f"_{mode}"
        algos[f"npg{suffix}"] = NPGConfig(**common, **modes[mode]).build(CartPole)
        algos[f"trpo{suffix}"] = NPGConfig(**common, line_search=True, **modes[mode]).build(CartPole)
    algos["ppo"].collect()
    buffer = algos["ppo"].buffer.clone()
    times: dict[str, list[float]] = {name: [] for name in algos}
    for name, algo in algos.items():  # warm-up
        _time_step(algo, buffer)
    for _ in range(args.repeats):
        for name, algo in algos.items():
            times[name].append(_time_step(algo, buffer))
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, ms in medians.items():
        print(f"{name:11s} step median {ms:9.1f} ms  (runs: {', '.join(f'{t:.0f}' for t in times[name])})")
    for name in (n for n in medians if not n.startswith("ppo")):
        for base in ("ppo", "ppo_mb8192"):
            print(f"{name} / {base}: {medians[name] / medians[base]:.2f}x")
        family = name.split("_")[0]
        if name != family and family in medians:
            print(f"{name} / {family}: {medians[name] / medians[family]:.2f}x")
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    append_results(results_path("npg_vs_ppo_step", EXPERIMENT_RESULTS), {
        "num_envs": args.num_envs, "horizon": args.horizon, "median_ms": medians, "device": args.device,
        "device_name": device_name, "threads": args.threads,
    })


if __name__ == "__main__":
    main()
