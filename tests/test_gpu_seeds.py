"""CUDA: many seeds in one process (issue #20) with ``cudagraphs=True`` and without host syncs.

With seeds the captured minibatch update holds every seed's step: the per-seed gradient
clipping, the divergence freeze, the KL early stop (a ``[S]`` gate on each seed's step,
not on the LR the seeds share) and the per-seed LR factors all read device tensors at
fixed addresses, so a replay applies the state they hold at that moment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlx import AlgorithmConfig
from rlx.envs import CartPole

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

ROOT = Path(__file__).resolve().parents[1]


def _run_without_syncs(algo, iterations: int = 2) -> list[dict[str, float]]:
    algo.collect()  # warm-up: lazy CUDA init, allocator, cuBLAS handles (and graph warm-ups)
    algo.step()
    torch.cuda.synchronize()
    stats = []
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(iterations):
            stats.append(algo.collect())
            stats.append(algo.step())
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return stats


@pytest.mark.parametrize(
    "config_name, extra",
    [
        ("ppo", {"sgd_minibatch_size": 512, "normalize_obs": True, "target_kl_div": 0.02}),
        ("ppo", {"sgd_minibatch_size": 1024, "kl_adaptive_lr": True, "target_kl_div": 0.01, "enable_amp": True}),
        ("ppo", {"sgd_minibatch_size": 512, "cudagraphs": True, "target_kl_div": 0.02}),
        ("npg", {"line_search": True, "normalize_obs": True}),
        ("recurrent", {"seq_len": 8, "sgd_minibatch_size": 1024}),
    ],
    ids=["ppo-kl-stop", "ppo-adaptive-lr-bf16", "ppo-cudagraphs", "trpo", "recurrent-ppo"],
)
def test_seeds_collect_and_step_do_not_sync_on_cuda(config_name: str, extra: dict) -> None:
    from rlx import NPGConfig, RecurrentAlgorithmConfig
    from rlx.envs import CartPoleNoVelocity

    config_cls, env_cls = {"ppo": (AlgorithmConfig, CartPole), "npg": (NPGConfig, CartPole),
                           "recurrent": (RecurrentAlgorithmConfig, CartPoleNoVelocity)}[config_name]
    algo = config_cls(num_envs=256, horizon=16, device="cuda", seed=0, num_seeds=4, **extra).build(env_cls)
    for _ in range(2):  # with cudagraphs: the update's warm-ups and capture, the collect's warm-ups
        algo.collect()
        algo.step()
    for stats in _run_without_syncs(algo):
        assert all(isinstance(v, float) for v in stats.values())
        assert "seed3/losses/total" in stats or "seed3/episodes/count" in stats
    if extra.get("cudagraphs"):
        assert algo.update_graph.captured and algo.rollout.graphs[False].captured


def _build(S: int, cudagraphs: bool, **extra):
    return AlgorithmConfig(
        num_envs=256, horizon=16, device="cuda", seed=0, num_seeds=S, sgd_minibatch_size=512,
        cudagraphs=cudagraphs, shuffle_minibatches=False, **extra,
    ).build(CartPole)


def _same_rollout(algos, seed: int) -> None:
    for algo in algos:
        # No RNG in the deterministic policy: the same rollout, provided the env resets draw
        # the same numbers from the device generator the two share.
        torch.manual_seed(seed)
        algo.collect(deterministic=True)
    first = algos[0]
    for other in algos[1:]:
        for key in ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated"):
            assert torch.equal(first.buffer.get(key), other.buffer.get(key)), key


def test_cudagraphed_seeds_update_as_eager_seeds_with_the_kl_early_stop_per_seed() -> None:
    """Four seeds, 8 minibatches x 8 epochs, a tight KL target at a high LR: each seed
    stops at its own step, and the captured update (warmed up, captured and replayed
    inside the first ``step()``) stops each seed where the eager update does and leaves
    the same parameters, on this rollout and the next."""
    S = 4
    extra = dict(target_kl_div=2e-3, optimizer_config={"lr": 1e-2}, num_sgd_iters=8)
    eager, graphed = _build(S, False, **extra), _build(S, True, **extra)
    steps = []
    for k in range(2):
        _same_rollout((eager, graphed), seed=1 + k)
        first = eager.step(), graphed.step()
        assert graphed.update_graph.captured
        for i in range(S):
            key = f"seed{i}/monitors/optimizer_steps"
            assert first[1][key] == first[0][key], (k, i)
            steps.append(first[0][key])
        assert first[1]["monitors/sgd_epochs"] == first[0]["monitors/sgd_epochs"]
        for a, b in zip(eager.policy.parameters(), graphed.policy.parameters()):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
    assert min(steps) < 8 * 8 and len(set(steps)) > 1  # the seeds stopped at their own points


def test_a_diverged_seed_is_frozen_inside_the_cuda_graph() -> None:
    """After the capture, a NaN reward in seed 0's rows: the replayed update leaves seed 0
    where it was (and for good), and seeds 1.. move exactly as in a clean graphed run."""
    runs = []
    for poison in (False, True):
        algo = _build(3, True)
        for k in range(2):  # warm-ups and the capture of the update
            torch.manual_seed(10 + k)
            algo.collect(deterministic=True)
            algo.step()
        assert algo.update_graph.captured
        torch.manual_seed(20)
        algo.collect(deterministic=True)
        if poison:
            algo.buffer.get("rewards")[1, 3] = float("nan")  # sub-env 1: seed 0's
        before = [p.detach().clone() for p in algo.policy.model.parameters()]
        runs.append((algo, algo.step(), before))
    (clean, clean_stats, _), (poisoned, stats, before) = runs
    assert clean_stats["seeds/active"] == 3.0
    assert stats["seed0/active"] == 0.0 and stats["seeds/active"] == 2.0
    for a, b, start in zip(clean.policy.model.parameters(), poisoned.policy.model.parameters(), before):
        assert torch.equal(b[0], start[0])
        torch.testing.assert_close(a[1:], b[1:], rtol=1e-6, atol=1e-7)
        assert not torch.equal(b[1:], start[1:])
    poisoned.collect()
    frozen = [p.detach()[0].clone() for p in poisoned.policy.model.parameters()]
    assert poisoned.step()["seed0/active"] == 0.0
    for p, f in zip(poisoned.policy.model.parameters(), frozen):
        assert torch.equal(p.detach()[0], f)


def test_eight_graphed_seeds_of_the_shipped_cartpole_config_all_solve(tmp_path) -> None:
    """``rlx train configs/cartpole_ppo.yaml --seeds 8`` on CUDA with ``cudagraphs=True``:
    every seed reaches the stop threshold within the budget, and the seeds that reach it
    first stop updating (their done flag is read by the replayed update)."""
    from rlx.cli import main

    run_dir = tmp_path / "run"
    args = ["train", str(ROOT / "configs" / "cartpole_ppo.yaml"), "--seeds", "8", "--run-dir", str(run_dir),
            "--set", "config.device=cuda", "--set", "config.cudagraphs=true"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert rows[-1]["env_steps"] < 300_000
    for i in range(8):
        lengths = [r[f"seed{i}/episodes/length_mean"] for r in rows if r.get(f"seed{i}/episodes/length_mean") is not None]
        assert max(lengths) >= 475, i
    assert any(r["seeds/active"] < 8 for r in rows)
