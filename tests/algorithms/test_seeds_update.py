"""PPO, A2C and NPG/TRPO with ``num_seeds = S``: each seed's update is a single-seed run's,
and seeds do not touch each other (issue #20's equivalence and independence)."""

from __future__ import annotations

import math

import pytest
import torch

from rlx import A2CConfig, AlgorithmConfig, ConfigError, NPGConfig, RecurrentA2CConfig, RecurrentAlgorithmConfig
from rlx.envs import CartPole, CartPoleNoVelocity, Pendulum
from rlx.members import StackedMLPActorCritic

B, T = 8, 16
BUFFER_KEYS = ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated", "final_values", "hidden", "resets")


def _config(**kwargs) -> dict:
    # SGD: its step is the gradient itself, so float32 rounding of the batched versus the
    # single matmuls stays at rounding level (Adam's first steps would turn it into
    # lr-sized moves; Adam's equivalence is tested in float64 in tests/members/test_seeds.py).
    base = dict(num_envs=B, horizon=T, device="cpu", seed=0, optimizer_cls=torch.optim.SGD,
                optimizer_config={"lr": 0.05}, model_config={"hiddens": [16, 16], "activation_fn": "tanh"})
    return {**base, **kwargs}


def _feed_seed(multi, single, i: int) -> None:
    """Give ``single`` seed i's parameters, rollout and reward scale."""
    single.policy.model.load_state_dict(multi.policy.model.unstack(i).state_dict())
    rows = slice(i * B, (i + 1) * B)
    for key in BUFFER_KEYS:
        if key in multi.buffer.keys():
            single.buffer.get(key).copy_(multi.buffer.get(key)[rows])
    pairs = [(multi.reward_scaler.stats, single.reward_scaler.stats)]
    pairs += [(multi.policy.obs_normalizers[k], single.policy.obs_normalizers[k]) for k in single.policy.obs_normalizers]
    for many, one in pairs:
        one.mean.copy_(many.mean[i])
        one.var.copy_(many.var[i])
        one.count.copy_(many.count)


def _multi_and_singles(S: int, extra: dict, env_cls=Pendulum) -> tuple:
    """An S-seed PPO and S single-seed PPOs of the same config."""
    multi = AlgorithmConfig(**_config(num_seeds=S, **extra)).build(env_cls)
    return multi, [AlgorithmConfig(**_config(**extra)).build(env_cls) for _ in range(S)]


def _collect_and_feed(multi, singles: list) -> None:
    """Collect with all, then give single i seed i's parameters and rollout."""
    multi.collect()
    for i, single in enumerate(singles):
        single.collect()
        _feed_seed(multi, single, i)


def _side_by_side(config_cls, env_cls, extra: dict, S: int = 3, rtol: float = 1e-5, atol: float = 1e-6,
                  float64: bool = False) -> tuple[dict, list[dict]]:
    """One step() of an S-seed run and of S single-seed runs fed its seeds' parameters and
    rollouts; checks the parameters agree and returns the step statistics of both.
    ``float64``: every model computes in float64 (a reference run of the same code)."""
    multi = config_cls(**_config(num_seeds=S, **extra)).build(env_cls)
    if float64:
        multi.policy.double()
    multi.collect()
    singles = []
    for i in range(S):
        single = config_cls(**_config(**extra)).build(env_cls)
        if float64:
            single.policy.double()
        single.collect()
        _feed_seed(multi, single, i)
        singles.append(single)
    out = multi.step()
    ones = [single.step() for single in singles]
    for i, single in enumerate(singles):
        for a, b in zip(multi.policy.model.unstack(i).parameters(), single.policy.model.parameters()):
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
    return out, ones


