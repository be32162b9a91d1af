"""A first compiled run from an empty inductor cache: its time, and how often dynamo restarted its analysis.

    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python benchmarks/experiments/compile_restarts.py [--rounds 2]

CartPole PPO with ``compile=True`` at B = 32, T = 16, 4 epochs of 128-row minibatches
(tests/algorithms/test_one_update.py's config; ``normalize_rewards`` on, as by default),
built and run ``--rounds`` collect/step rounds in this process. Dynamo restarts the
analysis of a function when its trace ends with something to undo (torch 2.13: a 0-d
float64 CPU tensor that the program reads and does not write, taken as a number); each
restart traces the function again. Prints the rounds' seconds, the restarts and the
functions restarted. Run it with an empty inductor cache (else the compiles are found),
two checkouts side by side on one core each to compare. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import torch

    from rlx import AlgorithmConfig
    from rlx.envs import CartPole

    torch.set_num_threads(1)
    restarted: list[str] = []
    tracing: list[str] = []

    class Restarts(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if "start tracing" in message:
                tracing.append(re.sub(r".*start tracing (\S+).*", r"\1", message))
            elif "Restarting analysis" in message:
                restarted.append(tracing[-1] if tracing else "?")

    torch._logging.set_logs(dynamo=logging.INFO)
    logging.getLogger("torch._dynamo").addHandler(Restarts())
    logging.getLogger("torch._dynamo").propagate = False  # the counts, not the log
    start = time.perf_counter()
    algo = AlgorithmConfig(num_envs=32, horizon=16, device="cpu", seed=0, sgd_minibatch_size=128, num_sgd_iters=4,
                           compile=True).build(CartPole)
    for _ in range(args.rounds):
        algo.collect()
        algo.step()
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": round(seconds, 1), "restarts": len(restarted), "restarted": restarted}))


if __name__ == "__main__":
    main()
