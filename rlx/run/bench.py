"""Throughput of rlx's collect() and step() over a grid of batch sizes, envs and algorithms.

    rlx bench [--quick]              (or: python benchmarks/throughput.py ...)
        [--quick] [--device cpu|cuda] [--num-envs 64 1024 ...]
        [--horizon 32] [--algos ppo npg recurrent_ppo a2c] [--envs CartPole Pendulum DiscreteDummyEnv]
        [--hiddens 64 64] [--amp] [--iters 5] [--threads 2]
    rlx bench --suite gpu [--dry-run] [...]   (benchmarks/gpu_suite.py: tests, throughput, checks, time to solve)

For each grid point it builds the algorithm, runs warm-up iterations, then times
``collect()`` and ``step()`` separately (synchronising CUDA before every clock read) over
``--iters`` iterations and reports medians:

* collect env-steps/s (B·T / collect time);
* update samples/s (N · epochs / step time; NPG counts one pass);
* end-to-end env-steps/s (B·T / (collect + step));
* peak memory over the grid point (build included): CUDA max allocated, or on CPU the
  process's peak RSS, reset before each point on Linux (elsewhere it is process-wide).

``recurrent_ppo`` is PPO with the default LSTM policy sized like the MLP: an encoder of
``hiddens[:-1]`` (or ``hiddens[0]`` for one layer) and an LSTM of ``hiddens[-1]`` units,
trained on sequences of 16 steps (or T when shorter), next to the feedforward rows.

Results are appended as JSON lines to ``benchmarks/results/throughput_<device>.jsonl``
and written as a markdown table to ``benchmarks/results/throughput_<device>.md`` (``--tag``
adds a suffix to both names; ``--out-dir`` elsewhere), with the torch version, device
name (the CPU model on a CPU), thread count, iteration counts and the git commit of the
rlx checkout, wherever the command runs from. ``--quick`` runs a smaller grid (B 64 and
1024; CartPole and DiscreteDummyEnv unless ``--envs`` names others) with the same 5
timed iterations after 2 warm-ups, in well under a minute on a CPU.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when the benchmark runs: `rlx --help` stays light
    import torch

__all__ = ["add_arguments", "bench_one", "cpu_name", "main", "run", "run_suite"]


def _sync(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak_memory(device: torch.device) -> None:
    """Start a grid point's peak-memory window: CUDA's peak allocated, or on Linux the
    process's peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs``), so each row
    reports its own peak rather than the largest of every row before it."""
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    gc.collect()  # the previous grid point's buffers go before the window opens,
    try:  # and glibc returns its freed heap to the OS (else it stays in the RSS)
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # not Linux: the peak stays process-wide (see _peak_memory_mb)
        pass


def _peak_memory_mb(device: torch.device) -> float:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024  # kB
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB elsewhere


def bench_config(env_name: str, algo_name: str, num_envs: int, horizon: int, device: str, hiddens: list[int],
                 amp: bool, cudagraphs: bool = False, compile: bool = False, num_seeds: int = 1) -> tuple[Any, type, int]:
    """The config :func:`bench_one` times for ``algo_name`` (``ppo``, ``ppo_4mb``, ``npg``,
    ``npg_4mb``, ``recurrent_ppo``, ``a2c``), its env class and its update epochs."""
    import rlx.envs
    from rlx import A2CConfig, AlgorithmConfig, NPGConfig, RecurrentAlgorithmConfig

    env_cls = getattr(rlx.envs, env_name)
    common = dict(
        num_envs=num_envs, horizon=horizon, device=device, seed=0, enable_amp=amp,
        model_config={"hiddens": hiddens, "activation_fn": "tanh"}, gamma=0.99,
    )
    if algo_name in ("ppo", "ppo_4mb"):
        # ppo: minibatches of at most 32768 samples (256 optimizer steps an update at
        # B=65536, T=32); ppo_4mb: four minibatches an epoch at any B, rsl_rl's default
        # for thousands of GPU envs (num_mini_batches=4).
        minibatch = min(num_envs * horizon, 32768) if algo_name == "ppo" else max(num_envs * horizon // 4, 1)
        config = AlgorithmConfig(**common, num_sgd_iters=4, sgd_minibatch_size=minibatch,
                                 cudagraphs=cudagraphs, compile=compile, num_seeds=num_seeds)
        epochs = config.num_sgd_iters
    elif algo_name == "recurrent_ppo":
        seq_len = min(16, horizon)
        common["model_config"] = {
            "hiddens": hiddens[:-1] or hiddens[:1], "hidden_size": hiddens[-1], "activation_fn": "tanh", "cell": "lstm",
        }
        minibatch = min(num_envs * horizon, 32768) // seq_len * seq_len
        config = RecurrentAlgorithmConfig(**common, num_sgd_iters=4, sgd_minibatch_size=minibatch, seq_len=seq_len)
        epochs = config.num_sgd_iters
    elif algo_name == "a2c":
        config = A2CConfig(**common, cudagraphs=cudagraphs, compile=compile)  # one whole-rollout step
        epochs = 1
    else:
        # npg: critic minibatches of at most 32768 samples (320 critic steps a step at
        # B=65536, T=32, 5 epochs); npg_4mb: four an epoch, as ppo_4mb's updates.
        critic = min(num_envs * horizon, 32768) if algo_name == "npg" else max(num_envs * horizon // 4, 1)
        config = NPGConfig(**common, critic_minibatch_size=critic, compile=compile, cudagraphs=cudagraphs)
        epochs = 1
    return config, env_cls, epochs


def bench_one(env_name: str, algo_name: str, num_envs: int, horizon: int, device: str, hiddens: list[int],
              amp: bool, iters: int, warmup: int, cudagraphs: bool = False, compile: bool = False,
              num_seeds: int = 1) -> dict:
    from rlx.env import resolve_device

    config, env_cls, epochs = bench_config(env_name, algo_name, num_envs, horizon, device, hiddens, amp, cudagraphs,
                                           compile, num_seeds)
    if cudagraphs:
        # Time replays only: the capture runs in the collect after the eager warm-ups.
        from rlx.core.cuda_graphs import GRAPH_WARMUPS

        warmup = max(warmup, GRAPH_WARMUPS + 1)
    _reset_peak_memory(resolve_device(device))
    algo = config.build(env_cls)
    dev = algo.device
    collect_s, step_s = [], []
    for i in range(warmup + iters):
        _sync(dev)
        t0 = time.perf_counter()
        algo.collect()
        _sync(dev)
        t1 = time.perf_counter()
        algo.step()
        _sync(dev)
        t2 = time.perf_counter()
        if i >= warmup:
            collect_s.append(t1 - t0)
            step_s.append(t2 - t1)
    n = num_envs * horizon * num_seeds  # every seed's transitions
    c, s = statistics.median(collect_s), statistics.median(step_s)
    return {
        "env": env_name, "algo": algo_name, "num_envs": num_envs, "num_seeds": num_seeds, "horizon": horizon,
        "hiddens": hiddens, "amp": amp,
        "cudagraphs": cudagraphs, "compile": compile and algo_name != "recurrent_ppo", "warmup": warmup,
        "collect_steps_per_s": n / c, "update_samples_per_s": n * epochs / s,
        "end_to_end_steps_per_s": n / statistics.median([a + b for a, b in zip(collect_s, step_s)]),
        "collect_ms": 1e3 * c, "step_ms": 1e3 * s, "peak_memory_mb": _peak_memory_mb(dev),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared by ``rlx bench`` and ``benchmarks/throughput.py``)."""
    parser.add_argument("--quick", action="store_true", help="a small grid (under a minute on a CPU)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--num-envs", type=int, nargs="+",
                        help="batch sizes B (default 64 1024 4096 16384, and 65536 on CUDA; 64 1024 with --quick)")
    parser.add_argument("--horizon", type=int, default=32, help="T, env steps per collect (default 32)")
    parser.add_argument("--algos", nargs="+", default=["ppo", "npg"], choices=["ppo", "ppo_4mb", "npg", "npg_4mb", "recurrent_ppo", "a2c"],
                        help="algorithms (default ppo npg)")
    parser.add_argument("--envs", nargs="+",
                        help="built-in env names (default CartPole Pendulum DiscreteDummyEnv; --quick: CartPole DiscreteDummyEnv)")
    parser.add_argument("--hiddens", type=int, nargs="+", default=[64, 64], help="MLP widths (default 64 64)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1],
                        help="PPO: agents trained at once (num_seeds), each with B envs, e.g. 1 4 16 64 (default 1); "
                        "throughputs count every seed's env steps")
    parser.add_argument("--amp", action="store_true", help="mixed precision (bf16; fp16 on a GPU before Ampere)")
    parser.add_argument("--cudagraphs", action="store_true", help="PPO and A2C: CUDA-graph the minibatch update, NPG its whole step, and collect's device work for graph-safe envs")
    parser.add_argument("--compile", action="store_true",
                        help="compile=True (PPO, A2C, NPG; warm-up iterations include compiling)")
    parser.add_argument("--iters", type=int, default=5, help="timed iterations per point, after warm-up (default 5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed warm-up iterations (default 2)")
    parser.add_argument("--threads", default="auto", metavar="N|auto",
                        help="torch CPU threads (default auto: the cores other processes leave free when the "
                        "benchmark starts; recorded with the results)")
    parser.add_argument("--tag", default="", help="suffix of the results files, e.g. recurrent")
    parser.add_argument("--out-dir", help="results directory (default: benchmarks/results of the rlx checkout, "
                        "else of the current directory)")
    parser.add_argument("--suite", nargs=argparse.REMAINDER, metavar="gpu ARGS",
                        help="instead of the grid, run a whole suite with the arguments after it: "
                        "gpu runs benchmarks/gpu_suite.py of the rlx checkout (see --suite gpu --help)")


