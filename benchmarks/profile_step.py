"""Where one ``step()`` spends its time on a GPU: wall clock against GPU busy time, kernels per step.

    python benchmarks/profile_step.py [--env CartPole] [--algo ppo] [--num-envs 65536]
        [--horizon 32] [--minibatch 32768] [--cudagraphs] [--top 15] [--out FILE]

It builds the config of :func:`rlx.run.bench.bench_one` (64x64 tanh MLP, 4 epochs), warms up
(graph captures included), then times ``collect()`` and ``step()`` with CUDA synchronised
and profiles one of each with :mod:`torch.profiler`. A step whose GPU busy time is far
below its wall clock is launch- or Python-bound (fewer, larger graphs help); one whose
busy time is close to it is bound by the kernels themselves (fewer, fused kernels help).
One JSON line per run is printed and appended to ``--out`` when given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from common import append_results
from torch.profiler import ProfilerActivity, profile


def _timed(fn, iters: int) -> float:
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _profiled(fn) -> tuple[float, int, list[tuple[str, float, int]]]:
    """GPU busy seconds, kernel count and the top kernels (name, seconds, calls) of one ``fn()``."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels: dict[str, list[float]] = {}
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            kernels.setdefault(evt.name, []).append(evt.device_time_total * 1e-6 if hasattr(evt, "device_time_total") else evt.cuda_time_total * 1e-6)
    busy = sum(sum(v) for v in kernels.values())
    count = sum(len(v) for v in kernels.values())
    top = sorted(((k, sum(v), len(v)) for k, v in kernels.items()), key=lambda x: -x[1])
    return busy, count, top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole")
    parser.add_argument("--algo", default="ppo", choices=["ppo", "npg"])
    parser.add_argument("--num-envs", type=int, default=65536)
    parser.add_argument("--horizon", type=int, default=32)
    parser.add_argument("--minibatch", type=int, default=32768)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--cudagraphs", action="store_true")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out")
    args = parser.parse_args()

    import rlx.envs
    from rlx import AlgorithmConfig, NPGConfig

    common = dict(num_envs=args.num_envs, horizon=args.horizon, device="cuda", seed=0, gamma=0.99,
                  model_config={"hiddens": [64, 64], "activation_fn": "tanh"})
    if args.algo == "ppo":
        config = AlgorithmConfig(**common, num_sgd_iters=args.epochs, sgd_minibatch_size=args.minibatch,
                                 cudagraphs=args.cudagraphs)
    else:
        config = NPGConfig(**common, critic_minibatch_size=args.minibatch)
    algo = config.build(getattr(rlx.envs, args.env))
    for _ in range(5):  # warm-ups and graph captures
        algo.collect()
        algo.step()
    collect_s = _timed(algo.collect, args.iters)
    algo.collect()
    step_s = _timed(algo.step, 1)
    algo.collect()
    steps = [step_s] + [_timed(lambda: (algo.collect(), algo.step()), 1) - collect_s for _ in range(args.iters - 1)]
    step_s = statistics.median(steps)
    algo.collect()
    step_busy, step_kernels, top = _profiled(algo.step)
    collect_busy, collect_kernels, _ = _profiled(algo.collect)
    n = args.num_envs * args.horizon
    row = {
        "device": torch.cuda.get_device_name(), "env": args.env, "algo": args.algo, "num_envs": args.num_envs,
        "horizon": args.horizon, "minibatch": args.minibatch, "epochs": args.epochs, "cudagraphs": args.cudagraphs,
        "collect_ms": collect_s * 1e3, "collect_gpu_busy_ms": collect_busy * 1e3, "collect_kernels": collect_kernels,
        "step_ms": step_s * 1e3, "step_gpu_busy_ms": step_busy * 1e3, "step_kernels": step_kernels,
        "end_to_end_steps_per_s": n / (collect_s + step_s),
        "top_step_kernels": [(name[:80], round(sec * 1e3, 3), calls) for name, sec, calls in top[: args.top]],
    }
    print(json.dumps(row))
    if args.out:
        append_results(args.out, row)


if __name__ == "__main__":
    main()
