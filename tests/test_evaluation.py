"""Evaluating a policy on a separate env."""

from __future__ import annotations

import torch

from rlx import AlgorithmConfig
from rlx.evaluation import evaluate_policy

SMALL = dict(num_envs=8, horizon=16, device="cpu", seed=0, model_config={"hiddens": [16]}, gamma=0.99)


def test_evaluation_averages_complete_episodes_and_leaves_training_rng_alone(scripted_env) -> None:
    algo = AlgorithmConfig(**{**SMALL, "model_config": {"hiddens": [8]}}).build(scripted_env)
    env = scripted_env(5)
    rng = torch.get_rng_state()
    stats = evaluate_policy(algo.policy, env, episodes=50, max_steps=200)
    assert torch.equal(torch.get_rng_state(), rng)
    assert stats["eval/episodes"] >= 50
    # ScriptedEnv: sub-env i ends every i % 5 + 1 steps.
    assert 1.0 <= stats["eval/length_mean"] <= 5.0


def test_every_sub_env_counts_its_first_episodes_only_so_short_ones_do_not_crowd_out_long_ones(scripted_env) -> None:
    algo = AlgorithmConfig(**SMALL).build(scripted_env)
    env = scripted_env(5)  # sub-env i's episodes last i + 1 steps
    for episodes, count in ((5, 5), (10, 10), (7, 10)):  # a quota of ceil(episodes / 5) per sub-env
        stats = evaluate_policy(algo.policy, env, episodes=episodes, max_steps=200)
        assert stats["eval/episodes"] == count
        # Each length 1..5 counted equally often: counting whatever ended first would
        # have given dozens of 1-step episodes and a mean near 1.
        assert stats["eval/length_mean"] == 3.0
