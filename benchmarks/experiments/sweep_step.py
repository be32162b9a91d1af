"""Where a 16-member CartPole sweep's iteration goes on a CPU, and what ``compile=True``
does to it, against one member.

    python benchmarks/experiments/sweep_step.py [--threads 1] [--rounds 5] [--profile]

Builds ``configs/cartpole_ppo.yaml`` as one member and as ``rlx sweep``'s 4 learning rates
x 4 entropy coefficients, each eager and with ``compile=True`` (the fused update, for
16 members too since 2026-11-25), warms each up
for 2 iterations, then times ``collect()`` + ``step()`` alternately: medians in ms.
``--profile`` prints ``torch.profiler``'s top ops of one sweep iteration (``--profile-mode``:
eager or compiled).
Measured 2026-11-25 (2-core AMD EPYC, 1 thread): one member 133 ms eager, 47 compiled;
the sweep 980 eager, 616 compiled with the loss-only compile; the profile had 38% in the
batched matmuls and 41% in ``tanh`` and its backward. With the fused S-member update:
one member 116 eager, 44 compiled; the sweep 998 eager, 492 compiled, 62% of it in the
batched matmuls.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rlx.config.run import load_run_config  # noqa: E402
from rlx.run.sweep import sweep_points, sweep_run_config  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-mode", default="sweep eager", choices=["sweep eager", "sweep compile"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    one = load_run_config(ROOT / "configs" / "cartpole_ppo.yaml", [])
    points = sweep_points({"lr": [3e-4, 1e-3, 3e-3, 1e-2], "entropy_coeff": [0, 0.001, 0.01, 0.03]}, None, {})
    sweep = sweep_run_config(one, points, 1)
    configs = {"one eager": one.config, "one compile": dataclasses.replace(one.config, compile=True),
               "sweep eager": sweep.config, "sweep compile": dataclasses.replace(sweep.config, compile=True)}
    algos = {}
    for name, config in configs.items():
        algo = config.build(one.env_cls)
        for _ in range(2):
            algo.collect()
            algo.step()
        algos[name] = algo
    times: dict[str, list[float]] = {name: [] for name in algos}
    for _ in range(args.rounds):
        for name, algo in algos.items():
            start = time.perf_counter()
            algo.collect()
            algo.step()
            times[name].append(time.perf_counter() - start)
    for name, values in times.items():
        print(f"{name}: {1e3 * statistics.median(values):.0f} ms per iteration")
    if args.profile:
        from torch.profiler import profile

        algo = algos[args.profile_mode]
        with profile() as prof:
            algo.collect()
            algo.step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