@pytest.mark.parametrize(
    "env_cls,extra",
    [
        (CartPole, {}),  # whole-buffer minibatch
        (CartPole, {"sgd_minibatch_size": 32, "shuffle_minibatches": False, "max_grad_norm": 0.1}),
        (Pendulum, {"sgd_minibatch_size": 48, "shuffle_minibatches": False, "target_kl_div": 1e-3,
                    "optimizer_config": {"lr": 0.02}}),
        (Pendulum, {"normalize_rewards": False, "num_sgd_iters": 2}),
        (Pendulum, {"normalize_obs": True, "sgd_minibatch_size": 64, "shuffle_minibatches": False}),
    ],
    ids=["whole-batch", "minibatches-clip", "kl-early-stop", "no-reward-scaling", "obs-normalization"],
)
def test_each_seed_updates_as_a_single_seed_run_on_its_rows(env_cls, extra: dict) -> None:
    out, ones = _side_by_side(AlgorithmConfig, env_cls, extra)
    steps = []
    for i, one in enumerate(ones):
        for key in ("losses/policy", "losses/vf", "monitors/kl_div", "monitors/clip_fraction"):
            assert math.isclose(out[f"member{i}/{key}"], one[key], rel_tol=1e-4, abs_tol=1e-6), key
        if "target_kl_div" in extra:
            assert out[f"member{i}/monitors/optimizer_steps"] == one["monitors/optimizer_steps"]
            steps.append(one["monitors/optimizer_steps"])
    if steps:  # each seed stopped at its own point (4 epochs of 3 minibatches: 12 steps at most)
        assert len(set(steps)) > 1 and min(steps) < 12


@pytest.mark.parametrize("extra", [{}, {"sgd_minibatch_size": 32, "shuffle_minibatches": False, "normalize_obs": True}],
                         ids=["whole-batch", "minibatches-obs-normalization"])
def test_each_a2c_seed_updates_as_a_single_seed_run_on_its_rows(extra: dict) -> None:
    out, ones = _side_by_side(A2CConfig, Pendulum, extra)
    for i, one in enumerate(ones):
        for key in ("losses/policy", "losses/vf", "losses/entropy"):
            assert math.isclose(out[f"member{i}/{key}"], one[key], rel_tol=1e-4, abs_tol=1e-6), key


def test_the_kl_adaptive_lr_moves_each_seeds_lr_on_its_own_kl() -> None:
    """Two updates from the same rollouts: after the first, each seed's LR is the rule
    applied to its own KL, and the second update of seed i equals a single-seed run's
    at that LR."""
    S = 3
    extra = {"target_kl_div": 2e-4, "kl_adaptive_lr": True, "kl_adaptive_lr_bounds": (1e-4, 1.0),
             "sgd_minibatch_size": 32, "shuffle_minibatches": False}
    multi, singles = _multi_and_singles(S, extra)
    lrs = set()
    for _ in range(2):
        _collect_and_feed(multi, singles)
        out = multi.step()
        for i, single in enumerate(singles):
            one = single.step()
            assert out[f"member{i}/monitors/lr"] == pytest.approx(one["monitors/lr"], rel=1e-9)
            assert multi.lr * multi.members.lr_factors()[i] == pytest.approx(single.lr, rel=1e-9)
            lrs.add(round(single.lr, 12))
            for a, b in zip(multi.policy.model.unstack(i).parameters(), single.policy.model.parameters()):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert len(lrs) > 1  # the seeds' LRs went their own ways


def _poison_seed_zero(build, row: int):
    """Step a clean and a poisoned copy (a NaN reward in sub-env ``row``, one of seed 0's):
    seeds 1.. must update exactly as in the clean run and seed 0 not at all. Returns the
    clean stats, the poisoned algorithm and its stats."""
    runs = []
    for poison in (False, True):
        algo = build()
        algo.collect()
        if poison:
            algo.buffer.get("rewards")[row, 3] = float("nan")
        before = [p.detach().clone() for p in algo.policy.model.parameters()]
        runs.append((algo, algo.step(), before))
    (clean, clean_stats, _), (poisoned, stats, before) = runs
    for a, b, start in zip(clean.policy.model.parameters(), poisoned.policy.model.parameters(), before):
        assert torch.equal(a[1:], b[1:])
        assert torch.equal(b[0], start[0])
    return clean_stats, poisoned, stats


