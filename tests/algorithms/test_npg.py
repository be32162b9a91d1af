"""NPG / TRPO step(): trust-region behaviour, line search, fallback FVP, state, learning."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDictBase
from torch import nn
from torch.testing import assert_close

from rlx import NPGConfig
from rlx.algorithms.minibatches import passes
from rlx.algorithms.npg import NaturalStep, Samples, split_actor_critic
from rlx.core.distributions import Categorical, Distribution, Normal
from rlx.envs import CartPole, Pendulum

NPG_KEYS = [
    "losses/policy", "losses/vf", "losses/entropy", "losses/total", "monitors/kl_div", "monitors/lr",
    "npg/step_size", "npg/cg_residual", "npg/surrogate_gain", "npg/line_search_backtracks", "profiling/step_ms",
]


def _config(**kwargs) -> NPGConfig:
    base = dict(num_envs=16, horizon=16, device="cpu", seed=0, model_config={"hiddens": [16, 16]}, gamma=0.99)
    base.update(kwargs)
    return NPGConfig(**base)


def _actor(algo) -> list[torch.Tensor]:
    return [p.detach().clone() for p in algo.actor_params]


def _batch(algo):
    """Collect, compute GAE, and return the flat batch the natural step uses."""
    algo.collect()
    algo.compute_advantages()
    batch = algo.flat_batch()
    adv = batch["advantages"]
    obs = batch["obs"]
    return algo.policy.normalize(obs), obs, batch["actions"], batch["logp"], (adv - adv.mean()) / adv.std()


def _kl_after_step(algo, batch, scale: float = 1.0) -> float:
    before = _actor(algo)
    obs_normalized, obs, actions, logp, adv = batch
    stats = algo.natural_step(Samples(obs_normalized, obs, actions, logp, adv * scale))
    for p, b in zip(algo.actor_params, before):  # restore for the next measurement
        p.data.copy_(b)
    return stats.kl.item()


@pytest.mark.parametrize("env_cls", [CartPole, Pendulum])
def test_npg_step_returns_the_stats_contract(env_cls) -> None:
    algo = _config().build(env_cls)
    algo.collect()
    stats = algo.step()
    assert sorted(stats) == sorted(NPG_KEYS)
    assert all(isinstance(v, float) and math.isfinite(v) for v in stats.values())
    assert stats["npg/line_search_backtracks"] == 0.0


# A small model on a larger batch keeps the Fisher well conditioned; at small δ the
# quadratic model of the KL is accurate, so the step lands on δ (the ratio tends to 1 as
# δ shrinks: about 1.09, 1.03, 1.007 at δ = 1e-4, 1e-5, 1e-6 for CartPole).
UNDAMPED = dict(damping=0.0, fvp_subsample=1.0, cg_iters=10, num_envs=64, model_config={"hiddens": [8]})


@pytest.mark.parametrize("env_cls", [CartPole, Pendulum])
def test_kl_rule_step_lands_on_the_trust_region_when_undamped(env_cls) -> None:
    algo = _config(max_kl=1e-5, **UNDAMPED).build(env_cls)
    kl = _kl_after_step(algo, _batch(algo))
    assert kl == pytest.approx(1e-5, rel=0.05)


def test_kl_rule_step_stays_inside_the_trust_region_when_damped() -> None:
    algo = _config(damping=0.1, fvp_subsample=1.0, max_kl=1e-3).build(CartPole)
    kl = _kl_after_step(algo, _batch(algo))
    assert 0 < kl <= 1e-3


def test_kl_rule_ignores_the_advantage_scale_and_fixed_rule_does_not() -> None:
    # Scaling the advantages by c scales g and x = F⁻¹g by c and xᵀFx by c², so the KL
    # rule's step sqrt(2δ / xᵀFx)·x is c-free. With c a power of two every float op of the
    # gradient, CG and the step size commutes with the scaling exactly (rounding is
    # relative), so the steps, and their KLs, are equal to the bit on any CPU or GPU: an
    # approximate comparison at c = 5 measured the kernels' rounding instead (1.1e-4
    # here, 1.3e-3 on an AVX-512 Intel Xeon).
    algo = _config(max_kl=1e-5, **UNDAMPED).build(CartPole)
    batch = _batch(algo)
    kl = _kl_after_step(algo, batch, 1.0)
    assert [_kl_after_step(algo, batch, c) for c in (4.0, 0.25, 1024.0)] == [kl] * 3
    fixed = _config(step_size_rule="fixed", trust_region_size=0.01, damping=0.1, fvp_subsample=1.0).build(CartPole)
    batch = _batch(fixed)
    ratio = _kl_after_step(fixed, batch, 5.0) / _kl_after_step(fixed, batch, 1.0)
    assert ratio == pytest.approx(25.0, rel=0.1)


def test_failed_line_search_leaves_every_parameter_bit_identical() -> None:
    algo = _config(line_search=True, step_size_rule="fixed", trust_region_size=1e6, max_backtracks=3).build(CartPole)
    algo.collect()
    before = [p.detach().clone() for p in algo.actor_params]
    stats = algo.step()
    assert stats["npg/line_search_backtracks"] == -1.0
    assert stats["npg/step_size"] == 0.0 and stats["monitors/kl_div"] == 0.0
    assert all(torch.equal(p, b) for p, b in zip(algo.actor_params, before))


def test_accepted_line_search_step_is_within_the_trust_region_and_improves() -> None:
    algo = _config(line_search=True, step_size_rule="fixed", trust_region_size=5.0, fvp_subsample=1.0, max_kl=0.01).build(
        CartPole
    )
    accepted = 0
    for _ in range(4):
        algo.collect()
        stats = algo.step()
        if stats["npg/line_search_backtracks"] >= 0:
            accepted += 1
            assert stats["monitors/kl_div"] <= 0.01
            assert stats["npg/surrogate_gain"] > 0
    assert accepted > 0


def test_double_backprop_fallback_gives_the_same_step_as_the_analytic_fisher() -> None:
    class NoClosedForm(Categorical):
        fisher_product = Distribution.fisher_product

    # Two Fisher products of one matrix, compared in float64 with CG converged (κ <= 5 /
    # 0.1 = 50: the steps agree to about κ·n·2^-53 ≈ 1e-12 of themselves; ten float32
    # iterations would amplify the two products' rounding past any useful bound).
    results = []
    for dist_cls in (None, NoClosedForm):
        algo = _config(distribution_cls=dist_cls, fvp_subsample=0.5, cg_iters=40, cg_residual_tol=0.0).build(CartPole)
        algo.policy.double()
        algo.collect()
        stats = algo.step()
        results.append((_actor(algo), stats["monitors/kl_div"]))
    for a, b in zip(results[0][0], results[1][0]):
        assert_close(a, b, atol=1e-11, rtol=1e-9)
    assert results[0][1] == pytest.approx(results[1][1], rel=2**-22)  # float32 copies of float64 KLs


@pytest.mark.parametrize("fisher", ["gauss_newton", "kl_hessian"])
def test_micro_batched_pieces_equal_the_whole_pass_ones(fisher: str, monkeypatch) -> None:
    """``micro_batch_size = 40`` cuts the 256-row gradient (7 passes), the 52-row Fisher
    (2), the line search's 11 candidates (3 rows a pass) and the critic's minibatches into
    passes summed by share: each piece equals the whole pass's to float rounding.

    (Whole steps are compared on CartPole below: on Pendulum, ten float32 CG iterations on
    an ill-conditioned Fisher amplify the rounding to 1e-3 of the step, either way.)"""
    if fisher == "kl_hessian":
        monkeypatch.setattr(Normal, "fisher_product", Distribution.fisher_product)
    whole, cut = (_config(micro_batch_size=m, line_search=True).build(Pendulum) for m in (0, 40))
    cut.policy.load_state_dict(whole.policy.state_dict())
    assert len(passes(256, cut._micro)) == 7 and len(passes(256, whole._micro)) == 1
    torch.manual_seed(5)
    samples = Samples(*_batch(whole))
    theta0 = whole._flat_actor()
    g_whole, g_cut = whole._gradient(theta0, samples), cut._gradient(theta0, samples)
    assert_close(g_cut, g_whole, rtol=1e-5, atol=1e-7)
    old = whole._dist_params(theta0, samples.obs_normalized)
    assert_close(cut._dist_params(theta0, samples.obs_normalized), old, rtol=1e-6, atol=1e-7)
    torch.manual_seed(6)
    index = whole.members.subsample(256, whole.config.fvp_batch_size)
    sub, sub_old = samples.select(index), old[index]
    assert sub.advantages.shape[0] == 52
    v = torch.randn_like(theta0)
    fvp_whole, fvp_cut = whole._fisher_vector_product(theta0, sub, sub_old), cut._fisher_vector_product(theta0, sub, sub_old)
    assert_close(fvp_cut(v), fvp_whole(v), rtol=1e-5, atol=1e-6)
    # Shifted advantages (a surrogate of -0.5 at theta0): a pass's unweighted mean would
    # reject every candidate. Too long a step backtracks on the KL.
    shifted = sub._replace(advantages=sub.advantages - 0.5)
    for scale, backtracks in ((0.05, 0), (0.6, None)):
        picked = [algo._line_search(theta0, g_whole, torch.full((1, 1), scale), shifted, sub_old) for algo in (whole, cut)]
        assert_close(picked[1][0], picked[0][0], rtol=1e-6, atol=1e-7)
        assert picked[0][2].item() == picked[1][2].item() == (backtracks if backtracks is not None else picked[0][2].item())
        assert picked[0][2].item() >= (0 if backtracks == 0 else 1)
    returns = torch.randn(256, 1)
    for algo in (whole, cut):
        torch.manual_seed(7)  # the same critic shuffles
        algo.config.critic_minibatch_size = 100  # minibatches of 100, 100 and 56 rows: 3, 3 and 2 passes
        algo._fit_critic(samples.obs_normalized, returns)
    lr = whole.config.optimizer_kwargs["lr"]
    for a, b in zip(whole.critic_params, cut.critic_params):  # Adam: rounding moves a step by ~1e-5 lr
        assert_close(b, a, rtol=1e-5, atol=1e-3 * lr)


def test_micro_batched_npg_steps_like_the_whole_pass_one() -> None:
    """Two steps, in float64 with CG converged (κ <= 5 / 0.1 = 50; see
    test_the_compiled_natural_step_equals_the_eager_one): the natural step agrees to
    κ·n·u ≈ 50 · 256 · 2^-53 ≈ 1.4e-12 of itself, and the critic's Adam turns a gradient
    entry's rounding δ <= 256 · 2^-53 · 10 into at most lr·δ/eps ≈ 3e-5·lr a step."""
    whole, cut = (_config(micro_batch_size=m, cg_iters=40, cg_residual_tol=0.0).build(CartPole) for m in (0, 40))
    for algo in (whole, cut):
        algo.policy.double()
    lr = whole.config.optimizer_kwargs["lr"]
    for _ in range(2):
        stats = []
        for algo in (whole, cut):
            torch.manual_seed(5)
            algo.collect()
            stats.append(algo.step())
        for a, b in zip(whole.policy.model.parameters(), cut.policy.model.parameters()):
            assert_close(b, a, rtol=1e-9, atol=1e-3 * lr)
        for key in ("losses/policy", "monitors/kl_div", "npg/step_size"):  # float32 copies of float64 values
            assert stats[1][key] == pytest.approx(stats[0][key], rel=2**-22, abs=1e-12), key
        # the critic's loss: a float32 mean of 256 rows in passes or whole (n·2^-24 ≈ 1.5e-5 at most)
        assert stats[1]["losses/vf"] == pytest.approx(stats[0]["losses/vf"], rel=2e-5)


