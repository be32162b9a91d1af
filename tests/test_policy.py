"""Policy: acting vs evaluating, observation normalization, action masks end to end."""

from __future__ import annotations

import torch
from torch.testing import assert_close
from torchrl.data import Categorical, Unbounded

import pytest

from rlx import AlgorithmConfig, NPGConfig, RecurrentAlgorithmConfig
from rlx.policy import Policy
from rlx.collect.evaluation import evaluate_policy


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


@pytest.mark.parametrize("algorithm", ["ppo", "npg", "recurrent_ppo"])
def test_masked_actions_are_never_taken_and_every_algorithm_learns_the_masked_task(masked_choice_env, algorithm) -> None:
    common = dict(num_envs=64, horizon=8, device="cpu", seed=0, model_config={"hiddens": [32]}, gamma=0.0,
                  normalize_rewards=False)
    if algorithm == "ppo":
        algo = AlgorithmConfig(**common, optimizer_config={"lr": 3e-3}).build(masked_choice_env)
    elif algorithm == "recurrent_ppo":
        common["model_config"] = {"hidden_size": 16, "hiddens": [32]}
        algo = RecurrentAlgorithmConfig(**common, seq_len=4, optimizer_config={"lr": 3e-3}).build(masked_choice_env)
    else:
        algo = NPGConfig(**common, max_kl=0.05).build(masked_choice_env)
    algo.env.invalid_taken = 0
    for _ in range(40):
        stats = algo.collect()
        algo.step()
    assert algo.env.invalid_taken == 0
    # Random valid choices earn 0.5; the masked policy learns the better of the two.
    assert stats["rewards/mean"] > 0.9
    algo.collect(deterministic=True)
    eval_env = masked_choice_env(32)
    eval_env.invalid_taken = 0
    result = evaluate_policy(algo.policy, eval_env, episodes=64, max_steps=16)
    assert algo.env.invalid_taken == 0 and eval_env.invalid_taken == 0
    assert result["eval/return_mean"] > 0.9


def test_actor_passes_of_a_few_rows_give_the_actions_of_one_pass() -> None:
    policy = Policy(Unbounded(shape=(3,)), Categorical(4), model_config={"hiddens": [8]})
    obs = torch.randn(10, 3)
    whole = policy.sample_actions(obs, deterministic=True)
    policy.max_rows_per_pass = 3  # 3 + 3 + 3 + 1 rows
    parts = policy.sample_actions(obs, deterministic=True)
    assert torch.equal(whole.actions, parts.actions)
    assert_close(whole.logp, parts.logp)
    assert_close(whole.logp, policy.act(obs, deterministic=True).logp)