def test_a_diverged_seed_is_frozen_and_the_others_update_as_without_it() -> None:
    """NaN rewards in seed 0's rollout: its gradient is NaN, so it keeps its parameters
    and is marked inactive for good; seeds 1 and 2 update exactly as in a clean run."""
    clean_stats, poisoned, stats = _poison_seed_zero(lambda: AlgorithmConfig(**_config(num_seeds=3, sgd_minibatch_size=32)
                                                                        ).build(CartPole), row=1)
    assert stats["member0/active"] == 0.0 and stats["member1/active"] == 1.0 and stats["members/active"] == 2.0
    assert clean_stats["members/active"] == 3.0
    assert all(math.isfinite(p.detach().sum().item()) for p in poisoned.policy.model.parameters())
    poisoned.collect()  # the frozen seed still acts (finite parameters), and stays frozen
    frozen = [p.detach()[0].clone() for p in poisoned.policy.model.parameters()]
    assert poisoned.step()["member0/active"] == 0.0
    for p, f in zip(poisoned.policy.model.parameters(), frozen):
        assert torch.equal(p.detach()[0], f)


def test_seeds_share_nothing_in_the_normalizers_and_report_their_own_episodes() -> None:
    S = 2
    algo = AlgorithmConfig(**_config(num_seeds=S, normalize_obs=True)).build(Pendulum)
    stats = algo.collect()
    algo.step()  # merges the rollout's observations, each seed's into its own statistics
    obs = algo.buffer.get("obs")  # column 0: the reset merged at the first collect; 1..T: merged by step()
    rms = algo.policy.obs_normalizers["obs"]
    assert rms.mean.shape == (S, 3)
    for i in range(S):
        rows = obs[i * B : (i + 1) * B]
        seen = torch.cat([rows[:, 0], rows[:, 1 : T + 1].reshape(-1, 3)]).double()
        torch.testing.assert_close(rms.mean[i], seen.mean(0))
        torch.testing.assert_close(rms.var[i], seen.var(0, correction=0))
    scaler = algo.reward_scaler
    assert scaler.stats.mean.shape == (S,)
    rewards = algo.buffer.get("rewards")[:, :T, 0]
    assert not torch.equal(scaler.stats.mean[0], scaler.stats.mean[1])  # each seed's returns, not the pool
    assert set(k for k in stats if k.startswith("member")) >= {f"member{i}/episodes/{n}" for i in range(S)
                                                            for n in ("count", "return_mean", "length_mean")}
    assert rewards.shape == (S * B, T)
    assert algo.env.num_envs == S * B
    assert algo.env_steps == B * T  # per seed: the schedules of a single-seed run


@pytest.mark.parametrize("config_cls,env_cls,extra", [
    (AlgorithmConfig, CartPole, {"sgd_minibatch_size": 64}),
    (RecurrentAlgorithmConfig, CartPoleNoVelocity, {"sgd_minibatch_size": 64, "seq_len": 4, "normalize_obs": True,
                                                    "model_config": {"hiddens": [16], "hidden_size": 8}}),
    (NPGConfig, Pendulum, {"line_search": True, "fvp_subsample": 0.5, "critic_minibatch_size": 32}),
], ids=["ppo", "recurrent-ppo", "trpo"])
def test_seeds_resume_exactly(config_cls, env_cls, extra: dict, resumed_run) -> None:
    def run(resume_at: int | None) -> list[torch.Tensor]:
        make = lambda: config_cls(**_config(num_seeds=2, **extra)).build(env_cls)  # noqa: E731
        algo = resumed_run(make, resume_at)
        return [p.detach().clone() for p in algo.policy.model.parameters()]

    for a, b in zip(run(None), run(2)):
        assert torch.equal(a, b)