def _windy_reach():
    from rlx.envs import RslRlVecEnv
    from rlx.examples.windy_reach import WindyReach

    return RslRlVecEnv.factory(lambda n, d: WindyReach(n, d, seed=0))


@pytest.mark.slow
@pytest.mark.parametrize("env, extra", [
    ("cartpole", {}),
    ("cartpole", {"line_search": True, "num_seeds": 2, "member_hparams": {"max_kl": [0.01, 0.05]}, "fvp_subsample": 1.0}),
    # TRPO in passes of 100 rows (the gradient, the Fisher and the line search each cut).
    ("windy", {"line_search": True, "micro_batch_size": 100, "normalize_obs": True,
               "obs_groups": {"actor": ["policy"], "critic": ["policy", "critic"]}}),
], ids=["npg", "trpo_members", "trpo_obs_groups_in_passes"])
def test_the_compiled_natural_step_equals_the_eager_one(env: str, extra: dict) -> None:
    """``compile=True`` runs the natural step (gradient, CG, step size, line search, the
    parameter update) as one program, and the critic's loss compiled: on the same batch
    and subsample, the eager step's result to float rounding (inductor fuses and
    reorders the arithmetic). Observation groups (an asymmetric critic over WindyReach's
    privileged ``critic`` group, each group normalized) go through the program as
    TensorDicts.

    Compared in float64, with a damping that makes the CG iterations converge: five on
    CartPole (the residual ends near 1e-19; the program unrolls them, and five compile in
    15% less time than ten), ten on WindyReach, whose Gaussian policy's Fisher is larger
    (1.2e-12 after eight, 1.2e-16 after ten). Ten
    float32 iterations on a badly conditioned Fisher amplify reordered rounding ~100x an
    iteration once the search direction shrinks (see tests/members/test_member_hparams.py,
    NPG_FLOAT64), so two correct programs differed by 9e-4 of an element on an Intel Xeon
    and on an AMD EPYC. With λ = 30 above λmax(F) <= 5, κ(F + λI) <= 35 / 30 ≈ 1.2 and CG
    contracts the error ~100x an iteration (checked: the residual ends below 1e-12), so
    the programs agree to about κ·n·u ≈ 1.2 · 256 · 2^-53 ≈ 3e-14 of the step (1e-9
    relative below). The members' case uses the whole batch for the Fisher and the line
    search: on a 26-row subsample no candidate improved its rows' surrogate."""
    env_cls = _windy_reach() if env == "windy" else CartPole
    converging = dict(damping=30.0, cg_residual_tol=0.0, cg_iters=5 if env == "cartpole" else 10)
    eager, program = (_config(compile=flag, **converging, **extra).build(env_cls) for flag in (False, True))
    assert program.compiles and not eager.compiles
    for algo in (eager, program):
        algo.policy.double()
    program.policy.load_state_dict(eager.policy.state_dict())
    torch.manual_seed(5)
    samples = Samples(*_batch(eager))
    assert isinstance(samples.obs, TensorDictBase) == (env == "windy")
    steps = []
    for algo in (eager, program):
        torch.manual_seed(6)  # the same subsample
        steps.append(algo.natural_step(samples))
    for a, b in zip(eager.actor_params, program.actor_params):
        assert_close(b, a, rtol=1e-9, atol=1e-11)
    for name, a, b in zip(NaturalStep._fields, *steps):
        assert_close(b, a, rtol=1e-9, atol=1e-11, msg=name)
    assert steps[0].step_size.min().item() > 0 and steps[0].cg_residual.max().item() < 1e-12
    # Each critic minibatch (its passes' losses and backward, the clipped Adam step) runs
    # as one program.
    natural, critic = program.warm_programs
    assert natural.fallback is None and len(natural.programs) == 1 and not critic.programs
    assert program.critic_fallback is None and critic._func.__name__ == "critic_minibatch"
    returns = torch.randn(samples.advantages.shape[0], 1)
    losses = []
    for algo in (eager, program):
        torch.manual_seed(7)  # the same shuffles
        losses.append(algo._fit_critic(samples.obs_normalized, returns))
    # The critic's loss is a float32 mean (values.float(), as under AMP) of <= 256 rows: two
    # summation orders differ by at most 256 · 2^-24 ≈ 1.5e-5 of it (measured 9e-8). Its
    # gradient is elementwise before the float64 network, so the steps stay float64's.
    assert_close(losses[1], losses[0], rtol=2e-5, atol=0.0)
    assert critic.fallback is None and critic.programs  # the minibatches after the first called directly
    # Adam divides a gradient entry by sqrt(v) + 1e-8: an entry's rounding δ (<= n·u·Σ|terms|
    # <= 256 · 2^-53 · 10 ≈ 3e-13 here) moves its step by up to lr·δ/1e-8 ≈ 3e-5·lr.
    lr = eager.config.optimizer_kwargs["lr"]
    for a, b in zip(eager.critic_params, program.critic_params):
        assert_close(b, a, rtol=1e-9, atol=1e-4 * lr)


