"""The float32 GEMMs of a 64-wide MLP update on this CPU: torch (MKL, oneDNN) against XLA.

    python benchmarks/experiments/gemm_vs_xla.py [--rows 512 8192] [--rounds 5] [--threads 1]

At ``vs_jax.py``'s shapes rlx's compiled update runs at MKL's GEMM speed, and its time is
mostly GEMMs. This times, per call, median over rounds (each round ``--calls`` calls):

* ``forward``: ``[rows, 64] @ [64, 64]`` (a hidden layer's forward, and the input
  gradient of the backward pass) with ``torch.mm`` (MKL), oneDNN's linear with a packed
  weight (``torch.ops.mkldnn._linear_pointwise``), and XLA (a jitted ``x @ w``);
* ``weight gradient``: ``[64, rows] @ [rows, 64]`` with ``torch.mm`` and XLA.

Each XLA call includes its dispatch (``block_until_ready``), which matters at 512 rows
only. Needs the ``jax`` extra. Results:
``benchmarks/experiments/results/gemm_vs_xla.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[512, 8192])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    from common import jax_on_cpu_threads

    jax_on_cpu_threads(args.threads)
    import jax
    import torch
    from common import EXPERIMENT_RESULTS, append_results, per_call_us, results_path

    torch.set_num_threads(args.threads)
    rows_out = []
    for rows in args.rows:
        x, w, g = torch.randn(rows, 64), torch.randn(64, 64), torch.randn(rows, 64)
        packed = torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous(), rows)
        jx, jw, jg = (jax.numpy.asarray(t.numpy()) for t in (x, w, g))
        forward = jax.jit(lambda a, b: a @ b)
        weight_grad = jax.jit(lambda a, b: a.T @ b)
        cases = {
            "forward, torch mm (MKL)": lambda: torch.mm(x, w),
            "forward, oneDNN packed linear": lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""),
            "forward, XLA": lambda: forward(jx, jw).block_until_ready(),
            "weight gradient, torch mm (MKL)": lambda: torch.mm(g.t(), x),
            "weight gradient, XLA": lambda: weight_grad(jg, jx).block_until_ready(),
        }
        for name, fn in cases.items():
            us = per_call_us(fn, args.calls, args.rounds)
            gflops = 2 * rows * 64 * 64 / us / 1e3
            rows_out.append({"rows": rows, "case": name, "us": round(us, 1), "gflops": round(gflops, 1)})
            print(f"{rows:>6} rows  {name:34s} {us:8.1f} us  {gflops:6.1f} GFLOP/s", flush=True)
    path = append_results(results_path("gemm_vs_xla", EXPERIMENT_RESULTS), rows_out, threads=args.threads,
                          torch=torch.__version__, jax=jax.__version__)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
