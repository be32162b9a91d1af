"""MountainCarContinuous: step-for-step parity with gymnasium, goal, wall and truncation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rlx.env import check_step_output
from rlx.envs import MountainCarContinuous


def _set(env, state, steps=0) -> None:
    env.load_state_dict(
        {"state": torch.as_tensor(np.asarray(state), dtype=torch.float32).reshape(env.num_envs, 2),
         "steps": torch.as_tensor(steps).expand(env.num_envs).clone()}
    )


def test_mountain_car_matches_gymnasium_step_for_step() -> None:
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("MountainCarContinuous-v0").unwrapped
    ref.reset(seed=0)
    torch.manual_seed(0)
    B = 256
    states = torch.stack([torch.rand(B) * 1.8 - 1.2, (torch.rand(B) * 2 - 1) * 0.07], -1)
    # Edge cases: at the left wall moving left, at the goal, at the speed limit.
    states[:4] = torch.tensor([[-1.2, -0.05], [0.449, 0.01], [0.44, 0.07], [-1.19, -0.07]])
    actions = (torch.rand(B, 1) * 2 - 1) * 1.5  # beyond the bounds too
    env = MountainCarContinuous(B)
    _set(env, states)
    out = env.step(actions)
    check_step_output(out, env.observation_spec, B)
    for i in range(B):
        ref.state = states[i].numpy().astype(np.float32)
        obs, reward, terminated, _, _ = ref.step(actions[i].double().numpy())
        assert_close(out["final_obs"][i], torch.as_tensor(obs, dtype=torch.float32), atol=1e-5, rtol=1e-5)
        assert out["rewards"][i, 0].item() == pytest.approx(reward, rel=1e-5, abs=1e-5)
        assert out["terminated"][i, 0].item() == terminated
    assert out["terminated"][1, 0] and out["rewards"][1, 0] > 99


def test_mountain_car_follows_a_gymnasium_rollout() -> None:
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("MountainCarContinuous-v0").unwrapped
    ref.reset(seed=3)
    env = MountainCarContinuous(1)
    rng = np.random.default_rng(0)
    for _ in range(400):
        _set(env, ref.state)
        a = rng.uniform(-1, 1, size=(1,))
        obs, reward, terminated, _, _ = ref.step(a)
        out = env.step(torch.as_tensor(a, dtype=torch.float32).view(1, 1))
        assert_close(out["final_obs"][0], torch.as_tensor(obs, dtype=torch.float32), atol=1e-5, rtol=1e-5)
        assert out["rewards"][0, 0].item() == pytest.approx(reward, rel=1e-5, abs=1e-5)


def test_mountain_car_truncates_at_999_steps_and_resets() -> None:
    env = MountainCarContinuous(2)
    env.reset()
    _set(env, [[-0.5, 0.0], [-0.5, 0.0]], steps=torch.tensor([998, 5]))
    out = env.step(torch.zeros(2, 1))
    assert out["truncated"][:, 0].tolist() == [True, False] and not out["terminated"].any()
    assert -0.6 <= out["obs"][0, 0] <= -0.4 and out["obs"][0, 1] == 0
    assert env.steps.tolist() == [0, 6]