def test_what_seeds_do_not_support_yet_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"optimizer_config: Adam\(maximize=True\) is not supported with num_seeds=2"):
        AlgorithmConfig(num_seeds=2, optimizer_config={"lr": 1e-3, "maximize": True}, device="cpu").build(CartPole)
    # cudagraphs is accepted with seeds (tests/test_gpu.py); on a CPU it needs CUDA, as for one seed
    with pytest.raises(ValueError, match="cudagraphs: needs a CUDA device, got cpu"):
        AlgorithmConfig(num_seeds=2, cudagraphs=True, device="cpu").build(CartPole)
    with pytest.raises(ConfigError, match="model_cls: num_seeds=2 needs a model with a seed dim"):
        AlgorithmConfig(num_seeds=2, model_cls=torch.nn.Linear, device="cpu")
    with pytest.raises(ConfigError, match="num_seeds: must be"):
        AlgorithmConfig(num_seeds=0, device="cpu")
    stacked = StackedMLPActorCritic(CartPole(1, 1).observation_spec, CartPole(1, 1).action_spec, num_params=(2, 0),
                                    num_seeds=3)
    with pytest.raises(ConfigError, match="model: stacks 3 seeds, but num_seeds=2"):
        AlgorithmConfig(num_seeds=2, model=stacked, device="cpu")


# -- NPG and TRPO -------------------------------------------------------------------------

# The natural step compared in float64 with conjugate gradient run to convergence (why:
# tests/members/test_member_hparams.py, NPG_FLOAT64). Converged, each solve is as well
# conditioned as F + λI (κ <= 5 / 0.1 = 50 at the default damping), so the batched and the
# single float64 solves agree to about κ·n·u = 50 · 128 · 2^-53 ≈ 7e-13 of a step: 1e-9
# relative leaves room for the forty iterations' rounding.
NPG_FLOAT64 = {"cg_iters": 40, "cg_residual_tol": 0.0}


@pytest.mark.parametrize(
    "env_cls,extra",
    [
        (Pendulum, {}),
        (Pendulum, {"normalize_obs": True, "optim_critic_iters": 3, "max_grad_norm": 0.5}),
        (CartPole, {"step_size_rule": "fixed"}),
        (Pendulum, {"line_search": True, "step_size_rule": "fixed", "trust_region_size": 3.0, "max_kl": 0.002}),
    ],
    ids=["npg", "obs-normalization-clip", "fixed-step", "trpo-backtracking"],
)
def test_each_npg_seed_updates_as_a_single_seed_run_on_its_rows(env_cls, extra: dict) -> None:
    extra = {"fvp_subsample": 1.0, "optim_critic_iters": 2, **NPG_FLOAT64, **extra}
    out, ones = _side_by_side(NPGConfig, env_cls, extra, rtol=1e-9, atol=1e-11, float64=True)
    for i, one in enumerate(ones):
        for key in ("losses/policy", "losses/vf", "monitors/kl_div", "npg/step_size", "npg/surrogate_gain"):
            # float32 statistics of equal float64 values: at most one float32 ulp apart (the
            # critic's loss, a float32 mean of 128 rows: n·2^-24 ≈ 7.6e-6 at most)
            assert math.isclose(out[f"member{i}/{key}"], one[key], rel_tol=1e-5 if key == "losses/vf" else 2**-22), key
        assert out[f"member{i}/npg/line_search_backtracks"] == one["npg/line_search_backtracks"]
    if extra.get("line_search"):  # each seed backtracked to its own KL
        backtracks = {one["npg/line_search_backtracks"] for one in ones}
        assert len(backtracks) > 1 and max(backtracks) > 0, backtracks
        for i, one in enumerate(ones):
            assert out[f"member{i}/monitors/kl_div"] <= 0.002 * 1.5  # the bound (on the whole batch here)


def test_a_diverged_npg_seed_is_frozen_and_the_others_update_as_without_it() -> None:
    _, _, stats = _poison_seed_zero(lambda: NPGConfig(**_config(num_seeds=3, line_search=True, critic_minibatch_size=32)
                                                      ).build(Pendulum), row=2)
    assert stats["member0/active"] == 0.0 and stats["members/active"] == 2.0
    assert stats["member0/npg/step_size"] == 0.0 and stats["member1/npg/step_size"] > 0.0


