"""What an uncompiled iteration launches on CUDA, counted on a CPU
(``benchmarks/experiments/cuda_launches.py --mode eager``): the ops ``cudagraphs`` alone
captures, CUDA's default mode. Counts, not times: they depend on torch's version and
rlx's code only (docs/benchmarks.md, "Kernel launches counted on a CPU", checks the rule
against an H100's profile)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "experiments"))


def test_an_uncompiled_iteration_launches_no_more_than_counted_and_members_as_many_as_one_run() -> None:
    """vs_jax's CartPole PPO at 64 envs (a member): one run's collect and step launch at
    most what docs/benchmarks.md counts (2,138 and 2,594 on 2026-11-29, with CartPole's
    fewer kernels; 2,426 and 2,611 before them, with Adam's dense coefficients; 2,931
    before those; 2,422 and 2,647 at 5a1a1e1, before the KL estimator's series), and a
    step of S members launches as many kernels for S = 2 as for S = 8: nothing a step runs
    is an op per member (the statistics' stacking was: 517 launches more at S = 64)."""
    from cuda_launches import count_iteration

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = count_iteration(64, compile=False)
        members = {S: count_iteration(64, compile=False, members=S)["step"]["launches"] for S in (2, 8)}
    finally:
        torch.set_num_threads(threads)
    assert one["collect"]["launches"] <= 2138, one["collect"]["kernels"][:10]
    assert one["step"]["launches"] <= 2594, one["step"]["kernels"][:10]
    assert members[2] == members[8], members
