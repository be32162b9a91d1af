"""Policy: acting vs evaluating, observation normalization, action masks end to end."""

from __future__ import annotations

import torch
from torch.testing import assert_close
from torchrl.data import Categorical, Unbounded

from rlx import AlgorithmConfig
from rlx.policy import Policy


def test_act_and_evaluate_agree_on_logp_and_values() -> None:
    torch.manual_seed(0)
    policy = Policy(Unbounded(shape=(3,)), Categorical(4), model_config={"hiddens": [8]})
    obs = torch.randn(10, 3)
    act = policy.act(obs)
    out = policy.evaluate(obs, act.actions)
    assert act.logp.shape == out.logp.shape == out.entropy.shape == out.values.shape == (10, 1)
    assert_close(act.logp, out.logp.detach())
    assert_close(act.values, out.values.detach())
    assert not act.logp.requires_grad and out.logp.requires_grad


def test_obs_normalization_uses_running_statistics() -> None:
    policy = Policy(Unbounded(shape=(2,)), Categorical(2), normalize_obs=True)
    data = torch.randn(1000, 2, dtype=torch.float64) * torch.tensor([5.0, 0.1], dtype=torch.float64) + 3.0
    policy.update_obs_stats(data[:400].float())
    policy.update_obs_stats(data[400:].float())
    normalized = policy.normalize(data.float())
    expected = (data - data.mean(0)) / data.var(0, unbiased=False).sqrt()
    assert_close(normalized, expected.float(), atol=1e-4, rtol=1e-4)
    assert Policy(Unbounded(shape=(2,)), Categorical(2)).normalize(data) is data


def test_masked_actions_are_never_taken_and_ppo_learns_the_masked_task(masked_choice_env) -> None:
    algo = AlgorithmConfig(
        num_envs=64, horizon=8, device="cpu", seed=0, model_config={"hiddens": [32]},
        optimizer_config={"lr": 3e-3}, gamma=0.0, normalize_rewards=False, entropy_coeff=0.0,
    ).build(masked_choice_env)
    algo.env.invalid_taken = 0
    for _ in range(40):
        stats = algo.collect()
        algo.step()
    assert algo.env.invalid_taken == 0
    assert stats["rewards/mean"] > 0.9
    algo.collect(deterministic=True)
    assert algo.env.invalid_taken == 0
