"""A step's minibatch updates as one scanned program against one program per update, on a CPU.

    python benchmarks/experiments/scan_updates.py [--num-envs 64] [--rounds 40]
    python benchmarks/experiments/scan_updates.py --cold   # first iterations from empty caches

Builds vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs x 4 minibatches) with
``compile=True`` twice in one process: one runs its 16 updates as one program
(``rlx.core.scanned.ScannedCalls``, the default), the other calls the compiled update 16
times (``scanned_updates`` set to ``None``). Both warm up, then ``collect()`` and ``step()``
alternate between them, one thread; prints the medians of ``step()`` and of the whole
iteration, and whether one step from the same state and RNG gives both the same parameters
bit for bit. With ``--cold``, instead: each side's first iteration (compiling) in a process
of its own with an empty inductor cache. Prints only; see docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from ppo_settings import PPOSettings  # noqa: E402

from rlx.envs import CartPole  # noqa: E402


def _same_step(algo) -> bool:
    """One step from the same state and RNG, scanned and looped: the same tensors?"""
    algo.collect()
    before = [x.detach().clone() for x in algo.update_tensors()]
    scanner, outcome = algo.scanned_updates, []
    for scanned in (scanner, None):
        with torch.no_grad():
            for x, b in zip(algo.update_tensors(), before):
                x.copy_(b)
        algo.scanned_updates, algo._buffered = scanned, True
        torch.manual_seed(5)
        algo.step()
        outcome.append([x.detach().clone() for x in algo.update_tensors()])
    algo.scanned_updates = scanner
    return all(torch.equal(a, b) for a, b in zip(*outcome))


def _first_iteration(num_envs: int, scan: bool) -> None:
    torch.set_num_threads(1)
    algo = PPOSettings(num_envs=num_envs, horizon=32, minibatches=4).rlx_config("cpu", seed=0, compile=True).build(CartPole)
    if not scan:
        algo.scanned_updates = None
    t0 = time.perf_counter()
    algo.collect()
    algo.step()
    print(f"{'scan' if scan else 'loop'}: first iteration {time.perf_counter() - t0:.1f} s from an empty inductor cache")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--first-iteration", choices=["scan", "loop"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_iteration:
        _first_iteration(args.num_envs, args.first_iteration == "scan")
        return
    if args.cold:
        for side in ("scan", "loop"):
            with tempfile.TemporaryDirectory() as cache:
                subprocess.run([sys.executable, __file__, "--num-envs", str(args.num_envs), "--first-iteration", side],
                               env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}, check=True)
        return
    torch.set_num_threads(1)
    algos = {}
    for name in ("scan", "loop"):
        algo = PPOSettings(num_envs=args.num_envs, horizon=32, minibatches=4).rlx_config(
            "cpu", seed=0, compile=True).build(CartPole)
        if name == "loop":
            algo.scanned_updates = None
        t0 = time.perf_counter()
        algo.collect()
        algo.step()
        print(f"{name}: first iteration {time.perf_counter() - t0:.1f} s (compiling; inductor's cache may hold some)")
        algos[name] = algo
    assert algos["scan"].scanned_updates is not None, algos["scan"].scan_fallback
    for algo in algos.values():
        for _ in range(3):
            algo.collect()
            algo.step()
    steps: dict[str, list[float]] = {k: [] for k in algos}
    iterations: dict[str, list[float]] = {k: [] for k in algos}
    for _ in range(args.rounds):
        for name, algo in algos.items():
            t0 = time.perf_counter()
            algo.collect()
            t1 = time.perf_counter()
            algo.step()
            t2 = time.perf_counter()
            steps[name].append(t2 - t1)
            iterations[name].append(t2 - t0)
    ms = {k: (1e3 * statistics.median(steps[k]), 1e3 * statistics.median(iterations[k])) for k in algos}
    for name, (step, iteration) in ms.items():
        print(f"{name}: step() {step:.2f} ms, iteration {iteration:.2f} ms "
              f"({args.num_envs * 32 / iteration * 1e3:,.0f} env steps/s)")
    print(f"loop / scan: step {ms['loop'][0] / ms['scan'][0]:.3f}x, iteration {ms['loop'][1] / ms['scan'][1]:.3f}x")
    print(f"one step from the same state, scanned and looped, bit for bit the same: {_same_step(algos['scan'])}")


if __name__ == "__main__":
    main()