@pytest.mark.slow
@pytest.mark.parametrize("optimizer_cls", [torch.optim.Adam, torch.optim.SGD])
def test_the_compiled_critic_minibatch_follows_a_reload_and_a_new_lr(optimizer_cls) -> None:
    """With ``compile``, each critic minibatch is one program (its passes' losses and
    backward, the clipped Adam step); with an optimizer rlx does not step itself (SGD) the
    program is a pass's loss and ``critic_fallback`` says why. A program's calls after its
    first skip dynamo's guards, so it must read what changes between calls where it
    lives: parameters and optimizer state replaced by a load, an LR the schedule moved.
    Minibatches of 40 and 16 rows in passes of 24 (two layouts, each cut). Compared with
    eager on the same shuffles, in float64 as in
    test_the_compiled_natural_step_equals_the_eager_one (Adam turns a gradient entry's
    rounding into at most ~3e-5·lr a step); reading a stale state or LR would put them
    an Adam step (~lr) apart."""
    extra = dict(critic_minibatch_size=40, micro_batch_size=24, optim_critic_iters=2, max_grad_norm=0.5,
                 optimizer_cls=optimizer_cls)
    eager, program, other = (_config(compile=flag, **extra).build(Pendulum) for flag in (False, True, False))
    assert (program.critic_fallback is None) == (optimizer_cls is torch.optim.Adam)
    for algo in (eager, program, other):
        algo.policy.double()
    torch.manual_seed(5)
    samples = Samples(*_batch(eager))
    returns = torch.randn(samples.advantages.shape[0], 1)

    def fit(algo) -> torch.Tensor:
        torch.manual_seed(7)  # the same shuffles
        return algo._fit_critic(samples.obs_normalized, returns)

    lr = eager.config.optimizer_kwargs["lr"]

    def compare() -> None:
        losses = [fit(algo) for algo in (eager, program)]
        assert_close(losses[1], losses[0], rtol=2e-5, atol=0.0)  # float32 means of <= 40 rows
        for a, b in zip(eager.critic_params, program.critic_params):
            assert_close(b, a, rtol=1e-9, atol=1e-4 * lr)

    compare()
    for _ in range(3):  # another run's critic and optimizer state, three fits on
        fit(other)
    for algo in (eager, program):
        algo.load_state_dict(other.state_dict())
        algo._set_lr(3 * lr)
    compare()
    critic = program.warm_programs[1]
    assert critic.fallback is None and len(critic.programs) == 2  # 40 and 16 rows, called directly


