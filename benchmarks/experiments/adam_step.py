"""An eager Adam step on a CPU: rlx's (every mode's) against torch's kernels.

    python benchmarks/experiments/adam_step.py [--rounds 7] [--steps 200]

The 12 tensors of vs_jax.py's separate 64x64 tanh actor and critic on CartPole, one
thread: rlx's :func:`rlx.members.optim.adam_step_` (what eager, compiled and graphed
updates all run) against ``torch.optim.Adam(...).step()`` with ``fused=True`` (what rlx
ran eagerly before the one update, af19ec3), ``foreach=True`` and the per-tensor default,
each timed in blocks of ``--steps`` steps, the blocks interleaved; also the ATen ops one
rlx step dispatches. Prints us a step, medians of ``--rounds``. See docs/benchmarks.md
("Against a hand-written floor").
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlx.members.optim import adam_step_

#: The actor's and the critic's weights and biases (CartPole: 4 observations, 2 actions).
SHAPES = [(64, 4), (64,), (64, 64), (64,), (2, 64), (2,), (64, 4), (64,), (64, 64), (64,), (1, 64), (1,)]


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count[str(func)] += 1
        return func(*args, **(kwargs or {}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    grads = [torch.randn(s) for s in SHAPES]

    def optimizer(**flags):
        params = [torch.nn.Parameter(torch.randn(s)) for s in SHAPES]
        return params, torch.optim.Adam(params, lr=2e-3, **flags)

    rlx_params, rlx_opt = optimizer()

    def torch_step(params, opt):
        def step() -> None:
            for p, g in zip(params, grads):
                p.grad = g
            opt.step()
        return step

    sides = {"rlx adam_step_": lambda: adam_step_(rlx_opt, rlx_params, grads),
             "torch fused": torch_step(*optimizer(fused=True)),
             "torch foreach": torch_step(*optimizer(foreach=True)),
             "torch per tensor": torch_step(*optimizer(foreach=False))}
    for step in sides.values():
        for _ in range(20):
            step()
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, step in sides.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            times[name].append((time.perf_counter() - start) / args.steps * 1e6)
    for name, t in times.items():
        print(f"{name:>18}: {statistics.median(t):7.1f} us a step")
    with _Ops() as ops:
        sides["rlx adam_step_"]()
    print(f"rlx's step dispatches {sum(ops.count.values())} ATen ops: {dict(ops.count.most_common(6))}")


if __name__ == "__main__":
    main()
