"""All-reduce overhead of data-parallel step() on CPU with gloo.

    python benchmarks/experiments/distributed_overhead.py [--num-envs 1024] [--horizon 32] [--repeats 7] [--algo ppo|npg]

Runs the same per-rank workload (num_envs envs, default PPO config with 16 minibatches)
once as a single process and once as 2 torchrun processes with gloo, each process using
one thread so that the two ranks do not compete for this machine's 2 cores. Reports the
median ``step()`` and ``collect()`` times of each and the 2-rank / 1-rank ratios; the
difference is the cost of the collectives (flat gradient all-reduce per minibatch,
statistics, normalizers), since the local work is identical. Appends to
``benchmarks/experiments/results/distributed_overhead.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import EXPERIMENT_RESULTS, append_results, results_path


def worker(args: argparse.Namespace) -> None:
    from rlx import AlgorithmConfig, NPGConfig
    from rlx.core import distributed as rdist
    from rlx.envs import CartPole

    torch.set_num_threads(1)
    rdist.init_from_env(device_type="cpu")
    common = dict(num_envs=args.num_envs, horizon=args.horizon, device="cpu", seed=0, gamma=0.99,
                  model_config={"hiddens": [64, 64], "activation_fn": "tanh"})
    n = args.num_envs * args.horizon
    if args.algo == "ppo":
        algo = AlgorithmConfig(**common, sgd_minibatch_size=n // 16, num_sgd_iters=4).build(CartPole)
    else:
        algo = NPGConfig(**common).build(CartPole)
    collect, step = [], []
    for i in range(args.repeats + 2):
        t0 = time.perf_counter()
        algo.collect()
        t1 = time.perf_counter()
        algo.step()
        t2 = time.perf_counter()
        if i >= 2:
            collect.append(t1 - t0)
            step.append(t2 - t1)
    if rdist.rank() == 0:
        Path(args.out).write_text(json.dumps({"collect_ms": 1e3 * statistics.median(collect),
                                              "step_ms": 1e3 * statistics.median(step)}))
    if rdist.is_distributed():
        torch.distributed.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--horizon", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--algo", choices=["ppo", "npg"], default="ppo")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    flags = ["--num-envs", str(args.num_envs), "--horizon", str(args.horizon), "--repeats", str(args.repeats),
             "--algo", args.algo, "--worker"]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in (1, 2):
            out = str(Path(tmp) / f"r{ranks}.json")
            if ranks == 1:
                cmd = [sys.executable, __file__, *flags, "--out", out]
            else:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
                cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                       "127.0.0.1", "--master-port", str(port), __file__, *flags, "--out", out]
            subprocess.run(cmd, check=True, env=env, capture_output=True)
            results[ranks] = json.loads(Path(out).read_text())
    one, two = results[1], results[2]
    print(f"{args.algo} B={args.num_envs} per rank, T={args.horizon}, 1 thread per rank, gloo:")
    print(f"  step:    1 rank {one['step_ms']:8.1f} ms   2 ranks {two['step_ms']:8.1f} ms   ratio {two['step_ms'] / one['step_ms']:.2f}")
    print(f"  collect: 1 rank {one['collect_ms']:8.1f} ms   2 ranks {two['collect_ms']:8.1f} ms   ratio {two['collect_ms'] / one['collect_ms']:.2f}")
    append_results(results_path("distributed_overhead", EXPERIMENT_RESULTS), {"algo": args.algo, "num_envs": args.num_envs,
                   "horizon": args.horizon, "one_rank": one, "two_ranks": two, "backend": "gloo"})


if __name__ == "__main__":
    main()
