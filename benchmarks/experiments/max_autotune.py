"""Inductor's max-autotune: vs_jax.py's compiled CartPole PPO iteration with and without it.

    python benchmarks/experiments/max_autotune.py [--num-envs 64 1024] [--iterations 20]
    python benchmarks/experiments/max_autotune.py --device cuda --num-envs 4096 65536

Each side runs in a process of its own with ``TORCHINDUCTOR_MAX_AUTOTUNE`` set to 0 or 1
and an empty inductor cache of its own (max-autotune benchmarks GEMM templates, C++ ones
on a CPU and Triton ones on a GPU, against ATen's and keeps the faster, when it
compiles; a Triton template can take the bias, the ``tanh`` and its backward's product
into the GEMM, where ATen's GEMM leaves them to kernels of their own that read and write
every activation once more, the memory-bound half of a B = 65536 step on an H100):
3 warm-up iterations, then 3 rounds of ``--iterations`` ``collect()`` + ``step()``, the
median of each round printed. On a CPU ``compile=True`` with one thread; on CUDA
``compile=True`` with the step captured whole (``cudagraphs_scope="step"``), the
default matmul precision (TF32) and the device synchronized around each iteration.
See docs/benchmarks.md.
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

HERE = Path(__file__).resolve().parent


def _side(num_envs: int, iterations: int, device: str) -> None:
    sys.path.insert(0, str(HERE.parent))
    import torch
    from ppo_settings import PPOSettings

    from rlx.envs import CartPole

    start = time.perf_counter()
    if device == "cpu":
        torch.set_num_threads(1)
    graphs = device == "cuda"
    config = PPOSettings(num_envs=num_envs, horizon=32, minibatches=4).rlx_config(
        device, seed=0, compile=True, cudagraphs=graphs, cudagraphs_scope="step" if graphs else "minibatch")
    algo = config.build(CartPole)
    for _ in range(3):
        algo.collect()
        algo.step()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rounds = []
    for _ in range(3):
        times = []
        for _ in range(iterations):
            sync()
            t0 = time.perf_counter()
            algo.collect()
            algo.step()
            sync()
            times.append(time.perf_counter() - t0)
        rounds.append(1e3 * statistics.median(times))
    print(f"{device} B={num_envs} max_autotune={os.environ['TORCHINDUCTOR_MAX_AUTOTUNE']}: warm-up "
          f"{time.perf_counter() - start:.0f} s, medians {', '.join(f'{r:.2f}' for r in rounds)} ms an iteration",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--side", type=int, help=argparse.SUPPRESS)  # num_envs, in this process
    args = parser.parse_args()
    if args.side:
        _side(args.side, args.iterations, args.device)
        return
    for B in args.num_envs:
        for flag in ("0", "1"):
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "TORCHINDUCTOR_MAX_AUTOTUNE": flag, "TORCHINDUCTOR_CACHE_DIR": cache}
                subprocess.run([sys.executable, __file__, "--side", str(B), "--iterations", str(args.iterations),
                                "--device", args.device], env=env, check=True)


if __name__ == "__main__":
    main()