def _command_line(args: argparse.Namespace) -> str:
    """The ``rlx bench`` command that reruns ``args``."""
    parts = ["rlx bench", "--device", args.device]
    parts += ["--quick"] if args.quick else []
    parts += ["--num-envs", *map(str, args.num_envs)] if args.num_envs else []
    parts += ["--horizon", str(args.horizon), "--algos", *args.algos, "--envs", *_envs(args)]
    parts += ["--hiddens", *map(str, args.hiddens), "--iters", str(args.iters), "--warmup", str(args.warmup)]
    parts += ["--seeds", *map(str, args.seeds)] if args.seeds != [1] else []
    parts += ["--threads", str(args.threads)]
    parts += ["--amp"] if args.amp else []
    parts += ["--cudagraphs"] if args.cudagraphs else []
    parts += ["--compile"] if args.compile else []
    parts += ["--tag", args.tag] if args.tag else []
    return " ".join(parts)


def _envs(args: argparse.Namespace) -> list[str]:
    if args.envs:
        return list(args.envs)
    return ["CartPole", "DiscreteDummyEnv"] if args.quick else ["CartPole", "Pendulum", "DiscreteDummyEnv"]


#: The checkout rlx runs from (its git commit is recorded), when it is one.
_REPO = Path(__file__).resolve().parents[2]


