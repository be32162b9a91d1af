"""A linear layer's bias added after its product in CPU programs: tried, and left off.

    python benchmarks/experiments/bias_after_product.py [--num-envs 64 1024] [--rounds 6]

Inductor runs ``addmm(bias, x, w)`` on a CPU as ATen's ``addmm_out``: the bias copied into
the output, then MKL's product added to it. On GPUs inductor rewrites an ``addmm`` whose
every use is elementwise into ``mm(x, w) + bias`` (its ``unfuse_bias_add_to_pointwise``),
so that the addition fuses into the activation's kernel; it does not on CPUs. This script
adds that rewrite to rlx's CPU post-grad pass (before
:class:`~rlx.core.narrow_products.NarrowProducts`), builds vs_jax.py's CartPole PPO
(T = 32, 64x64 tanh, 4 epochs x 4 minibatches, ``compile=True``, one thread) with and
without it, and times both in one process, interleaved: ms an iteration (medians of
``--rounds`` blocks of 3 iterations each) and each compiled program's ms an iteration
(timed at inductor's ``CompiledFxGraph`` call). Results:
``benchmarks/experiments/results/bias_after_product.jsonl``. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def bias_after_product(graph) -> None:
    """``addmm(bias, a, b)`` whose every use is elementwise as ``add(mm(a, b), bias)``."""
    import torch
    from torch._inductor.utils import is_pointwise_use

    addmm, mm, add = torch.ops.aten.addmm.default, torch.ops.aten.mm.default, torch.ops.aten.add.Tensor
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not addmm or node.kwargs or not node.users:
            continue
        if not all(is_pointwise_use(u) for u in node.users):
            continue
        bias, a, b = node.args
        with graph.inserting_before(node):
            product = graph.call_function(mm, (a, b))
            result = graph.call_function(add, (product, bias))
        product.meta["val"] = torch.mm(a.meta["val"], b.meta["val"])
        result.meta["val"] = node.meta["val"]
        node.replace_all_uses_with(result)
        graph.erase_node(node)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    import torch
    from common import EXPERIMENT_RESULTS, append_results, results_path
    from ppo_settings import PPOSettings
    from torch._inductor import output_code

    import rlx.core.narrow_products as narrow
    from rlx.envs import CartPole

    torch.set_num_threads(1)

    class WithBias(narrow.NarrowProducts):
        def __call__(self, graph) -> None:
            bias_after_product(graph)
            super().__call__(graph)

        def uuid(self):
            return ("bias_after_product", super().uuid())

    side, spent = [None], collections.defaultdict(float)
    call = output_code.CompiledFxGraph.__call__

    def timed_call(self, inputs):
        start = time.perf_counter()
        out = call(self, inputs)
        spent[(side[0], id(self))] += time.perf_counter() - start
        return out

    rows = []
    for B in args.num_envs:
        config = PPOSettings(num_envs=B, horizon=32, minibatches=4).rlx_config("cpu", seed=0, compile=True)
        algos = {}
        for name, pass_cls in (("bias_after", WithBias), ("addmm", narrow.NarrowProducts)):
            original, narrow.NarrowProducts = narrow.NarrowProducts, pass_cls
            try:  # programs are made at build and (the T loop's) at the first collect
                algos[name] = config.build(CartPole)
                for _ in range(3):
                    algos[name].collect()
                    algos[name].step()
            finally:
                narrow.NarrowProducts = original
        spent.clear()
        wall: dict[str, list[float]] = {name: [] for name in algos}
        output_code.CompiledFxGraph.__call__ = timed_call
        try:
            for r in range(args.rounds):
                for name in (list(algos) if r % 2 == 0 else list(algos)[::-1]):
                    side[0] = name
                    start = time.perf_counter()
                    for _ in range(3):
                        algos[name].collect()
                        algos[name].step()
                    wall[name].append((time.perf_counter() - start) / 3 * 1e3)
        finally:
            output_code.CompiledFxGraph.__call__ = call
        n = 3 * args.rounds
        programs = {name: sorted((round(t / n * 1e3, 2) for (s, _), t in spent.items() if s == name), reverse=True)
                    for name in algos}
        ms = {name: statistics.median(times) for name, times in wall.items()}
        row = {"num_envs": B, "bias_after_ms": round(ms["bias_after"], 2), "addmm_ms": round(ms["addmm"], 2),
               "speedup": round(ms["addmm"] / ms["bias_after"], 3), "programs_ms_bias_after": programs["bias_after"],
               "programs_ms_addmm": programs["addmm"], "rounds": args.rounds}
        rows.append(row)
        print(f"B={B:>5}: bias after {ms['bias_after']:.2f} ms, addmm {ms['addmm']:.2f} ms an iteration "
              f"({row['speedup']:.3f}x); programs, ms an iteration: {programs['bias_after']} against "
              f"{programs['addmm']}", flush=True)
    append_results(results_path("bias_after_product", EXPERIMENT_RESULTS), rows, threads=1)


if __name__ == "__main__":
    main()
