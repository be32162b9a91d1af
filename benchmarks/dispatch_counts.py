"""What one iteration dispatches on a CPU: eager aten ops and compiled-program calls.

    python benchmarks/dispatch_counts.py [--num-envs 64] [--modes eager compile] [--out FILE]

vs_jax's setting (CartPole, T = 32, 64x64 tanh, 4 epochs x 4 minibatches, Adam), one
``collect()`` + ``step()`` after warm-up, recorded with :mod:`torch.profiler`. A
compiled-program call is one call of an inductor program ("## Call CompiledFxGraph",
through dynamo's "Torch-Compiled Region" or directly, as
:class:`rlx.core.compiling.WarmProgram` calls its programs); an eager op is an ``aten::``
op that runs outside every program and outside another aten op (``aten::linear``
counts once, not with the ``aten::addmm`` it calls). Counts, not times: they do not
drift with the machine, and on a GPU each eager op is at least one kernel launch and
one Python dispatch. :func:`count_dispatches` is what ``tests/test_dispatch_counts.py``
holds to the issue's bounds.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from torch.profiler import ProfilerActivity, profile

REGION = "Torch-Compiled Region"
PROGRAM = "## Call CompiledFxGraph"


def vs_jax_config(num_envs: int, compile: bool, device: str = "cpu"):
    """vs_jax.py's PPO config (:mod:`jax_ppo`'s settings) at ``num_envs``, 4 minibatches."""
    from ppo_settings import PPOSettings

    return PPOSettings(num_envs=num_envs, horizon=32, minibatches=4).rlx_config(device, compile=compile)


def count_dispatches(algo, warmup: int = 3) -> dict:
    """``{"eager_ops", "programs", "top_ops"}`` of one ``collect()`` + ``step()`` of
    ``algo`` after ``warmup`` iterations."""
    for _ in range(warmup):
        algo.collect()
        algo.step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        algo.collect()
        algo.step()
    ops: collections.Counter[str] = collections.Counter()
    programs = 0
    for evt in prof.events():
        if evt.name.startswith(PROGRAM):
            programs += 1
            continue
        if not evt.name.startswith("aten::"):
            continue
        parent, inside = evt.cpu_parent, False
        while parent is not None:
            if parent.name.startswith(("aten::", REGION, PROGRAM)):
                inside = True
                break
            parent = parent.cpu_parent
        if not inside:
            ops[evt.name] += 1
    return {"eager_ops": sum(ops.values()), "programs": programs, "top_ops": ops.most_common(12)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--modes", nargs="+", default=["eager", "compile"], choices=["eager", "compile"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from rlx.envs import CartPole

    for mode in args.modes:
        algo = vs_jax_config(args.num_envs, compile=mode == "compile").build(CartPole)
        row = {"mode": mode, "num_envs": args.num_envs, **count_dispatches(algo)}
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
