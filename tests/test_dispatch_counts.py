"""What one PPO iteration dispatches with ``compile=True`` (counts, not times: they do not
drift with the machine). ``benchmarks/dispatch_counts.py`` prints them; #42 aims at 40
eager ops and 32 compiled-program calls in vs_jax's setting at B = 64."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.mark.slow
def test_a_compiled_iteration_dispatches_few_eager_ops_and_programs() -> None:
    import torch
    from dispatch_counts import count_dispatches, vs_jax_config

    from rlx.envs import CartPole

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with _dynamo_restarts() as restarted:
            counts = count_dispatches(vs_jax_config(64, compile=True).build(CartPole))
    finally:
        torch.set_num_threads(threads)
    # 2026-11-26: 769 eager ops and 28 programs before the update's statistics, GAE and
    # the epoch's gather moved into programs; 312 and 33 after. Then 179 and 34: the
    # reward scaler's recursion over T became one program. Then 106 and 34: the rollout's
    # statistics joined it (collect's tail). Then 14 and 31: the values and V(final_obs)
    # joined the tail, the scaler's merge came out of it as new moments (one copy after
    # it), both phases' statistics are stacked inside their programs, and the KL pass
    # after the update runs in the step's statistics program. What is left: 4 randperm
    # (inductor 2.13 fails on a randperm inside a program), 4 item (dynamo's guards on
    # the scaler's 0-d float64 statistics, CPU only), the transfer's 4 and 2 copies. The
    # 16 minibatch updates were one call each; the T loop is 8; the bounds hold.
    # Then 16 and 12: the 16 updates and the 4 gathers became one scanned program
    # (rlx.core.scanned), whose index is two eager ops (stack, reshape). Then 10 and 10:
    # the batch, the epochs' orders (randperm inside the program), the scan and the
    # statistics became one program (ScannedCalls.whole). Then 7 and 10: the reward
    # scaler's mean and variance are [1], not 0-d (3 of the 4 item gone). Then 6 and 10:
    # every RunningMeanStd's count is [1] (the last item gone).
    assert counts["programs"] <= 10, counts
    assert counts["eager_ops"] <= 40, counts
    # Dynamo traced each program once: it restarted its analysis of the step's program
    # over the reward scaler's 0-d float64 variance before that was [1], and of collect's
    # tail (from an empty cache) over the statistics' 0-d count (docs/performance.md).
    assert not restarted, restarted


@contextlib.contextmanager
def _dynamo_restarts() -> Iterator[list[str]]:
    """The functions whose analysis dynamo restarted inside the block (from its log)."""
    import torch

    tracing, restarted = [], []

    class Restarts(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if "start tracing" in message:
                tracing.append(message.split("start tracing ")[-1].split(" ")[0])
            elif "Restarting analysis" in message:
                restarted.append(tracing[-1] if tracing else "?")

    dynamo = logging.getLogger("torch._dynamo")
    handler, propagate = Restarts(), dynamo.propagate
    torch._logging.set_logs(dynamo=logging.INFO)
    dynamo.addHandler(handler)
    dynamo.propagate = False  # counted, not printed
    try:
        yield restarted
    finally:
        dynamo.removeHandler(handler)
        dynamo.propagate = propagate
        torch._logging.set_logs()
