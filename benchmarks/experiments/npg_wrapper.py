"""NPG's natural-step program on a CPU with its wrapper in Python or in C++ built apart
(``cpp_wrapper="separate"``: the wrapper at ``-O1`` in a file of its own, the kernels at
``-O3`` in one file), side by side: first-step (compile) time and warm step time.

    python benchmarks/experiments/npg_wrapper.py [--passes 1 4 8] [--num-envs 512] [--steps 5]

TRPO on Pendulum (T = 32, 64x64 tanh, line search), ``compile=True``, one thread, the
batch cut into ``--passes`` passes of rows (``micro_batch_size``). Each (mode, passes)
runs in a fresh process over an empty inductor cache of its own, so each first step
compiles everything; the warm step is the median of ``--steps`` ``step()`` calls after
it. Results: ``benchmarks/experiments/results/npg_wrapper.jsonl``. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def child(mode: str, passes: int, num_envs: int, steps: int) -> dict:
    import torch

    from rlx import NPGConfig
    from rlx.algorithms import npg
    from rlx.envs import Pendulum

    torch.set_num_threads(1)
    npg.NATURAL_STEP_CPP_WRAPPER = {"python": False, "separate": "separate"}[mode]
    T = 32
    algo = NPGConfig(num_envs=num_envs, horizon=T, max_kl=0.02, line_search=True, gamma=0.9,
                     model_config={"hiddens": [64, 64], "activation_fn": "tanh"}, device="cpu", seed=0,
                     compile=True, micro_batch_size=num_envs * T // passes).build(Pendulum)
    algo.collect()
    start = time.perf_counter()
    algo.step()
    first = time.perf_counter() - start
    warm = []
    for _ in range(steps):
        algo.collect()
        start = time.perf_counter()
        algo.step()
        warm.append(time.perf_counter() - start)
    return {"mode": mode, "passes": passes, "num_envs": num_envs, "first_step_s": round(first, 1),
            "warm_step_ms": round(1e3 * statistics.median(warm), 2), "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PASSES"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.num_envs, args.steps)))
        return
    from common import EXPERIMENT_RESULTS, append_results

    rows = []
    for passes in args.passes:
        for mode in ("python", "separate"):
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
                out = subprocess.run([sys.executable, __file__, "--child", mode, str(passes), "--num-envs",
                                      str(args.num_envs), "--steps", str(args.steps)], env=env, capture_output=True,
                                     text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{passes} passes, wrapper {mode:>8}: first step {row['first_step_s']:.1f} s, "
                  f"warm step {row['warm_step_ms']:.1f} ms", flush=True)
    append_results(EXPERIMENT_RESULTS / "npg_wrapper.jsonl", rows)


if __name__ == "__main__":
    main()
