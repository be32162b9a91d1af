"""How many cores the JAX side of vs_jax.py keeps busy on a CPU, with and without pinning.

    python benchmarks/experiments/jax_cores.py [--num-envs 64 1024 4096]

For each B, two child processes run vs_jax.py's JAX program (``jax_ppo.py``: CartPole,
T = 32, 64x64 tanh, 4 epochs x 4 minibatches) warm, as vs_jax.py times it, with
``XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"``: one
with those flags alone (how vs_jax.py ran before 2026-11-27), one also pinned to one CPU
(:func:`common.jax_on_cpu_threads`, how it runs now). Each prints the timed call's env
steps/s and its CPU time over its wall time (``getrusage``): 1.0 is one core busy.
Results: ``benchmarks/experiments/results/jax_cores.jsonl``. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def child(num_envs: int, pin: bool) -> dict:
    """One warm timed call of the JAX program, in this process."""
    sys.path.insert(0, str(HERE))
    import resource
    import time

    if pin:
        from common import jax_on_cpu_threads

        jax_on_cpu_threads(1)
    else:
        os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    from jax_ppo import block, make_train
    from ppo_settings import PPOSettings

    iters = max(4, 500_000 // (num_envs * 32))
    train = make_train(PPOSettings(num_envs=num_envs, horizon=32, minibatches=4), iters)
    train = train.lower(jax.random.PRNGKey(0)).compile()
    block(train(jax.random.PRNGKey(0)))
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    block(train(jax.random.PRNGKey(0)))
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"num_envs": num_envs, "pinned": pin, "steps_per_s": round(iters * num_envs * 32 / wall),
            "cores_busy": round(cpu / wall, 2), "cpus_available": len(os.sched_getaffinity(0))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024, 4096])
    parser.add_argument("--child", nargs=2, metavar=("B", "PIN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(int(args.child[0]), args.child[1] == "1")))
        return
    sys.path.insert(0, str(HERE))
    from common import EXPERIMENT_RESULTS, append_results, results_path

    rows = []
    for B in args.num_envs:
        for pin in (False, True):
            out = subprocess.run([sys.executable, __file__, "--child", str(B), str(int(pin))], capture_output=True,
                                 text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"B={B:>5} {'pinned to 1 CPU' if pin else 'flags only     '}: {row['steps_per_s']:>9,} env steps/s, "
                  f"{row['cores_busy']:.2f} cores busy", flush=True)
    append_results(results_path("jax_cores", EXPERIMENT_RESULTS), rows)


if __name__ == "__main__":
    main()
