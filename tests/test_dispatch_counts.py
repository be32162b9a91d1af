"""What one PPO iteration dispatches with ``compile=True`` (counts, not times: they do not
drift with the machine). ``benchmarks/dispatch_counts.py`` prints them; #42 aims at 40
eager ops and 32 compiled-program calls in vs_jax's setting at B = 64."""

from __future__ import annotations

import sys
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
        counts = count_dispatches(vs_jax_config(64, compile=True).build(CartPole))
    finally:
        torch.set_num_threads(threads)
    # 2026-11-26: 769 eager ops and 28 programs before the update's statistics, GAE and
    # the epoch's gather moved into programs; 312 and 33 after. Then 179 and 34: the
    # reward scaler's recursion over T (133 ops) became one program, its statistics'
    # update staying eager (compiled, torch 2.13 lost the in-place updates of their
    # float64 0-d tensors). Then 106 and 34: the rollout's statistics joined that program
    # (collect's tail). The 16 minibatch updates are one call each; the T loop is 8.
    assert counts["programs"] <= 34, counts
    assert counts["eager_ops"] <= 110, counts