def test_compiled_seeds_act_and_update_as_eager_seeds() -> None:
    """``compile=True`` with seeds: the compiled act/value steps play the eager
    deterministic rollout, and the compiled losses give the eager update from the same
    data and shuffle (to rounding)."""
    def build(compile: bool):
        algo = AlgorithmConfig(**_config(num_seeds=3, compile=compile, sgd_minibatch_size=64,
                                         target_kl_div=0.01)).build(Pendulum)
        # float64: the KL stop then judges values no reordering can flip, and SGD's steps
        # (linear in the gradient) differ by n·2^-53·Σ|terms|·lr ≈ 4e-15 each.
        algo.policy.double()
        return algo

    eager = build(False)
    eager.collect(deterministic=True)
    compiled = build(True)  # reseeds: the same env resets
    compiled.collect(deterministic=True)
    for key in ("obs", "actions", "logp", "values"):
        torch.testing.assert_close(compiled.buffer.get(key), eager.buffer.get(key), rtol=1e-5, atol=1e-5)
    compiled.buffer.update(eager.buffer)  # the same data to the bit
    compiled.reward_scaler.load_state_dict(eager.reward_scaler.state_dict())
    # GAE eagerly on both sides: its compiled program rounds float32 apart (held to its own
    # bound in tests/algorithms/test_one_update.py), and Adam-free SGD would pass that on.
    compiled.prepare = compiled.prepared_batch
    stats = []
    for algo in (eager, compiled):
        torch.manual_seed(5)  # the same shuffles
        stats.append(algo.step())
    # The compiled path ran: SGD compiles the forward pass and losses (a bound method is never
    # `is` another, so the program is told by dynamo's mark).
    assert compiled.compile_fallback is not None and hasattr(compiled.loss_fn, "_torchdynamo_orig_callable")
    for a, b in zip(eager.policy.model.parameters(), compiled.policy.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)
    for i in range(3):
        assert stats[1][f"member{i}/losses/policy"] == pytest.approx(stats[0][f"member{i}/losses/policy"], rel=1e-4, abs=1e-7)


# -- recurrent PPO and A2C ----------------------------------------------------------------

RECURRENT_MODEL = {"hiddens": [16], "hidden_size": 8}


@pytest.mark.parametrize(
    "config_cls,env_cls,extra",
    [
        (RecurrentAlgorithmConfig, CartPoleNoVelocity, {}),
        (RecurrentAlgorithmConfig, Pendulum, {"sgd_minibatch_size": 32, "shuffle_minibatches": False, "normalize_obs": True,
                                              "burn_in": 4, "target_kl_div": 1e-3,
                                              "model_config": {**RECURRENT_MODEL, "cell": "gru", "num_layers": 2}}),
        (RecurrentA2CConfig, Pendulum, {}),
    ],
    ids=["ppo-lstm", "ppo-gru-minibatches-burn-in-kl-stop", "a2c-lstm"],
)
def test_each_recurrent_seed_updates_as_a_single_seed_run_on_its_sequences(config_cls, env_cls, extra: dict) -> None:
    """Sequences (with their stored states and resets) are seed-major units: each
    minibatch deals the same number of every seed's sequences, and seed i's update is a
    single-seed run's on its sub-envs."""
    extra = {"seq_len": 4, "model_config": RECURRENT_MODEL, **extra}
    out, ones = _side_by_side(config_cls, env_cls, extra)
    for i, one in enumerate(ones):
        for key in ("losses/policy", "losses/vf", "monitors/kl_div"):
            if key in one:
                assert math.isclose(out[f"member{i}/{key}"], one[key], rel_tol=1e-4, abs_tol=1e-6), key


