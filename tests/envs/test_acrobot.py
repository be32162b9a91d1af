"""Acrobot: step-for-step parity with gymnasium Acrobot-v1, termination, truncation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rlx.env import check_step_output
from rlx.envs import Acrobot


def _set(env: Acrobot, state, steps=0) -> None:
    state = torch.as_tensor(np.asarray(state), dtype=torch.float64).reshape(env.num_envs, 4)
    env.load_state_dict({"state": state, "steps": torch.as_tensor(steps).expand(env.num_envs).clone()})


def test_acrobot_matches_gymnasium_step_for_step() -> None:
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("Acrobot-v1").unwrapped
    ref.reset(seed=0)
    torch.manual_seed(0)
    B = 256
    # Angles over the whole circle and beyond; speeds up to and past the bounds.
    states = torch.cat(
        [(torch.rand(B, 2, dtype=torch.float64) * 2 - 1) * 4, (torch.rand(B, 2, dtype=torch.float64) * 2 - 1) * 30], -1
    )
    actions = torch.randint(0, 3, (B,))
    env = Acrobot(B)
    _set(env, states)
    out = env.step(actions)
    check_step_output(out, env.observation_spec, B)
    for i in range(B):
        ref.state = states[i].numpy().copy()
        obs, reward, terminated, truncated, _ = ref.step(int(actions[i]))
        assert_close(out["final_obs"][i], torch.as_tensor(obs, dtype=torch.float32), atol=1e-5, rtol=1e-5)
        assert out["rewards"][i, 0].item() == reward
        assert out["terminated"][i, 0].item() == terminated


def test_acrobot_follows_a_gymnasium_rollout() -> None:
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("Acrobot-v1").unwrapped
    ref.reset(seed=7)
    env = Acrobot(1)
    _set(env, ref.state)
    rng = np.random.default_rng(0)
    for _ in range(400):
        action = int(rng.integers(3))
        obs, reward, terminated, _, _ = ref.step(action)
        out = env.step(torch.tensor([action]))
        assert_close(out["final_obs"][0], torch.as_tensor(obs, dtype=torch.float32), atol=1e-5, rtol=1e-5)
        assert out["terminated"][0, 0].item() == terminated
        if terminated:
            ref.reset()
            _set(env, ref.state)


def test_acrobot_terminates_with_reward_zero_and_resets() -> None:
    env = Acrobot(2)
    env.reset()
    # Sub-env 0 hangs straight up (θ1 = π): the tip is 2 above the bar.
    _set(env, [[math.pi, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    out = env.step(torch.tensor([1, 1]))
    assert out["terminated"][:, 0].tolist() == [True, False]
    assert out["rewards"][:, 0].tolist() == [0.0, -1.0]
    assert env.state[0].abs().max() <= 0.1 and env.steps.tolist() == [0, 1]


def test_acrobot_truncates_at_exactly_500_steps() -> None:
    env = Acrobot(2)
    env.reset()
    _set(env, [[0.0] * 4, [0.0] * 4], steps=torch.tensor([499, 10]))
    out = env.step(torch.tensor([1, 1]))
    assert out["truncated"][:, 0].tolist() == [True, False] and not out["terminated"].any()
    assert env.steps.tolist() == [0, 11]


def test_state_dict_round_trip_reproduces_the_next_step() -> None:
    torch.manual_seed(0)
    env = Acrobot(8)
    env.reset()
    for _ in range(20):
        env.step(torch.randint(0, 3, (8,)))
    state, actions, rng = env.state_dict(), torch.randint(0, 3, (8,)), torch.get_rng_state()
    expected = env.step(actions)
    other = Acrobot(8)
    other.load_state_dict(state)
    torch.set_rng_state(rng)
    got = other.step(actions)
    assert all(torch.equal(got[k], expected[k]) for k in ("obs", "rewards", "terminated", "truncated", "final_obs"))