@pytest.mark.parametrize("micro, fallback", [(16, "16 passes"), (32, None), (0, None)])
def test_a_critic_minibatch_of_many_passes_runs_as_a_compiled_pass_each(micro: int, fallback) -> None:
    """One program unrolls a minibatch's passes (its compile time grows with them): past
    MAX_CRITIC_PROGRAM_PASSES the critic's passes run as a compiled loss each, the reason
    named (256 rows a minibatch here: 16 passes of 16 rows, 8 of 32, or one)."""
    from rlx.algorithms.npg import MAX_CRITIC_PROGRAM_PASSES

    assert MAX_CRITIC_PROGRAM_PASSES == 8
    algo = _config(compile=True, micro_batch_size=micro).build(Pendulum)
    if fallback is None:
        assert algo.critic_fallback is None
    else:
        assert fallback in algo.critic_fallback and algo.warm_programs[1]._func.__name__ == "_critic_losses"


def test_natural_step_runs_in_float32_under_amp_and_the_critic_trains() -> None:
    algo = _config(enable_amp=True, critic_minibatch_size=64).build(Pendulum)
    algo.collect()
    critic_before = [p.detach().clone() for p in algo.critic_params]
    stats = algo.step()
    assert math.isfinite(stats["monitors/kl_div"]) and stats["npg/step_size"] > 0
    assert all(p.dtype == torch.float32 for p in algo.actor_params)
    assert not all(torch.equal(p, b) for p, b in zip(algo.critic_params, critic_before))


