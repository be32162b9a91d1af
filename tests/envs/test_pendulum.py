"""Pendulum: step-for-step parity with gymnasium Pendulum-v1, and truncation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rlx.env import check_step_output
from rlx.envs import Pendulum


def test_pendulum_matches_gymnasium_step_for_step() -> None:
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("Pendulum-v1").unwrapped
    ref.reset(seed=0)
    torch.manual_seed(0)
    B = 256
    # Angles over several turns, speeds up to the clip and beyond it, torques beyond the bounds.
    theta = (torch.rand(B) * 2 - 1) * 3 * math.pi
    theta_dot = (torch.rand(B) * 2 - 1) * 9.0
    actions = (torch.rand(B, 1) * 2 - 1) * 3.0
    env = Pendulum(B)
    env.load_state_dict({"state": torch.stack([theta, theta_dot], -1), "steps": torch.zeros(B, dtype=torch.long)})
    out = env.step(actions)
    check_step_output(out, env.observation_spec, B)
    for i in range(B):
        ref.state = np.array([theta[i].item(), theta_dot[i].item()])
        obs, reward, terminated, truncated, _ = ref.step(actions[i].double().numpy())
        assert_close(out["final_obs"][i], torch.as_tensor(obs, dtype=torch.float32), atol=1e-5, rtol=1e-5)
        assert out["rewards"][i, 0].item() == pytest.approx(float(reward), rel=1e-5, abs=1e-5)
        assert not terminated and not truncated


def test_pendulum_follows_a_gymnasium_rollout() -> None:
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("Pendulum-v1").unwrapped
    ref.reset(seed=5)
    env = Pendulum(1)
    rng = np.random.default_rng(0)
    for _ in range(200):
        env.load_state_dict({"state": torch.as_tensor(ref.state, dtype=torch.float32).view(1, 2), "steps": torch.zeros(1, dtype=torch.long)})
        u = rng.uniform(-2, 2, size=(1,))
        obs, reward, _, _, _ = ref.step(u)
        out = env.step(torch.as_tensor(u, dtype=torch.float32).view(1, 1))
        assert_close(out["final_obs"][0], torch.as_tensor(obs, dtype=torch.float32), atol=1e-5, rtol=1e-5)
        assert out["rewards"][0, 0].item() == pytest.approx(float(reward), rel=1e-5, abs=1e-5)


def test_pendulum_truncates_at_exactly_200_steps_and_resets() -> None:
    env = Pendulum(2)
    env.reset()
    env.load_state_dict({"state": torch.tensor([[0.5, 0.0], [0.5, 0.0]]), "steps": torch.tensor([199, 3])})
    out = env.step(torch.zeros(2, 1))
    assert out["truncated"][:, 0].tolist() == [True, False]
    assert not out["terminated"].any()
    assert env.steps.tolist() == [0, 4]
    # final_obs is the true last observation; obs is the first of the new episode.
    assert out["final_obs"][0, 2] == out["final_obs"][1, 2]
    assert torch.equal(out["obs"][1], out["final_obs"][1])
    assert out["obs"][0, 2].abs() <= 1.0


def test_pendulum_action_spec_is_bounded_torque() -> None:
    env = Pendulum(4)
    assert env.action_spec.shape == (1,)
    assert env.action_spec.space.low.item() == -2.0 and env.action_spec.space.high.item() == 2.0
    obs = env.reset()
    assert obs.shape == (4, 3)
    assert_close(obs[:, 0].square() + obs[:, 1].square(), torch.ones(4))