def _amp_seed_runs(config_cls, extra: dict, perturb: int | None = None) -> tuple[list, list, list, list]:
    """One step() of a 3-seed AMP run, and of single-seed AMP and float32 runs each fed
    its seed's parameters and rollout (``perturb``: that seed's rewards and observations
    changed before the step). Returns the seeds' and the single runs' parameters, and the
    step statistics of the seeds and of the single AMP runs."""
    multi = config_cls(**_config(num_seeds=3, enable_amp=True, **extra)).build(Pendulum)
    multi.collect()
    if perturb is not None:
        rows = slice(perturb * B, (perturb + 1) * B)
        multi.buffer.get("rewards")[rows] += 1.0
        multi.buffer.get("obs")[rows] *= 1.1
    runs = {}
    for amp in (True, False):
        runs[amp] = [config_cls(**_config(enable_amp=amp, **extra)).build(Pendulum) for _ in range(3)]
        for i, single in enumerate(runs[amp]):
            single.collect()
            _feed_seed(multi, single, i)
    out = multi.step()
    ones = [single.step() for single in runs[True]]
    for single in runs[False]:
        single.step()
    params = [[p.detach().clone() for p in multi.policy.model.unstack(i).parameters()] for i in range(3)]
    amp_params, float_params = ([list(single.policy.model.parameters()) for single in runs[amp]] for amp in (True, False))
    return params, amp_params, float_params, [out, ones]


def _max_diff(a: list, b: list) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b))


@pytest.mark.parametrize("config_cls,extra", [(AlgorithmConfig, {"sgd_minibatch_size": 64, "shuffle_minibatches": False}),
                                              (NPGConfig, {"fvp_subsample": 1.0, "optim_critic_iters": 2})],
                         ids=["ppo", "npg"])