def test_npg_state_dict_resumes_exactly() -> None:
    config = _config(normalize_obs=True, line_search=True)
    algo = config.build(CartPole)
    for _ in range(2):
        algo.collect()
        algo.step()
    state = algo.state_dict()
    timing = lambda s: {k: v for k, v in s.items() if not k.startswith("profiling/")}
    expected = [(timing(algo.collect()), timing(algo.step())) for _ in range(2)]
    resumed = config.build(CartPole)
    resumed.load_state_dict(state)
    assert [(timing(resumed.collect()), timing(resumed.step())) for _ in range(2)] == expected


def test_shared_trunk_models_are_rejected() -> None:
    class SharedTrunk(nn.Module):
        def __init__(self, observation_spec, action_spec, /, *, num_params):
            super().__init__()
            self.trunk = nn.Linear(4, 8)
            self.pi = nn.Linear(8, sum(num_params))
            self.v = nn.Linear(8, 1)

        def forward(self, obs):
            h = torch.tanh(self.trunk(obs))
            return self.pi(h), self.v(h)

    with pytest.raises(ValueError, match=r"model: NPG needs separate actor and critic parameters, but \['trunk"):
        _config(model_cls=SharedTrunk, model_config=None).build(CartPole)


def test_actor_critic_split_by_autograd_for_models_without_the_methods() -> None:
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.pi, self.v = nn.Linear(4, 2), nn.Linear(4, 1)

        def forward(self, obs):
            return self.pi(obs), self.v(obs)

    model = TwoHeads()
    actor, critic = split_actor_critic(model, torch.randn(2, 4))
    assert {id(p) for p in actor} == {id(p) for p in model.pi.parameters()}
    assert {id(p) for p in critic} == {id(p) for p in model.v.parameters()}


