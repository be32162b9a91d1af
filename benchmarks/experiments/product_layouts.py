"""Small products in CPU programs: a layer's weight copied into the layout MKL multiplies
fastest, and the smallest products written as sums.

    python benchmarks/experiments/product_layouts.py [--part products iteration] [--num-envs 64 1024]
        [--rounds 8] [--limit 4096]

``torch.nn.Linear`` keeps its weight as ``[out, in]`` and multiplies ``x @ Wᵀ``, a
product whose second operand is a transposed view. MKL's single-precision product
(one thread, as torch 2.13 ships it) takes another kernel for that layout, which on
small matrices is markedly slower than the same product with a contiguous second operand.

``products``: ``torch.mm`` in each layout of its two operands (N: contiguous, T: a
transposed view) for the shapes of vs_jax.py's CartPole PPO, median microseconds a call.

``iteration``: vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs x 4 minibatches,
``compile=True``, one thread) built with :class:`rlx.core.narrow_products.NarrowProducts`
as rlx runs it and without its ``contiguous_weights`` and ``summed_products`` (as before
them), each side built twice (A, B, B, A: the first built runs slower at B = 1024), all
four warmed and timed in one process by ``common.interleaved_ms`` in blocks of 3
iterations: ms an iteration, the mean of each side's two copies. ``--limit``: instead, the
pass as rlx runs it up to ``--limit`` rows against its limit
(:data:`rlx.core.narrow_products.SMALL_ROWS`; at B = 64, 4096 rows reach the collect
tail's critic pass over 2112 rows and the KL pass over 2048). Results:
``benchmarks/experiments/results/product_layouts.jsonl``. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(64, 4, 64), (64, 64, 64), (64, 64, 2), (512, 4, 64), (512, 64, 64), (512, 64, 2), (2048, 64, 64),
          (2048, 4, 64), (64, 512, 64)]


def products() -> list[dict]:
    import torch
    from common import per_call_us

    rows = []
    for m, k, n in SHAPES:
        a, at = torch.randn(m, k), torch.randn(k, m).t()
        b, bt = torch.randn(k, n), torch.randn(n, k).t()
        out = torch.empty(m, n)
        calls = 20000 if m * k * n < 1e6 else 2000
        us = {name: per_call_us(lambda x=x, y=y, out=out: torch.mm(x, y, out=out), calls, rounds=7)
              for name, x, y in (("NN", a, b), ("NT", a, bt), ("TN", at, b), ("TT", at, bt))}
        row = {"shape": [m, k, n], **{k_: round(v, 2) for k_, v in us.items()}}
        rows.append(row)
        print(f"[{m}, {k}] x [{k}, {n}]: " + "  ".join(f"{k_} {v:.2f} us" for k_, v in us.items()), flush=True)
    return rows


def iteration(num_envs: list[int], rounds: int, limit: int | None = None) -> list[dict]:
    from common import interleaved_ms
    from ppo_settings import warm_compiled_cartpole

    import rlx.core.narrow_products as narrow

    def timed_iteration(algo) -> float:
        start = time.perf_counter()
        algo.collect()
        algo.step()
        return time.perf_counter() - start

    base_rows = narrow.SMALL_ROWS

    class Before(narrow.NarrowProducts):
        contiguous_weights = summed_products = False

    class Wide(narrow.NarrowProducts):
        def uuid(self):  # another row limit, another program in inductor's cache
            return (*super().uuid(), limit)

    # Each side: its pass and its row limit; the first is the one the speedup is of.
    variants = ({"rlx": (narrow.NarrowProducts, base_rows), "before": (Before, base_rows)} if limit is None else
                {"wide": (Wide, limit), "rlx": (narrow.NarrowProducts, base_rows)})
    (new, old), rows = variants, []
    for B in num_envs:
        # Built A, B, B, A: in one process the first algorithm built ran up to 10% slower
        # in every kernel at B = 1024 (two identical sides: 0.99), so each side is built
        # once early and once late, and both copies are timed.
        sides = {}
        for name, side in ((f"{new} built first", new), (f"{old} built first", old), (f"{old} built last", old),
                           (f"{new} built last", new)):
            original = narrow.NarrowProducts
            narrow.NarrowProducts, narrow.SMALL_ROWS = variants[side]
            try:  # programs are made at build and (the T loop's) at the first calls
                sides[name] = warm_compiled_cartpole(B, warmups=3)
            finally:
                narrow.NarrowProducts, narrow.SMALL_ROWS = original, base_rows
        ms = interleaved_ms(sides, rounds, 3, timed_iteration)
        ms = {side: statistics.mean(ms[f"{side} {copy}"] for copy in ("built first", "built last")) for side in variants}
        row = {"num_envs": B, f"{new}_ms": round(ms[new], 2), f"{old}_ms": round(ms[old], 2),
               "speedup": round(ms[old] / ms[new], 3), "rounds": rounds, **({"limit": limit} if limit else {})}
        rows.append(row)
        what = "with the copies and sums" if limit is None else f"with the rewrites up to {limit} rows"
        print(f"B={B:>5}: {what} {ms[new]:.2f} ms, {'without' if limit is None else f'up to {base_rows}'} "
              f"{ms[old]:.2f} ms an iteration ({row['speedup']:.3f}x)", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", nargs="+", choices=["products", "iteration"], default=["products", "iteration"])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--limit", type=int, default=None,
                        help="iteration: rlx's pass up to this many rows against rlx's limit (SMALL_ROWS)")
    args = parser.parse_args()
    import torch
    from common import EXPERIMENT_RESULTS, append_results, results_path

    torch.set_num_threads(1)
    rows = []
    if "products" in args.part:
        rows += [{"part": "products", **r} for r in products()]
    if "iteration" in args.part:
        rows += [{"part": "iteration", **r} for r in iteration(args.num_envs, args.rounds, args.limit)]
    append_results(results_path("product_layouts", EXPERIMENT_RESULTS), rows, threads=1)


if __name__ == "__main__":
    main()
