"""A second start of a compiled run: how long to the first step with inductor's cache filled.

    python benchmarks/experiments/warm_start.py [--num-envs 64] [--starts 2]

vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs x 4 minibatches) with
``compile=True``, one thread. Each start is a fresh process that builds the algorithm
and runs one ``collect()`` and one ``step()`` (which compile every program), timed, with
inductor's and AOTAutograd's cache counters. The starts share one inductor cache,
empty before the first; done twice: with rlx's options, and with the scan of a step's
minibatch updates left out of the caches as torch 2.13 leaves it (without
``unsafe_marked_cacheable_functions``, :mod:`rlx.core.compiling`). Each pair's caches
are their own. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHILD = """
import json, sys, time
start = time.perf_counter()
import torch
from torch._dynamo.utils import counters
import rlx.core.compiling as compiling
if sys.argv[2] == "scan_uncached":
    compiling.INDUCTOR_OPTIONS.pop("unsafe_marked_cacheable_functions")
sys.path.insert(0, sys.argv[3])
from ppo_settings import PPOSettings
from rlx.envs import CartPole
torch.set_num_threads(1)
algo = PPOSettings(num_envs=int(sys.argv[1]), horizon=32, minibatches=4).rlx_config("cpu", seed=0, compile=True)
algo = algo.build(CartPole)
t0 = time.perf_counter()
algo.collect()
t1 = time.perf_counter()
algo.step()
t2 = time.perf_counter()
print(json.dumps({"import_build_s": t0 - start, "collect_s": t1 - t0, "step_s": t2 - t1,
                  "inductor": {k: v for k, v in counters["inductor"].items() if "cache" in k},
                  "aot": {k: v for k, v in counters["aot_autograd"].items() if "cache" in k}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--starts", type=int, default=2)
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parents[1])
    rows = []
    for variant in ("rlx", "scan_uncached"):
        cache = tempfile.mkdtemp(prefix=f"rlx_warm_start_{variant}_")
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        for start in range(args.starts):
            out = subprocess.run([sys.executable, "-c", CHILD, str(args.num_envs), variant, here], env=env,
                                 capture_output=True, text=True, check=True)
            row = {"variant": variant, "start": start, "num_envs": args.num_envs,
                   **json.loads(out.stdout.strip().splitlines()[-1])}
            rows.append(row)
            print(f"{variant:14s} start {start}: build {row['import_build_s']:5.1f} s  collect {row['collect_s']:5.1f} s  "
                  f"step {row['step_s']:5.1f} s  inductor {row['inductor']}", flush=True)
    results = Path(__file__).parent / "results" / "warm_start.jsonl"
    with results.open("a") as f:
        for row in rows:
            f.write(json.dumps({**row, "date": time.strftime("%Y-%m-%d")}) + "\n")


if __name__ == "__main__":
    main()
