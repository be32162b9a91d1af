"""Why rlx cuts CPU work into passes of a few thousand rows, and what bounds small batches.

    python benchmarks/cpu_rows.py [--threads 2]

1. ``torch.addmm`` of ``[rows, 256] @ [256, 256]`` in float32 and bfloat16: GFLOP/s per
   row count. At 64 rows (rl8's B=64 collect) the float32 GEMM already runs near the
   CPU's peak, so both libraries pay the same matmul time there.
2. A 256-wide and a 64-wide MLP critic (rl8's and rlx's default sizes) over 131,072 rows
   in passes of ``rows``: nanoseconds per row. Passes larger than a few thousand rows
   spill out of cache; rlx's ``VALUE_PASS_ROWS`` (2048) comes from this table.
3. rlx's PPO ``step()`` on a B=1024, T=32 rollout (8192-sample minibatches, 4 epochs) by
   ``micro_batch_size``, for 64-, 128- and 256-wide MLPs: milliseconds per step, medians
   of 5 after 2 warm-ups, the pass sizes interleaved. Small passes repeat the dispatch of
   a hundred-odd ops per pass; large ones spill out of cache. The ``micro_batch_size``
   defaults (``CPU_MICRO_BATCH_SIZE`` = 4096 up to 128 wide, ``CPU_WIDE_MICRO_BATCH_SIZE``
   = 2048 wider) come from this table (``--no-update`` skips it).

Prints three markdown tables; results are appended to ``benchmarks/results/cpu_rows.jsonl``.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from common import append_results, results_path


def _per_call_s(fn, calls: int) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def _update_table() -> list[dict]:
    import statistics

    from rlx import AlgorithmConfig
    from rlx.envs import CartPole

    micros = (1024, 2048, 4096, 8192)
    rows = []
    print("\n| MLP width | " + " | ".join(f"step ms, passes of {m}" for m in micros) + " |\n|---|" + "---|" * len(micros))
    for width in (64, 128, 256):
        algos = {
            m: AlgorithmConfig(num_envs=1024, horizon=32, num_sgd_iters=4, sgd_minibatch_size=8192, micro_batch_size=m,
                               model_config={"hiddens": [width, width]}, device="cpu", seed=0).build(CartPole)
            for m in micros
        }
        times: dict[int, list[float]] = {m: [] for m in micros}
        for i in range(7):
            for m, algo in algos.items():
                algo.collect()
                start = time.perf_counter()
                algo.step()
                if i >= 2:
                    times[m].append(time.perf_counter() - start)
        row = {"width": width, **{str(m): 1e3 * statistics.median(t) for m, t in times.items()}}
        rows.append(row)
        print(f"| {width} | " + " | ".join(f"{row[str(m)]:.0f}" for m in micros) + " |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-update", action="store_true", help="skip the step() table by micro_batch_size")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    record: dict = {"gemm": [], "mlp": []}
    print("| rows | fp32 GFLOP/s | bf16 GFLOP/s |\n|---|---|---|")
    for rows in (64, 256, 1024, 2048, 8192):
        row = {"rows": rows}
        for dtype in (torch.float32, torch.bfloat16):
            a, w, b = (torch.randn(rows, 256, dtype=dtype), torch.randn(256, 256, dtype=dtype),
                       torch.randn(256, dtype=dtype))
            seconds = _per_call_s(lambda: torch.addmm(b, a, w), max(20, 200_000 // rows))
            row[str(dtype).removeprefix("torch.")] = 2 * rows * 256 * 256 / seconds / 1e9
        record["gemm"].append(row)
        print(f"| {rows} | {row['float32']:.0f} | {row['bfloat16']:.0f} |")
    total = 131_072
    print("\n| MLP width | rows per pass | ns per row |\n|---|---|---|")
    with torch.no_grad():
        for width in (256, 64):
            critic = nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))
            x = torch.randn(total, 4)
            for rows in (64, 1024, 2048, 4096, 32768, total):
                def passes() -> None:
                    for lo in range(0, total, rows):
                        critic(x[lo : lo + rows])
                seconds = min(_per_call_s(passes, 1) for _ in range(3))
                ns = seconds / total * 1e9
                record["mlp"].append({"width": width, "rows": rows, "ns_per_row": ns})
                print(f"| {width} | {rows} | {ns:.0f} |")
    if not args.no_update:
        record["update"] = _update_table()
    append_results(results_path("cpu_rows"), record, threads=args.threads)


if __name__ == "__main__":
    main()
