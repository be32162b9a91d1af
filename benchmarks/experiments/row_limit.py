"""The narrow-products rewrites up to another row limit: a compiled iteration side by side.

    python benchmarks/experiments/row_limit.py [--num-envs 64] [--limit 4096] [--rounds 12]

vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs x 4 minibatches) with
``compile=True``, one thread, compiled into an empty inductor cache of its own: with
``rlx.core.narrow_products.SMALL_ROWS`` at rlx's 512 and at ``--limit`` (reaching, at
B = 64, the collect tail's critic pass over 2112 rows and the KL pass over 2048). Each
side built twice (A, B, B, A: the first algorithm built in a process can run slower),
3 warm-up iterations, then timed in rotation (``common.interleaved_ms``). See
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--limit", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="rlx_row_limit_")
    from common import interleaved_ms
    from ppo_settings import warm_compiled_cartpole

    import rlx.core.narrow_products as narrow

    base_rows, limit = narrow.SMALL_ROWS, args.limit
    Base = narrow.NarrowProducts

    class Wide(Base):
        def uuid(self):  # another limit, another program in inductor's cache
            return (*super().uuid(), limit)

    def timed(algo) -> float:
        start = time.perf_counter()
        algo.collect()
        algo.step()
        return time.perf_counter() - start

    sides = {}
    for name, cls, rows in (("wide first", Wide, limit), ("rlx first", Base, base_rows),
                            ("rlx last", Base, base_rows), ("wide last", Wide, limit)):
        narrow.NarrowProducts, narrow.SMALL_ROWS = cls, rows
        try:  # programs are made at build and at the first calls
            algo = warm_compiled_cartpole(args.num_envs, warmups=3)
        finally:
            narrow.NarrowProducts, narrow.SMALL_ROWS = Base, base_rows
        sides[name] = algo
    ms = interleaved_ms(sides, args.rounds, 3, timed)
    wide, base = (statistics.mean(ms[f"{side} {c}"] for c in ("first", "last")) for side in ("wide", "rlx"))
    print(f"B={args.num_envs}: rows up to {limit} {wide:.2f} ms against {base:.2f} ms up to {base_rows} "
          f"an iteration ({base / wide:.3f}x)")


if __name__ == "__main__":
    main()