def test_amp_seeds_update_as_single_seed_amp_runs(config_cls, extra: dict) -> None:
    """``enable_amp`` with seeds: bf16 autocast (on CUDA too: no loss scale for the seeds
    to share). Each seed's update equals its single-seed AMP run's to within bf16's own
    effect on that update, the distance between the single run under AMP and in float32:
    the seeds multiply in batched kernels and the single runs in plain ones, whose bf16
    rounding may differ (on this CPU they agree to 3e-8). The minibatches are not
    shuffled: an S-seed run and single runs draw different permutations, which moved the
    parameters by up to 6e-3 even in float32 and failed this test's fixed 5e-3 on an H100.
    Seeds do not touch each other: another seed's changed rollout leaves a seed's update
    bit for bit."""
    params, amp_params, float_params, (out, ones) = _amp_seed_runs(config_cls, extra)
    for i in range(3):
        bf16_effect = _max_diff(amp_params[i], float_params[i])
        assert bf16_effect > 0  # autocast ran
        assert _max_diff(params[i], amp_params[i]) <= 2 * bf16_effect + 1e-6, i
        assert math.isclose(out[f"member{i}/losses/vf"], ones[i]["losses/vf"], rel_tol=2e-2), i
    perturbed = _amp_seed_runs(config_cls, extra, perturb=1)[0]
    assert _max_diff(perturbed[1], params[1]) > 1e-4
    for i in (0, 2):
        assert all(torch.equal(a, b) for a, b in zip(perturbed[i], params[i])), i


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_seeds_with_the_tensor_lr_of_cudagraphs_update_as_with_a_float_lr(optimizer: str) -> None:
    """``cudagraphs=True`` keeps the LR in a device tensor that the captured optimizer
    reads (and, for one seed, that the KL early stop zeroes). With seeds the early stop
    gates each seed's step instead, so the tensor LR must stay the shared base LR: the
    same update, seed by seed, as a float LR, with minibatches, the early stop and an LR
    schedule. (The capture itself needs CUDA: tests/test_gpu.py.)"""
    from rlx.algorithms.ppo import PPO

    class TensorLRPPO(PPO):
        needs_tensor_lr = property(lambda self: True)

    extra = dict(num_seeds=3, sgd_minibatch_size=32, target_kl_div=1e-3, lr_schedule=[(0, 0.05), (1000, 0.01)])
    if optimizer == "adam":
        extra.update(optimizer_cls=torch.optim.Adam, optimizer_config={"lr": 3e-3})
        extra["lr_schedule"] = [(0, 3e-3), (1000, 1e-3)]
    config = AlgorithmConfig(**_config(**extra))
    runs = []
    for cls in (PPO, TensorLRPPO):
        algo = cls(Pendulum, config)
        stats = []
        for k in range(3):
            algo.collect()
            torch.manual_seed(k)  # the same shuffles
            stats.append(algo.step())
        runs.append((algo, stats))
    (plain, plain_stats), (tensor, tensor_stats) = runs
    assert tensor._lr_tensor is not None and plain._lr_tensor is None
    assert all(isinstance(g["lr"], torch.Tensor) for g in tensor.optimizer.param_groups)
    for a, b in zip(plain.policy.model.parameters(), tensor.policy.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    steps = {s[f"member{i}/monitors/optimizer_steps"] for s in plain_stats for i in range(3)}
    assert min(steps) < 4 * 5  # the early stop cut some seed's update (5 minibatches, 4 epochs)
    for p, t in zip(plain_stats, tensor_stats):
        for i in range(3):
            assert t[f"member{i}/monitors/optimizer_steps"] == p[f"member{i}/monitors/optimizer_steps"]
        assert t["monitors/lr"] == pytest.approx(p["monitors/lr"], rel=1e-6)


def test_a_kl_stopped_seeds_adam_state_is_its_single_seed_runs() -> None:
    """Adam with the per-seed KL early stop, over two updates: a seed that stopped keeps
    its moments and step count while the other seeds run on (a single-seed run's update
    has ended), so each seed's Adam state, and its next update, are a single-seed run's."""
    S = 3
    extra = {"optimizer_cls": torch.optim.Adam, "optimizer_config": {"lr": 3e-3}, "target_kl_div": 3e-3,
             "sgd_minibatch_size": 32, "shuffle_minibatches": False}
    multi, singles = _multi_and_singles(S, extra)
    epochs = set()
    for _ in range(2):
        _collect_and_feed(multi, singles)  # the parameters too: they agree to rounding
        out = multi.step()
        for i, single in enumerate(singles):
            one = single.step()
            epochs.add(one["monitors/sgd_epochs"])
            assert out[f"member{i}/monitors/optimizer_steps"] == one["monitors/optimizer_steps"]
            mine = [multi.optimizer.state[p] for p in multi.policy.model.parameters()]
            theirs = [single.optimizer.state[p] for p in single.policy.model.parameters()]
            for a, b in zip(mine, theirs):
                assert float(a["step"][i]) == float(b["step"])  # steps passed through its optimizer
                mine_sq, theirs_sq = a["exp_avg_sq"][i], b["exp_avg_sq"]  # stacked [in, out], Linear [out, in]
                mine_sq = mine_sq.T if mine_sq.dim() == 2 and mine_sq.shape == theirs_sq.shape[::-1] else mine_sq.reshape(theirs_sq.shape)
                torch.testing.assert_close(mine_sq, theirs_sq, rtol=1e-3, atol=1e-10)
            for a, b in zip(multi.policy.model.unstack(i).parameters(), single.policy.model.parameters()):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert len(epochs) > 1  # the seeds stopped after different numbers of epochs


def test_a_done_seed_does_not_hold_the_kl_early_stop_open() -> None:
    """A done (or diverged) seed is frozen, so its KL stays 0 and its gate never closes:
    the update must end once every seed still training has stopped, not run all epochs."""
    extra = {"sgd_minibatch_size": 48, "shuffle_minibatches": False, "target_kl_div": 1e-3,
             "optimizer_config": {"lr": 0.05}, "num_sgd_iters": 8}
    algo = AlgorithmConfig(**_config(num_seeds=2, **extra)).build(Pendulum)
    algo.members.mark_done([0])
    algo.collect()
    before = [p.detach()[0].clone() for p in algo.policy.model.parameters()]
    out = algo.step()
    assert out["member0/active"] == 0.0 and out["member0/monitors/optimizer_steps"] == 0.0
    assert out["monitors/sgd_epochs"] < 8  # seed 1's stop ended the update
    assert out["monitors/sgd_epochs"] == math.ceil(out["member1/monitors/optimizer_steps"] / 3)  # 3 minibatches an epoch
    for p, b in zip(algo.policy.model.parameters(), before):
        assert torch.equal(p.detach()[0], b)