def _default_out_dir() -> Path:
    checkout = _REPO / "benchmarks"
    return checkout / "results" if checkout.is_dir() else Path.cwd() / "benchmarks" / "results"


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), for results files: timings belong to it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run_suite(argv: list[str]) -> int:
    """``--suite NAME ARGS``: the suite script's ``main(ARGS)``; the only suite is ``gpu``
    (``benchmarks/gpu_suite.py``, which ships with the repository, not the package)."""
    import importlib.util

    if not argv or argv[0] != "gpu":
        name = f"unknown suite {argv[0]!r}" if argv else "no suite named"
        raise ValueError(f"--suite: {name}; the only suite is 'gpu'")
    path = _REPO / "benchmarks" / "gpu_suite.py"
    if not path.is_file():
        raise FileNotFoundError(f"--suite gpu needs {path}: run it from a checkout of the rlx repository")
    spec = importlib.util.spec_from_file_location("gpu_suite", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module.main(argv[1:])


def run(args: argparse.Namespace) -> int:
    """Run the grid in ``args`` and write the results (or ``--suite``'s suite); returns 0."""
    import torch

    if getattr(args, "suite", None) is not None:
        return run_suite(args.suite)
    if args.threads == "auto":
        from rlx.run.threads import choose_threads

        args.threads = choose_threads()
    try:
        args.threads = int(args.threads)
    except ValueError:
        raise ValueError(f"--threads: must be a positive int or 'auto', got {args.threads!r}") from None
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.num_envs:
        sizes = args.num_envs
    elif args.quick:
        sizes = [64, 1024]
    else:
        sizes = [64, 1024, 4096, 16384] + ([65536] if device.type == "cuda" else [])
    envs = _envs(args)
    rows = []
    for env_name in envs:
        for algo_name in args.algos:
            for b, seeds in ((b, seeds) for b in sizes for seeds in (args.seeds if algo_name in ("ppo", "ppo_4mb") else [1])):
                row = bench_one(env_name, algo_name, b, args.horizon, args.device, args.hiddens, args.amp,
                                args.iters, args.warmup,
                                args.cudagraphs and algo_name != "recurrent_ppo",
                                args.compile and algo_name != "recurrent_ppo", num_seeds=seeds)
                rows.append(row)
                print(
                    f"{env_name:16s} {algo_name:4s} B={b:6d} S={seeds:3d}  collect {row['collect_steps_per_s']:12,.0f}/s  "
                    f"update {row['update_samples_per_s']:12,.0f}/s  end-to-end {row['end_to_end_steps_per_s']:12,.0f}/s  "
                    f"peak {row['peak_memory_mb']:8.0f} MB",
                    flush=True,
                )
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=_REPO
        ).stdout.strip()
    except OSError:
        commit = ""
    commit = commit or "unknown"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    meta = {"torch": torch.__version__, "device": str(device), "device_name": name, "threads": args.threads,
            "iters": args.iters, "warmup": args.warmup, "commit": commit, "date": time.strftime("%Y-%m-%d")}
    results = Path(args.out_dir) if args.out_dir else _default_out_dir()
    results.mkdir(parents=True, exist_ok=True)
    tag = ("cuda" if device.type == "cuda" else "cpu") + ("_cudagraphs" if args.cudagraphs else "")
    tag += "_compile" if args.compile else ""
    tag += f"_{args.tag}" if args.tag else ""
    with open(results / f"throughput_{tag}.jsonl", "a") as f:
        for row in rows:
            f.write(json.dumps({**meta, **row}) + "\n")  # a row's own warm-up count wins
    graph_note = ""
    if args.cudagraphs:
        from rlx.core.cuda_graphs import GRAPH_WARMUPS

        graph_note = f" (PPO with --cudagraphs: at least {GRAPH_WARMUPS + 1}, so that only replays are timed)"
    lines = [
        f"# rlx throughput on {name} ({meta['device']}), torch {meta['torch']}, {args.threads} threads, commit {commit}",
        "",
        f"Command: `{_command_line(args)}`; medians of {args.iters} iterations after {args.warmup} "
        f"warm-up iterations{graph_note}, "
        f"T={args.horizon}, MLP {args.hiddens}.",
        "",
        "| env | algo | B | seeds | collect steps/s | update samples/s | end-to-end steps/s | peak MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['env']} | {r['algo']} | {r['num_envs']} | {r.get('num_seeds', 1)} | {r['collect_steps_per_s']:,.0f} | "
            f"{r['update_samples_per_s']:,.0f} | {r['end_to_end_steps_per_s']:,.0f} | {r['peak_memory_mb']:,.0f} |"
        )
    (results / f"throughput_{tag}.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
