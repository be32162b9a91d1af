"""CUDA: collect() and step() run without host syncs beyond the documented ones.

The documented syncs (one stats transfer per collect and per step, one per epoch for KL
early stopping) run inside ``rlx.core._sync.allowed_sync``; everything else here runs under
``torch.cuda.set_sync_debug_mode("error")``, so a new sync anywhere fails the test.
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


def _run_without_syncs(algo, iterations: int = 2) -> list[dict[str, float]]:
    algo.collect()  # warm-up: lazy CUDA init, allocator, cuBLAS handles
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
    "env_name, extra",
    [
        ("CartPole", {}),
        ("CartPole", {"sgd_minibatch_size": 512, "normalize_obs": True, "target_kl_div": 0.02}),
        ("CartPole", {"enable_amp": True, "sgd_minibatch_size": 1024, "accumulate_grads": True}),
        ("Pendulum", {"sgd_minibatch_size": 1024, "kl_adaptive_lr": True, "target_kl_div": 0.01}),
        ("DiscreteDummyEnv", {"lr_schedule": [(0, 1e-3), (10_000, 1e-4)], "entropy_coeff": 0.01}),
        ("Acrobot", {"sgd_minibatch_size": 1024}),
        ("MountainCarContinuous", {"normalize_obs": True}),
        ("PointMass", {"sgd_minibatch_size": 1024}),
        ("CartPole", {"rnd": {"weight": 0.5, "normalize_state": True, "weight_schedule": [(0, 0.5), (5000, 0.1)]}}),
    ],
)
def test_collect_and_step_do_not_sync_on_cuda(env_name: str, extra: dict) -> None:
    import rlx.envs

    env_cls = getattr(rlx.envs, env_name)
    algo = AlgorithmConfig(num_envs=256, horizon=16, device="cuda", seed=0, cudagraphs=False, **extra).build(env_cls)
    for stats in _run_without_syncs(algo):
        assert all(isinstance(v, float) for v in stats.values())


def test_cudagraphed_update_replays_without_syncs_and_learns_like_eager() -> None:
    from rlx.examples.cartpole import cartpole_config

    graphed = AlgorithmConfig(
        num_envs=256, horizon=16, device="cuda", seed=0, sgd_minibatch_size=512, cudagraphs=True, normalize_obs=True,
        lr_schedule=[(0, 1e-3), (20_000, 5e-4)],
    ).build(CartPole)
    for _ in range(2):
        graphed.collect()
        graphed.step()
    assert graphed.rollout.graphed and not any(g.captured for g in graphed.rollout.graphs.values())  # 2 warm-ups so far
    for stats in _run_without_syncs(graphed):  # its 3rd warm-up, then the capture, then a replay
        assert all(isinstance(v, float) for v in stats.values())
    assert _update_captured(graphed)  # the step's graph: captured at its 4th call, inside the loop above
    assert {mode for mode, g in graphed.rollout.graphs.items() if g.captured} == {False}  # the sampling collect
    assert graphed.lr == 5e-4  # the tensor LR was updated in place for the captured Adam

    import math

    solved = {}
    for cudagraphs in (False, True):
        config = cartpole_config(seed=0, device="cuda")
        config.cudagraphs = cudagraphs
        algo = type(config)(**{**config.__dict__}).build(CartPole)
        best = 0.0
        while algo.env_steps < 300_000 and best < 475:
            length = algo.collect()["episodes/length_mean"]
            algo.step()
            best = max(best, 0.0 if math.isnan(length) else length)
        solved[cudagraphs] = best
    assert solved[False] >= 475 and solved[True] >= 475


def test_auto_modes_graph_the_default_config_on_cuda() -> None:
    """``cudagraphs="auto"`` (the default) captures the update and the T loop on CUDA, and
    the replays run without a sync; an AMP config falls back by name."""
    algo = AlgorithmConfig(num_envs=256, horizon=16, device="cuda", seed=0, sgd_minibatch_size=1024).build(CartPole)
    assert algo.uses_cuda_graphs and not algo.compiles and algo.modes.notes["cudagraphs"] == "on (auto)"
    for _ in range(3):
        algo.collect()
        algo.step()
    for stats in _run_without_syncs(algo):
        assert all(isinstance(v, float) for v in stats.values())
    assert _update_captured(algo) and algo.rollout.graphs[False].captured
    # bf16 on an H100 for one member as for many: no loss scale, Adam's step on the device,
    # so the AMP update is graphed too; accumulated gradients fall back by name (until the
    # whole-step capture test below has passed with them on a GPU).
    amp = AlgorithmConfig(num_envs=64, horizon=8, device="cuda", enable_amp=True).build(CartPole)
    assert amp.uses_cuda_graphs and amp.amp_dtype == torch.bfloat16 and not amp.grad_scaler.is_enabled()
    accumulated = AlgorithmConfig(num_envs=64, horizon=8, device="cuda", accumulate_grads=True).build(CartPole)
    assert not accumulated.uses_cuda_graphs and "accumulate_grads" in accumulated.modes.notes["cudagraphs"]


def test_cudagraphed_update_keeps_the_kl_early_stop_of_the_eager_one() -> None:

    def build(cudagraphs: bool):
        return AlgorithmConfig(
            num_envs=256, horizon=16, device="cuda", seed=0, sgd_minibatch_size=512, cudagraphs=cudagraphs,
            target_kl_div=2e-3, optimizer_config={"lr": 1e-2}, shuffle_minibatches=False, num_sgd_iters=8,
            cudagraphs_scope="minibatch",  # a graph per minibatch update, captured inside the first step
        ).build(CartPole)

    eager, graphed = build(False), build(True)
    for algo in (eager, graphed):
        # No RNG in the policy: the same rollout, provided the env resets draw the same
        # numbers from the device generator the two share (the first H100 run of this
        # test compared rollouts that differed from the first reset on).
        torch.manual_seed(1)
        algo.collect(deterministic=True)
    for key in ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated"):
        assert torch.equal(eager.buffer.get(key), graphed.buffer.get(key)), key
    first = eager.step(), graphed.step()  # the graphed update warms up, captures and replays in here
    assert 0 < first[0]["monitors/optimizer_steps"] < 8 * 8  # the stop came mid-update
    assert first[1]["monitors/optimizer_steps"] == first[0]["monitors/optimizer_steps"]
    assert first[1]["monitors/sgd_epochs"] == first[0]["monitors/sgd_epochs"]
    for a, b in zip(eager.policy.parameters(), graphed.policy.parameters()):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
    assert _update_captured(graphed)
    for stats in _run_without_syncs(graphed):  # the gate lives in the graph; one sync per epoch
        assert all(isinstance(v, float) for v in stats.values())


def _rollout(algo) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in algo.buffer.items(include_nested=True, leaves_only=True)}


@pytest.mark.parametrize("normalize_obs", [False, True])
def test_cudagraphed_collect_replays_the_eager_rollout_bit_for_bit(normalize_obs: bool) -> None:
    from rlx.core.cuda_graphs import GRAPH_WARMUPS
    from rlx.envs import DiscreteDummyEnv

    def build(cudagraphs: bool):
        return AlgorithmConfig(
            num_envs=64, horizon=8, device="cuda", seed=0, cudagraphs=cudagraphs, normalize_obs=normalize_obs,
            horizons_per_env_reset=3,
        ).build(DiscreteDummyEnv)

    eager, graphed = build(False), build(True)
    assert graphed.rollout.graphed and not eager.rollout.graphed
    for i in range(GRAPH_WARMUPS + 3):  # warm-ups, the capture, then replays
        # Deterministic actions and a deterministic env: no RNG inside the T loop, so the
        # two must agree to the bit. Column 0 comes from a reset every 3rd collect.
        for algo in (eager, graphed):
            torch.manual_seed(100 + i)  # the two share the device generator; resets draw from it
            algo.collect(deterministic=True)
        assert graphed.rollout.graphs[True].captured == (i >= GRAPH_WARMUPS)
        a, b = _rollout(eager), _rollout(graphed)
        for key in a:
            assert torch.equal(a[key], b[key]), (i, key)
        # The graph must read the live parameters and normalizer statistics: change them
        # in place, the way an update does, identically on both.
        with torch.no_grad():
            for algo in (eager, graphed):
                for p in algo.policy.model.parameters():
                    p.mul_(0.9).add_(0.01)
                algo.policy.update_obs_stats(algo.buffer.get("obs")[:, 1:].reshape(-1, 1))


def test_cudagraphed_collect_replays_identically_from_the_same_state() -> None:

    algo = AlgorithmConfig(num_envs=128, horizon=16, device="cuda", seed=0, cudagraphs=True).build(CartPole)
    for _ in range(4):
        algo.collect()
    assert algo.rollout.graphs[False].captured
    state = algo.state_dict()  # env state, last observation, RNG states
    first = (algo.collect(), _rollout(algo))
    algo.load_state_dict(state)  # in place: the captured graph keeps its addresses
    second = (algo.collect(), _rollout(algo))
    assert {k: v for k, v in first[0].items() if not k.startswith("profiling")} == {
        k: v for k, v in second[0].items() if not k.startswith("profiling")
    }
    for key in first[1]:
        assert torch.equal(first[1][key], second[1][key]), key


def test_the_captured_collect_holds_the_tail_values_scaler_and_statistics() -> None:
    """The collect graph holds the tail as well as the T loop: after the capture, each
    replay leaves ``V(final_obs)`` on the truncated steps (0 elsewhere) bit for bit as the
    eager tail values them (the same function on the same rows; on a CPU
    ``tests/collect/test_collect.py`` checks that function against valuing every
    step), merges every step's return into the reward scaler, and reports the episodes
    that ended in the buffer it wrote."""
    from rlx.core.cuda_graphs import GRAPH_WARMUPS
    from rlx.envs import Pendulum

    class ShortPendulum(Pendulum):
        max_episode_steps = 5  # truncations in every collect

    B, T = 256, 16
    algo = AlgorithmConfig(num_envs=B, horizon=T, device="cuda", seed=0, cudagraphs=True, normalize_rewards=True,
                           model_config={"hiddens": [32, 32]}).build(ShortPendulum)
    for i in range(GRAPH_WARMUPS + 3):
        count = algo.reward_scaler.stats.count.clone()
        out = algo.collect()
        assert algo.rollout.graphs[False].captured == (i >= GRAPH_WARMUPS)
        buf = algo.buffer
        truncated = buf.get("truncated")[:, :T]
        assert truncated.any()
        with torch.no_grad():  # the same function on the same rows, run eagerly: the same kernels
            want, overflow = algo.rollout.truncated_final_values()
        assert not overflow and torch.equal(buf.get("final_values")[:, :T], want)
        assert float(algo.reward_scaler.stats.count - count) == B * T
        assert out["episodes/count"] == float(truncated.sum())
        algo.step()


def test_envs_that_are_not_graph_safe_keep_the_eager_collect() -> None:

    class Unsafe(CartPole):
        graph_safe = False

    algo = AlgorithmConfig(num_envs=64, horizon=8, device="cuda", seed=0, cudagraphs=True).build(Unsafe)
    assert not algo.rollout.graphed
    for _ in range(4):
        algo.collect()
        algo.step()
    assert not algo.rollout.graphs and _update_captured(algo)  # the update is still graphed


@pytest.mark.parametrize(
    "env_name, extra",
    [
        ("CartPole", {}),
        ("CartPole", {"line_search": True, "normalize_obs": True}),
        ("CartPole", {"line_search": True, "compile": True}),  # the natural step as one Triton program
        ("Pendulum", {"line_search": True, "step_size_rule": "fixed", "enable_amp": True, "critic_minibatch_size": 1024}),
    ],
)
def test_npg_collect_and_step_do_not_sync_on_cuda(env_name: str, extra: dict) -> None:
    import rlx.envs
    from rlx import NPGConfig

    algo = NPGConfig(num_envs=256, horizon=16, device="cuda", seed=0, **extra).build(getattr(rlx.envs, env_name))
    for stats in _run_without_syncs(algo):
        assert all(isinstance(v, float) for v in stats.values())


def test_same_seed_same_stats_on_cuda() -> None:

    runs = []
    for _ in range(2):
        algo = AlgorithmConfig(num_envs=128, horizon=8, device="cuda", seed=3, cudagraphs=False).build(CartPole)
        runs.append(algo.collect()["rewards/mean"])
    assert runs[0] == runs[1]


def test_cuda_buffer_and_policy_live_on_the_device() -> None:

    algo = AlgorithmConfig(num_envs=64, horizon=8, device="cuda").build(CartPole)
    assert all(t.is_cuda for t in algo.buffer.values(include_nested=True, leaves_only=True))
    assert all(p.is_cuda for p in algo.policy.parameters())


@pytest.mark.parametrize(
    "extra",
    [
        {"seq_len": 8},
        {"seq_len": 4, "burn_in": 4, "normalize_obs": True, "target_kl_div": 0.02, "sgd_minibatch_size": 1024},
        {"enable_amp": True, "model_config": {"cell": "gru", "hidden_size": 32, "num_layers": 2}},
        {"seq_len": 4, "burn_in": 4, "target_kl_div": 0.02, "sgd_minibatch_size": 1024, "cudagraphs": True},
    ],
)
def test_recurrent_collect_and_step_do_not_sync_on_cuda(extra: dict) -> None:
    from rlx import RecurrentAlgorithmConfig
    from rlx.envs import CartPoleNoVelocity

    algo = RecurrentAlgorithmConfig(num_envs=256, horizon=16, device="cuda", seed=0, **extra).build(CartPoleNoVelocity)
    for stats in _run_without_syncs(algo):
        assert all(isinstance(v, float) for v in stats.values())
    assert algo.buffer.get("hidden").is_cuda


# -- many seeds in one process (issue #20) ----------------------------------------------
#
# With seeds the captured minibatch update holds every seed's step: the per-seed gradient
# clipping, the divergence freeze, the KL early stop (a ``[S]`` gate on each seed's step,
# not on the LR the seeds share) and the per-seed LR factors all read device tensors at
# fixed addresses, so a replay applies the state they hold at that moment.

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "config_name, extra",
    [
        ("ppo", {"sgd_minibatch_size": 512, "normalize_obs": True, "target_kl_div": 0.02, "cudagraphs": False}),
        ("ppo", {"sgd_minibatch_size": 1024, "kl_adaptive_lr": True, "target_kl_div": 0.01, "enable_amp": True}),
        ("ppo", {"sgd_minibatch_size": 512, "cudagraphs": True, "target_kl_div": 0.02}),
        ("ppo", {"sgd_minibatch_size": 512, "compile": True, "normalize_obs": True, "cudagraphs": False}),
        ("ppo", {"sgd_minibatch_size": 512, "compile": True, "target_kl_div": 0.02, "cudagraphs": False}),  # the stop in the compiled update
        ("npg", {"line_search": True, "normalize_obs": True}),
        ("recurrent", {"seq_len": 8, "sgd_minibatch_size": 1024}),
    ],
    ids=["ppo-kl-stop", "ppo-adaptive-lr-bf16", "ppo-cudagraphs", "ppo-compile", "ppo-compile-kl-stop", "trpo",
         "recurrent-ppo"],
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
        assert "member3/losses/total" in stats or "member3/episodes/count" in stats
    if extra.get("cudagraphs"):
        assert _update_captured(algo) and algo.rollout.graphs[False].captured


def _update_captured(algo) -> bool:
    """Whether the update's CUDA graph is captured, whichever ``cudagraphs_scope`` holds it
    (``"step"``, the default: the whole update phase; ``"minibatch"``: each minibatch update)."""
    return algo.run_update_phase.captured if algo.graphs_whole_step else algo.update.captured


def _build(S: int, cudagraphs: bool, **extra):
    return AlgorithmConfig(
        num_envs=256, horizon=16, device="cuda", seed=0, num_seeds=S, sgd_minibatch_size=512,
        cudagraphs=cudagraphs, shuffle_minibatches=False, cudagraphs_scope="minibatch", **extra,
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
        assert _update_captured(graphed)
        for i in range(S):
            key = f"member{i}/monitors/optimizer_steps"
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
        assert _update_captured(algo)
        torch.manual_seed(20)
        algo.collect(deterministic=True)
        if poison:
            algo.buffer.get("rewards")[1, 3] = float("nan")  # sub-env 1: seed 0's
        before = [p.detach().clone() for p in algo.policy.model.parameters()]
        runs.append((algo, algo.step(), before))
    (clean, clean_stats, _), (poisoned, stats, before) = runs
    assert clean_stats["members/active"] == 3.0
    assert stats["member0/active"] == 0.0 and stats["members/active"] == 2.0
    for a, b, start in zip(clean.policy.model.parameters(), poisoned.policy.model.parameters(), before):
        assert torch.equal(b[0], start[0])
        torch.testing.assert_close(a[1:], b[1:], rtol=1e-6, atol=1e-7)
        assert not torch.equal(b[1:], start[1:])
    poisoned.collect()
    frozen = [p.detach()[0].clone() for p in poisoned.policy.model.parameters()]
    assert poisoned.step()["member0/active"] == 0.0
    for p, f in zip(poisoned.policy.model.parameters(), frozen):
        assert torch.equal(p.detach()[0], f)


def test_eight_graphed_seeds_of_the_shipped_cartpole_config_all_solve(tmp_path) -> None:
    """``rlx train configs/cartpole_ppo.yaml --seeds 8`` on CUDA with ``cudagraphs=True``:
    every seed reaches the stop threshold within the budget, and the seeds that reach it
    first stop updating (their done flag is read by the replayed update)."""
    from rlx.run.cli import main

    run_dir = tmp_path / "run"
    args = ["train", str(ROOT / "configs" / "cartpole_ppo.yaml"), "--seeds", "8", "--run-dir", str(run_dir),
            "--set", "config.device=cuda", "--set", "config.cudagraphs=true"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert rows[-1]["env_steps"] < 300_000
    for i in range(8):
        lengths = [r[f"member{i}/episodes/length_mean"] for r in rows if r.get(f"member{i}/episodes/length_mean") is not None]
        assert max(lengths) >= 475, i
    assert any(r["members/active"] < 8 for r in rows)


def test_a_captured_update_is_captured_again_after_load_state_dict() -> None:
    """Loading a checkpoint replaces the optimizer's state tensors, which a captured
    update would go on reading (its restored moments and step counts ignored): the
    update is warmed up and captured again, and repeats the step it made from that state."""
    algo = _build(2, True)
    for k in range(2):
        torch.manual_seed(k)
        algo.collect(deterministic=True)
        algo.step()
    assert _update_captured(algo)
    state = algo.state_dict()
    after = []
    for _ in range(2):
        torch.manual_seed(5)
        algo.collect(deterministic=True)
        algo.step()
        after.append([p.detach().clone() for p in algo.policy.parameters()])
        algo.load_state_dict(state)
        assert not _update_captured(algo)
    for a, b in zip(*after):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _step_both_from_one_state(graphed, plain) -> tuple[dict[str, float], dict[str, float]]:
    """``graphed`` collects; ``plain`` takes its state and rollout; both step on the same
    random numbers. Returns their step statistics, their parameters held equal.

    The state is taken after the collect (its reward scaler moved: GAE scales the rewards
    with it), and the generators are restored between the steps (their minibatch orders
    draw from them). Loaded before the collect, with each step drawing after the
    other's, the capture test below failed on an H100 (2026-11-26, 1e4c917) for those
    two reasons: on a CPU the same comparison gives 1e-2 apart that way and bit-identical
    parameters this way."""
    graphed.collect()
    plain.load_state_dict(graphed.state_dict())
    plain.buffer.update_(graphed.buffer)
    plain._buffered = True
    rng = torch.get_rng_state(), torch.cuda.get_rng_state()
    graphed_stats = graphed.step()
    torch.set_rng_state(rng[0])
    torch.cuda.set_rng_state(rng[1])
    plain_stats = plain.step()
    for a, b in zip(plain.policy.parameters(), graphed.policy.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    if getattr(graphed, "rnd", None) is not None:  # RND's predictor steps inside the captured update
        for a, b in zip(plain.rnd.predictor.parameters(), graphed.rnd.predictor.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    return graphed_stats, plain_stats


@pytest.mark.parametrize("extra", [{}, {"num_seeds": 3, "member_hparams": {"lr": [1e-4, 3e-4, 1e-3]}}],
                         ids=["one", "members"])
def test_compiled_update_captured_in_a_cuda_graph_matches_compile_alone(extra: dict) -> None:
    """compile and cudagraphs combine: the graph replays the compiled update (with S
    members, the compiled S-member update), which moves the parameters as the compiled
    update alone does on the same rollout."""
    config = dict(num_envs=256, horizon=16, device="cuda", seed=0, sgd_minibatch_size=1024, compile=True, **extra)
    both = AlgorithmConfig(**config, cudagraphs=True, cudagraphs_scope="minibatch").build(CartPole)
    for _ in range(5):  # the update's 3 warm-ups, its capture, a replay
        both.collect()
        both.step()
    assert both.update.captured and both.compiled_update is not None  # the graph replays the compiled update
    plain = AlgorithmConfig(**config, cudagraphs=False).build(CartPole)
    graphed_stats, plain_stats = _step_both_from_one_state(both, plain)
    assert graphed_stats["losses/total"] == pytest.approx(plain_stats["losses/total"], rel=1e-4, abs=1e-6)
    for stats in _run_without_syncs(both):
        assert all(isinstance(v, float) for v in stats.values())


@pytest.mark.parametrize("extra", [
    {},
    {"target_kl_div": 0.002, "normalize_obs": True, "lr_schedule": [(0, 1e-3), (100_000, 1e-4)]},
    {"num_seeds": 3, "member_hparams": {"lr": [1e-4, 3e-4, 1e-3]}, "target_kl_div": 0.01},
    {"compile": True},
    {"enable_amp": True, "target_kl_div": 0.01},
    # RND: the intrinsic rewards in the graph's GAE, the predictor's step held with the policy's.
    {"rnd": {"weight": 0.5, "predictor_hiddens": [32], "target_hiddens": [32], "normalize_state": True,
             "normalize_reward": True}, "target_kl_div": 0.002},
    # One graph holds unequal minibatches (4096 samples: 1536, 1536, 1024) and gradients
    # accumulated over an epoch's minibatches with one step at its end.
    {"sgd_minibatch_size": 1536, "target_kl_div": 0.01},
    {"accumulate_grads": True, "target_kl_div": 0.01},
], ids=["one", "kl_stop_schedule", "members", "compiled", "amp", "rnd", "unequal", "accumulate"])
def test_the_step_captured_whole_matches_the_uncaptured_step(extra: dict) -> None:
    """``cudagraphs_scope="step"``: one graph holds all of step()'s device work (GAE, the
    epochs' orders and gathers, the minibatch updates with the KL early stop's gating,
    the statistics). Replayed, it moves the parameters and reports the statistics that
    the same step run without graphs does on the same rollout and random numbers; it
    runs without a host sync; a load captures it again."""
    config = {"num_envs": 256, "horizon": 16, "device": "cuda", "seed": 0, "sgd_minibatch_size": 1024, **extra}
    whole = AlgorithmConfig(**config, cudagraphs=True, cudagraphs_scope="step").build(CartPole)
    assert whole.graphs_whole_step and not hasattr(whole.update, "captured")  # no graph per minibatch
    for _ in range(5):  # 3 warm-ups, the capture, a replay
        whole.collect()
        whole.step()
    assert whole.run_update_phase.captured
    plain = AlgorithmConfig(**config, cudagraphs=False).build(CartPole)
    graphed_stats, plain_stats = _step_both_from_one_state(whole, plain)
    for key in ("losses/total", "monitors/kl_div", "monitors/clip_fraction", "losses/rnd", "rnd/intrinsic_reward"):
        if key in plain_stats:
            assert graphed_stats[key] == pytest.approx(plain_stats[key], rel=1e-4, abs=1e-6), key
    if "target_kl_div" in extra:
        assert graphed_stats["monitors/optimizer_steps"] == plain_stats["monitors/optimizer_steps"]
    for stats in _run_without_syncs(whole):
        assert all(isinstance(v, float) for v in stats.values())
    whole.load_state_dict(plain.state_dict())
    assert not whole.run_update_phase.captured  # the optimizer state it read was replaced


@pytest.mark.parametrize("extra", [
    {"seq_len": 4, "burn_in": 4, "target_kl_div": 0.002, "normalize_obs": True},
    {"seq_len": 8, "model_config": {"cell": "gru", "hidden_size": 32, "num_layers": 2}},
], ids=["lstm_burn_in_kl_stop", "gru"])
def test_a_recurrent_policys_step_captured_whole_matches_the_uncaptured_step(extra: dict) -> None:
    """A recurrent policy's step in one CUDA graph (its sequences cut and gathered, the
    burn-in, the cells unrolled over ``seq_len``, the KL stop gating on the device), and
    its collect in another (each step's state and reset flag): the step moves the
    parameters as the uncaptured step does on the same rollout, without a host sync.
    Until this passes on a GPU, ``cudagraphs="auto"`` leaves recurrent policies uncaptured
    (rlx.algorithms.modes._untested_on_cuda)."""
    from rlx import RecurrentAlgorithmConfig
    from rlx.envs import CartPoleNoVelocity

    config = dict(num_envs=256, horizon=16, device="cuda", seed=0, sgd_minibatch_size=1024, **extra)
    whole = RecurrentAlgorithmConfig(**config, cudagraphs=True).build(CartPoleNoVelocity)
    assert whole.graphs_whole_step and whole.rollout.graphed
    for _ in range(5):  # 3 warm-ups, the capture, a replay
        whole.collect()
        whole.step()
    assert whole.run_update_phase.captured and whole.rollout.graphs[False].captured
    plain = RecurrentAlgorithmConfig(**config, cudagraphs=False).build(CartPoleNoVelocity)
    graphed_stats, plain_stats = _step_both_from_one_state(whole, plain)
    for key in ("losses/total", "monitors/kl_div", "monitors/clip_fraction"):
        assert graphed_stats[key] == pytest.approx(plain_stats[key], rel=1e-4, abs=1e-6), key
    if "target_kl_div" in extra:
        assert graphed_stats["monitors/optimizer_steps"] == plain_stats["monitors/optimizer_steps"]
    for stats in _run_without_syncs(whole):
        assert all(isinstance(v, float) for v in stats.values())


@pytest.mark.parametrize("extra", [{}, {"compile": True, "num_seeds": 2, "max_grad_norm": 0.5}], ids=["one", "compiled_members"])
def test_a_students_step_captured_whole_matches_the_uncaptured_step(tmp_path, extra: dict) -> None:
    """Distillation's ``cudagraphs``: one graph holds the student's step (the teacher's
    targets, every epoch's order, the minibatch updates, unequal ones included, the
    statistics); replayed, it moves the student as the uncaptured step does on the same
    rollout, without a host sync. Until this passes on a GPU, ``"auto"`` leaves it off
    (``DistillationConfig.untested_on_cuda``)."""
    from rlx import DistillationConfig
    from rlx.config.run import TrainerConfig
    from rlx.envs import Pendulum
    from rlx.run.trainer import Trainer

    teacher = AlgorithmConfig(num_envs=16, horizon=16, device="cpu", seed=0, model_config={"hiddens": [16, 16]}).build(Pendulum)
    Trainer(teacher, TrainerConfig(max_iterations=2, progress=False, tensorboard=False), run_dir=tmp_path / "t").run()
    config = dict(teacher=str(tmp_path / "t"), num_envs=256, horizon=16, device="cuda", seed=1, num_sgd_iters=2,
                  sgd_minibatch_size=1536, model_config={"hiddens": [16, 16]}, **extra)
    whole = DistillationConfig(**config, cudagraphs=True).build(Pendulum)
    for _ in range(5):  # 3 warm-ups, the capture, a replay
        whole.collect()
        whole.step()
    assert whole.run_update_phase.captured and whole.rollout.graphs[False].captured
    plain = DistillationConfig(**config, cudagraphs=False).build(Pendulum)
    graphed_stats, plain_stats = _step_both_from_one_state(whole, plain)
    assert graphed_stats["losses/behavior"] == pytest.approx(plain_stats["losses/behavior"], rel=1e-4, abs=1e-6)
    for stats in _run_without_syncs(whole):
        assert all(isinstance(v, float) for v in stats.values())
    whole.load_state_dict(plain.state_dict())
    assert not whole.run_update_phase.captured  # the optimizer state it read was replaced


def test_a_recurrent_policys_cudagraphed_collect_replays_the_eager_rollout_bit_for_bit() -> None:
    """The captured T loop of a recurrent policy writes what the eager loop writes:
    deterministic actions and a deterministic env, so bit for bit, states and reset
    flags included, with the parameters changed in place between collects."""
    from rlx import RecurrentAlgorithmConfig
    from rlx.core.cuda_graphs import GRAPH_WARMUPS
    from rlx.envs import DiscreteDummyEnv

    def build(cudagraphs: bool):
        return RecurrentAlgorithmConfig(num_envs=64, horizon=8, seq_len=4, device="cuda", seed=0,
                                        cudagraphs=cudagraphs, horizons_per_env_reset=3).build(DiscreteDummyEnv)

    eager, graphed = build(False), build(True)
    assert graphed.rollout.graphed and not eager.rollout.graphed
    for i in range(GRAPH_WARMUPS + 3):  # warm-ups, the capture, then replays
        for algo in (eager, graphed):
            torch.manual_seed(100 + i)
            algo.collect(deterministic=True)
        assert graphed.rollout.graphs[True].captured == (i >= GRAPH_WARMUPS)
        for key in ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated", "hidden", "resets"):
            assert torch.equal(eager.buffer.get(key), graphed.buffer.get(key)), (i, key)
        with torch.no_grad():
            for algo in (eager, graphed):
                for p in algo.policy.model.parameters():
                    p.mul_(0.9).add_(0.01)


@pytest.mark.parametrize("extra", [
    {},
    {"line_search": True, "normalize_obs": True, "critic_minibatch_size": 1024, "lr_schedule": [(0, 1e-3), (100_000, 1e-4)]},
    {"num_seeds": 2, "line_search": True},
    {"compile": True},
], ids=["npg", "trpo_schedule", "members", "compiled"])
def test_npgs_step_captured_whole_matches_the_uncaptured_step(extra: dict) -> None:
    """NPG's ``cudagraphs``: one graph holds all of its step's device work (GAE, the FVP
    subsample, conjugate gradient, the line search's choice, the critic's epochs, the
    statistics). Replayed, it moves the parameters and reports what the same step run
    without graphs does on the same rollout and random numbers; it runs without a host
    sync; a load captures it again."""
    from rlx import NPGConfig
    from rlx.envs import Pendulum

    config = dict(num_envs=256, horizon=16, device="cuda", seed=0, **extra)
    graphed = NPGConfig(**config, cudagraphs=True).build(Pendulum)
    assert graphed.uses_cuda_graphs and graphed.rollout.graphed
    for _ in range(5):  # 3 warm-ups, the capture, a replay
        graphed.collect()
        graphed.step()
    assert graphed.run_update_phase.captured
    plain = NPGConfig(**config, cudagraphs=False).build(Pendulum)
    graphed_stats, plain_stats = _step_both_from_one_state(graphed, plain)
    for key in ("losses/policy", "losses/vf", "monitors/kl_div", "npg/step_size"):
        assert graphed_stats[key] == pytest.approx(plain_stats[key], rel=1e-4, abs=1e-6), key
    for stats in _run_without_syncs(graphed):
        assert all(isinstance(v, float) for v in stats.values())
    graphed.load_state_dict(plain.state_dict())
    assert not graphed.run_update_phase.captured  # the optimizer state it read was replaced


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_the_shipped_cartpole_config_solves_with_tf32_matmuls_as_with_float32(train_best, precision: str) -> None:
    """#42's precision question, asked of learning: JAX multiplies float32 matrices in
    TF32 on these GPUs. The shipped CartPole config (its seeds 0-2, graphed) solves within
    the CPU budget with TF32 matmuls as with float32 ones: what makes ``"tf32"`` the CUDA
    default (``matmul_precision="auto"``; passed on an H100, 2026-11-27). The env steps
    each took go in the test's output."""
    import dataclasses

    from rlx.examples.cartpole import SOLVED_LENGTH, cartpole_config

    steps = []
    for seed in range(3):
        config = dataclasses.replace(cartpole_config(seed=seed, device="cuda"), matmul_precision=precision)
        algo = config.build(CartPole)
        best = train_best(algo, "episodes/length_mean", SOLVED_LENGTH, 300_000)
        assert best >= SOLVED_LENGTH, (precision, seed, best, algo.env_steps)
        steps.append(algo.env_steps)
    print(f"matmul_precision={precision}: solved after {steps} env steps")


def test_the_compiled_update_equals_the_uncompiled_one_on_cuda() -> None:
    """tests/algorithms/test_one_update.py's comparison on CUDA for a feedforward policy,
    gradient clip acting: the Triton program (its clip by ``_foreach_norm``, the norms
    read into their total by one kernel: ``rlx.members.ops.PER_GRADIENT_NORMS``,
    ``rlx.core.compiling.CUDA_INDUCTOR_OPTIONS``) takes the eager update's steps in
    float64."""
    from tests.algorithms.test_one_update import BASE, _close, _float64

    config = {**BASE, "device": "cuda", "max_grad_norm": 0.05, "cudagraphs": False}
    eager = AlgorithmConfig(**config, compile=False).build(CartPole)
    compiled = AlgorithmConfig(**config, compile=True).build(CartPole)
    assert compiled.compile_fallback is None and compiled.update is compiled.compiled_update
    _float64(eager, compiled)
    compiled.policy.load_state_dict(eager.policy.state_dict())
    compiled.rollout.act_fn, compiled.rollout.value_fn = compiled.policy.act_step, compiled.policy.value_step
    compiled.rollout.compiled_loop = None  # collect eagerly in both (the compiled T loop draws other numbers)
    for algo in (eager, compiled):
        torch.manual_seed(11)
        torch.cuda.manual_seed(11)
        algo.collect()
        algo.step()
    _close(eager, compiled)


def test_a_recurrent_policys_compiled_update_equals_the_uncompiled_one_on_cuda() -> None:
    """The CPU test's comparison (tests/algorithms/test_one_update.py) on CUDA: the update
    compiled with Triton takes the eager update's steps in float64. Until it has passed on
    a GPU, ``compile="auto"`` leaves recurrent policies eager on CUDA (rlx.algorithms.modes)."""
    from tests.algorithms.test_one_update import recurrent_compiled_equals_eager

    recurrent_compiled_equals_eager("cuda")


def test_a_recurrent_policys_compiled_t_loop_writes_what_the_eager_one_writes_on_cuda() -> None:
    """The CPU test's comparison on CUDA: the T loop's Triton programs read and write each
    step's state and reset flags by index as the eager loop does through views."""
    from tests.algorithms.test_one_update import recurrent_t_loop_compiled_equals_eager

    recurrent_t_loop_compiled_equals_eager("cuda")
