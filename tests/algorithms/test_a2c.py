"""A2C: its loss by hand, its gradient against the analytic policy gradient, its config,
one step per collect on the shared engine, and learning."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close
from torchrl.data import Bounded, Categorical as CategoricalSpec

from rlx import A2CConfig, ConfigError
from rlx.algorithms.a2c import a2c_losses
from rlx.core.distributions import Categorical, Normal
from rlx.envs import CartPole
from rlx.config.run import RunConfig, load_run_config

ROOT = Path(__file__).resolve().parents[2]


def test_losses_match_a_hand_computed_case() -> None:
    col = lambda *x: torch.tensor(x, dtype=torch.float64).unsqueeze(1)  # noqa: E731  [N] -> [N, 1]
    logp, entropy = col(-0.5, -1.0), col(0.6, 0.8)
    values, returns, advantages = col(1.0, 2.0), col(1.5, 1.0), col(2.0, -1.0)
    old_logp = col(-0.5, -1.0)  # the rollout policy itself: KL 0
    losses = a2c_losses(logp, entropy, values, old_logp, advantages, returns, vf_coeff=0.5, entropy_coeff=0.01)
    # policy: -mean(logp A) = -((-0.5)(2) + (-1)(-1)) / 2 = -(-1 + 1) / 2 = 0
    # value: 0.5 mean((V - R)^2) = 0.5 (0.25 + 1) / 2 = 0.3125
    # entropy: -mean(H) = -0.7; total: 0 + 0.5 * 0.3125 + 0.01 * (-0.7) = 0.14925
    assert losses.policy.item() == pytest.approx(0.0)
    assert losses.vf.item() == pytest.approx(0.3125)
    assert losses.entropy.item() == pytest.approx(-0.7)
    assert losses.total.item() == pytest.approx(0.14925)
    assert losses.kl.item() == pytest.approx(0.0)


def _policy_gradient_of_surrogate(dist_cls, spec, params: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor):
    params = params.clone().requires_grad_(True)
    dist = dist_cls(params, spec)
    zeros = torch.zeros_like(advantages)
    losses = a2c_losses(dist.log_prob(actions), dist.entropy(), zeros, zeros, advantages, zeros,
                        vf_coeff=0.0, entropy_coeff=0.0)
    (grad,) = torch.autograd.grad(losses.total, params)
    return grad


def test_the_gradient_is_the_analytic_policy_gradient_for_a_categorical_policy() -> None:
    torch.manual_seed(0)
    N, n = 5, 3
    spec = CategoricalSpec(n)
    logits = torch.randn(N, n, dtype=torch.float64)
    actions = torch.randint(0, n, (N,))
    advantages = torch.randn(N, 1, dtype=torch.float64)
    grad = _policy_gradient_of_surrogate(Categorical, spec, logits, actions, advantages)
    # d log softmax(θ)_a / dθ = e_a - π, so the surrogate's gradient is -mean(A (e_a - π)).
    pi = torch.softmax(logits, dim=-1)
    expected = -(advantages * (torch.nn.functional.one_hot(actions, n).double() - pi)) / N
    assert_close(grad, expected)


def test_the_gradient_is_the_analytic_policy_gradient_for_a_gaussian_policy() -> None:
    torch.manual_seed(1)
    N, A = 6, 2
    spec = Bounded(-1.0, 1.0, shape=(A,), dtype=torch.float64)
    mean, log_std = torch.randn(N, A, dtype=torch.float64), 0.3 * torch.randn(N, A, dtype=torch.float64)
    actions = mean + log_std.exp() * torch.randn(N, A, dtype=torch.float64)  # unclipped samples, as buffered
    advantages = torch.randn(N, 1, dtype=torch.float64)
    grad = _policy_gradient_of_surrogate(Normal, spec, torch.cat([mean, log_std], -1), actions, advantages)
    # d log N(a; μ, σ) / dμ = (a - μ) / σ², and / d log σ = (a - μ)² / σ² - 1.
    sigma2 = (2 * log_std).exp()
    d_mean = (actions - mean) / sigma2
    d_log_std = (actions - mean).square() / sigma2 - 1.0
    expected = -(advantages * torch.cat([d_mean, d_log_std], -1)) / N
    assert_close(grad, expected)


@pytest.mark.parametrize("field", ["clip_param", "num_sgd_iters", "target_kl_div", "kl_adaptive_lr", "accumulate_grads"])
def test_ppo_fields_are_refused_by_name(field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^A2CConfig\.{field}: a PPO field; A2C takes the plain policy gradient"):
        A2CConfig(**{field: 1})
    data = {"env": "rlx.envs:CartPole", "algorithm": "a2c", "config": {field: 1}, "trainer": {"max_iterations": 1}}
    with pytest.raises(ConfigError, match=rf"run\.config\.{field}: a PPO field"):
        RunConfig.from_dict(data, where="run")


def test_one_gradient_step_per_collect_on_the_shared_engine() -> None:
    whole = A2CConfig(num_envs=16, horizon=8, device="cpu", seed=0).build(CartPole)
    split = A2CConfig(num_envs=16, horizon=8, device="cpu", seed=0, sgd_minibatch_size=32).build(CartPole)
    for algo, steps in ((whole, 1), (split, 4)):  # the whole rollout, or one epoch of 4 minibatches
        algo.collect()
        stats = algo.step()
        assert stats["monitors/sgd_epochs"] == 1.0 and "monitors/clip_fraction" not in stats
        assert all(float(s["step"]) == steps for s in algo.optimizer.state.values())
        assert stats["coefficients/vf"] == 0.5 and stats["coefficients/entropy"] == 0.01  # A2C's defaults


def test_rmsprop_as_in_the_original() -> None:
    algo = A2CConfig(num_envs=16, horizon=5, device="cpu", seed=0, optimizer_cls=torch.optim.RMSprop,
                     optimizer_config={"lr": 7e-4, "alpha": 0.99, "eps": 1e-5}).build(CartPole)
    algo.collect()
    assert math.isfinite(algo.step()["losses/total"])
    assert isinstance(algo.optimizer, torch.optim.RMSprop)


@pytest.mark.slow
@pytest.mark.parametrize("name, key, goal", [("cartpole_a2c", "episodes/length_mean", 475.0),
                                             ("pendulum_a2c", "episodes/return_mean", -250.0)])
def test_shipped_configs_solve_within_their_budget(name: str, key: str, goal: float, train_best) -> None:
    run = load_run_config(ROOT / "configs" / f"{name}.yaml")
    algo = run.config.build(run.env_cls)
    best = train_best(algo, key, goal, run.trainer.max_env_steps)
    assert best >= goal, (name, best, algo.env_steps)


def test_recurrent_a2c_trains_on_whole_sequences_with_the_recurrent_engine() -> None:
    from rlx import RecurrentA2CConfig
    from rlx.algorithms.minibatches import Sequences
    from rlx.envs import CartPoleNoVelocity
    from rlx.policy import RecurrentPolicy

    algo = RecurrentA2CConfig(num_envs=8, horizon=16, seq_len=8, burn_in=4, sgd_minibatch_size=32, device="cpu",
                              seed=0).build(CartPoleNoVelocity)
    assert isinstance(algo.policy, RecurrentPolicy) and isinstance(algo.minibatches, Sequences)
    algo.collect()
    stats = algo.step()
    # 8 envs x 2 sequences of 8 steps = 16 sequences, 4 per minibatch: 4 optimizer steps in one epoch.
    assert all(float(s["step"]) == 4 for s in algo.optimizer.state.values())
    assert stats["monitors/sgd_epochs"] == 1.0 and all(v == v for v in stats.values())
    with pytest.raises(ConfigError, match=r"RecurrentA2CConfig\.clip_param: a PPO field"):
        RecurrentA2CConfig(clip_param=0.2)
