"""Evaluating a policy on a separate env."""

from __future__ import annotations

import torch

from rlx import AlgorithmConfig
from rlx.collect.evaluation import evaluate_policy

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
    for episodes in (5, 10):
        stats = evaluate_policy(algo.policy, env, episodes=episodes, max_steps=200)
        assert stats["eval/episodes"] == episodes
        # Each length 1..5 counted equally often: counting whatever ended first would
        # have given dozens of 1-step episodes and a mean near 1.
        assert stats["eval/length_mean"] == 3.0
    # 7 of 5 sub-envs: sub-env i plays (7 + i) // 5 episodes, [1, 1, 1, 2, 2], the slow
    # ones included, whatever ends first.
    stats = evaluate_policy(algo.policy, env, episodes=7, max_steps=200)
    assert stats["eval/episodes"] == 7 and stats["eval/length_mean"] == (1 + 2 + 3 + 2 * 4 + 2 * 5) / 7
    # 2 of 5: the two longest-running sub-envs' first episodes, not the two that end first.
    stats = evaluate_policy(algo.policy, env, episodes=2, max_steps=200)
    assert stats["eval/episodes"] == 2 and stats["eval/length_mean"] == 4.5