@pytest.mark.parametrize(
    "field, value",
    [
        ("damping", -0.1),
        ("cg_iters", 0),
        ("max_kl", 0.0),
        ("max_kl", -1.0),
        ("fvp_subsample", 0.0),
        ("fvp_subsample", 1.5),
        ("backtrack_coeff", 0.0),
        ("backtrack_coeff", 1.0),
        ("step_size_rule", "adaptive"),
        ("optim_critic_iters", 0),
        ("critic_minibatch_size", 10_000),
        ("micro_batch_size", -1),
        ("compile", "yes"),
    ],
)
def test_bad_npg_fields_raise_naming_the_field(field: str, value) -> None:
    with pytest.raises(ValueError, match=rf"NPGConfig\.{field}"):
        _config(**{field: value})


@pytest.mark.slow
def test_npg_solves_cartpole_within_300k_env_steps(train_best) -> None:
    from rlx.examples.cartpole import SOLVED_LENGTH

    algo = NPGConfig(
        num_envs=32, horizon=64, device="cpu", seed=0, gamma=0.99, max_kl=0.02,
        model_config={"hiddens": [64, 64], "activation_fn": "tanh"}, optimizer_config={"lr": 3e-3},
    ).build(CartPole)
    best = train_best(algo, "episodes/length_mean", SOLVED_LENGTH, 300_000)
    assert best >= SOLVED_LENGTH, f"best {best:.1f} after {algo.env_steps} env steps"


@pytest.mark.slow
def test_compiled_trpo_in_passes_learns_pendulum(train_best) -> None:
    """The shipped Pendulum settings as TRPO with ``compile=True`` and passes of 1024 rows
    (the gradient in 4, the Fisher in 1, the line search in 9 of 93 rows, the critic 1 each):
    the compiled step and collect learn as the eager ones do (the shipped config reaches
    -250 in about 200k env steps)."""
    algo = NPGConfig(
        num_envs=64, horizon=64, max_kl=0.02, line_search=True, optimizer_config={"lr": 1e-3},
        critic_minibatch_size=1024, model_config={"hiddens": [64, 64], "activation_fn": "tanh"}, gamma=0.9,
        max_grad_norm=0.5, normalize_rewards=True, device="cpu", seed=0, compile=True, micro_batch_size=1024,
    ).build(Pendulum)
    best = train_best(algo, "episodes/return_mean", -300.0, 600_000)
    assert best >= -300.0, f"best {best:.1f} after {algo.env_steps} env steps"
