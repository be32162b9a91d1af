"""rlx against rl8, side by side in one process, on rl8's own dummy envs.

    pip install 'rlx[bench]'     # rl8 1.0.0 (pulls mlflow-skinny and pandas)
    python benchmarks/compare_rl8.py [--num-envs 64 1024 4096] [--repeats 5] [--threads 2] [--device cpu]

Both libraries run rl8's ``DiscreteDummyEnv`` and ``ContinuousDummyEnv`` classes
unchanged, with the same settings: 256x256 separate ReLU actor and critic MLPs, T=32,
minibatch = the whole buffer, 4 epochs, rl8's env reset every collect
(``horizons_per_env_reset=1``), reward normalization on. For each B it alternates rl8 and
rlx iterations and reports medians of collect, step and end-to-end env steps/s, and the
rlx / rl8 ratio of each (above 1: rlx is faster); step samples/s here is N / step time
(``rlx bench`` counts N x epochs). rlx runs with its defaults, which include its own
implementation choices: the whole-buffer minibatch in 2048-row micro-batches on a CPU
(the same gradient) and fused Adam (the same update up to rounding). Its opt-in
switches, which rl8 lacks, are off unless asked for: ``--compile`` (``compile=True``)
and ``--amp`` (``enable_amp=True``: bf16 autocast in the update on a CPU, fp16 on CUDA;
rl8 stays float32). Every row records them. Two untimed warm-up iterations per library.
Appends to ``benchmarks/results/compare_rl8.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

import torch

import rlx


def _timed(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compile", action="store_true",
                        help="rlx side only: AlgorithmConfig(compile=True); the untimed first iteration compiles")
    parser.add_argument("--amp", action="store_true",
                        help="rlx side only: AlgorithmConfig(enable_amp=True), mixed-precision updates")
    args = parser.parse_args()
    try:
        import rl8
        from rl8.env import ContinuousDummyEnv, DiscreteDummyEnv
    except ImportError as e:
        raise SystemExit(f"compare_rl8 needs rl8: pip install 'rlx[bench]' ({e})")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    T = 32
    rows = []
    for env_cls in (DiscreteDummyEnv, ContinuousDummyEnv):
        for B in args.num_envs:
            theirs = rl8.AlgorithmConfig(num_envs=B, horizon=T, device=args.device).build(env_cls)
            ours = rlx.AlgorithmConfig(
                num_envs=B, horizon=T, device=args.device, seed=0, horizons_per_env_reset=1,
                model_config={"hiddens": [256, 256], "activation_fn": "relu"}, compile=args.compile,
                enable_amp=args.amp,
            ).build(env_cls)
            times = {k: [] for k in ("rl8_collect", "rl8_step", "rlx_collect", "rlx_step")}
            for i in range(args.repeats + 2):
                c, s = _timed(theirs.collect, device), _timed(theirs.step, device)
                c2, s2 = _timed(ours.collect, device), _timed(ours.step, device)
                if i >= 2:
                    times["rl8_collect"].append(c)
                    times["rl8_step"].append(s)
                    times["rlx_collect"].append(c2)
                    times["rlx_step"].append(s2)
            n = B * T
            row = {"env": env_cls.__name__, "num_envs": B}
            for lib in ("rl8", "rlx"):
                row[f"{lib}_collect_steps_per_s"] = n / statistics.median(times[f"{lib}_collect"])
                row[f"{lib}_step_samples_per_s"] = n / statistics.median(times[f"{lib}_step"])
                row[f"{lib}_end_to_end_steps_per_s"] = n / statistics.median(
                    [a + b for a, b in zip(times[f"{lib}_collect"], times[f"{lib}_step"])]
                )
            for phase in ("collect_steps_per_s", "step_samples_per_s", "end_to_end_steps_per_s"):
                row[f"ratio_{phase}"] = row[f"rlx_{phase}"] / row[f"rl8_{phase}"]
            rows.append(row)
            print(
                f"{env_cls.__name__:18s} B={B:5d}  collect rl8 {row['rl8_collect_steps_per_s']:10,.0f}/s rlx "
                f"{row['rlx_collect_steps_per_s']:10,.0f}/s ({row['ratio_collect_steps_per_s']:.2f}x)  step "
                f"{row['ratio_step_samples_per_s']:.2f}x  end-to-end rl8 {row['rl8_end_to_end_steps_per_s']:9,.0f}/s "
                f"rlx {row['rlx_end_to_end_steps_per_s']:9,.0f}/s ({row['ratio_end_to_end_steps_per_s']:.2f}x)",
                flush=True,
            )
    root = Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=root).stdout.strip()
    with open(root / "benchmarks" / "results" / "compare_rl8.jsonl", "a") as f:
        for row in rows:
            f.write(json.dumps({**row, "compile": args.compile, "amp": args.amp, "device": args.device, "threads": args.threads, "torch": torch.__version__,
                                "rl8": getattr(rl8, "__version__", "1.0.0"), "commit": commit}) + "\n")


if __name__ == "__main__":
    main()
