"""How to evaluate S agents' networks at once (issue #20's design question), measured.

    python benchmarks/experiments/seed_stacking.py [--seeds 1 4 16 64] [--batch 256 2048] [--hiddens 64 64] [--threads 2]

For S copies of rlx's default actor-critic MLP (obs 17, 6 Gaussian means, tanh), one
forward and backward pass of a loss over ``batch`` samples per seed, three ways:

* ``loop``: S separate ``MLPActorCritic`` modules called one after another (what S
  independent agents in one process cost without batching);
* ``bmm``: :class:`rlx.members.StackedMLPActorCritic`, weights stacked ``[S, in, out]``,
  each layer one ``torch.baddbmm`` over ``[S, batch, in]`` inputs;
* ``vmap``: ``torch.func.stack_module_state`` of the S modules and
  ``torch.func.vmap(functional_call)``, which works for any functional model.

All three compute the same function (checked to float rounding before timing). Reported:
median milliseconds of 20 passes after 3 warm-ups, per method, with the ratio to
``loop``; appended to ``benchmarks/experiments/results/seed_stacking.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import argparse
import copy
import statistics
import time

import torch
from torch.func import functional_call, stack_module_state, vmap
from torchrl.data import Bounded, Unbounded

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import EXPERIMENT_RESULTS, append_results, results_path
from rlx.models import MLPActorCritic
from rlx.members import StackedMLPActorCritic

OBS, ACT = 17, 6


def make_models(S: int, hiddens: list[int]) -> list[MLPActorCritic]:
    models = []
    for i in range(S):
        torch.manual_seed(i)
        models.append(MLPActorCritic(Unbounded(shape=(OBS,)), Bounded(-1.0, 1.0, shape=(ACT,)), num_params=(ACT, ACT),
                                     hiddens=hiddens, activation_fn="tanh"))
    return models


def loss_of(params: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return params.square().mean() + values.square().mean()


def timed(fn, repeats: int = 20, warmups: int = 3) -> float:
    for _ in range(warmups):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def measure(S: int, n: int, hiddens: list[int]) -> dict[str, float]:
    models = make_models(S, hiddens)
    obs = torch.randn(S, n, OBS)
    stacked = StackedMLPActorCritic.from_models(models)
    flat = obs.reshape(S * n, OBS)  # seed-major rows, as the stack takes them
    base = copy.deepcopy(models[0]).to("meta")
    params, buffers = stack_module_state(models)
    params = {k: v.detach().requires_grad_() for k, v in params.items()}

    def call(p, b, x):
        return functional_call(base, (p, b), (x,))

    batched = vmap(call)

    # The same function three ways (per seed i, the outputs of model i on obs[i]).
    want = [models[i](obs[i]) for i in range(S)]
    got_bmm = tuple(x.view(S, n, -1) for x in stacked(flat))
    got_vmap = batched(params, buffers, obs)
    for i in range(S):
        for j in range(2):
            torch.testing.assert_close(got_bmm[j][i], want[i][j], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(got_vmap[j][i], want[i][j], atol=1e-5, rtol=1e-5)

    def run_loop() -> None:
        for i in range(S):
            loss_of(*models[i](obs[i])).backward()

    def run_bmm() -> None:
        loss_of(*stacked(flat)).backward()

    def run_vmap() -> None:
        loss_of(*batched(params, buffers, obs)).backward()

    return {"loop": timed(run_loop), "bmm": timed(run_bmm), "vmap": timed(run_vmap)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--batch", type=int, nargs="+", default=[256, 2048])
    parser.add_argument("--hiddens", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(results_path("seed_stacking", EXPERIMENT_RESULTS)))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| S | batch per seed | loop ms | bmm ms (x loop) | vmap ms (x loop) |\n|---|---|---|---|---|")
    for n in args.batch:
        for S in args.seeds:
            ms = measure(S, n, args.hiddens)
            append_results(args.out, {"seeds": S, "batch": n, "hiddens": args.hiddens, "threads": args.threads, **ms})
            print(f"| {S} | {n} | {ms['loop']:.2f} | {ms['bmm']:.2f} ({ms['bmm'] / ms['loop']:.2f}) | "
                  f"{ms['vmap']:.2f} ({ms['vmap'] / ms['loop']:.2f}) |", flush=True)


if __name__ == "__main__":
    main()
