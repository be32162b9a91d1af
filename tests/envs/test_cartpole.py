"""CartPole: step-for-step parity with gymnasium CartPole-v1, and episode-end semantics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rlx.env import check_step_output
from rlx.envs import CartPole


def _set(env: CartPole, state: torch.Tensor, steps: int | torch.Tensor = 0) -> None:
    steps = torch.as_tensor(steps).expand(env.num_envs).clone()
    env.load_state_dict({"state": state.float(), "steps": steps})


def test_cartpole_matches_gymnasium_step_for_step() -> None:
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("CartPole-v1").unwrapped
    ref.reset(seed=0)
    torch.manual_seed(0)
    B = 256
    # Random states, most inside the termination box, some beyond it.
    states = torch.rand(B, 4) * torch.tensor([5.0, 4.0, 0.5, 4.0]) - torch.tensor([2.5, 2.0, 0.25, 2.0])
    actions = torch.randint(0, 2, (B,))
    env = CartPole(B)
    _set(env, states)
    out = env.step(actions)
    for i in range(B):
        ref.state = states[i].double().numpy()
        ref.steps_beyond_terminated = None
        obs, reward, terminated, truncated, _ = ref.step(int(actions[i]))
        assert_close(out["final_obs"][i], torch.as_tensor(obs, dtype=torch.float32), atol=1e-5, rtol=1e-5)
        assert out["rewards"][i, 0].item() == reward
        assert out["terminated"][i, 0].item() == terminated
        assert not truncated


def test_cartpole_follows_a_gymnasium_rollout() -> None:
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("CartPole-v1").unwrapped
    obs, _ = ref.reset(seed=3)
    env = CartPole(1)
    _set(env, torch.as_tensor(ref.state).unsqueeze(0))
    rng = np.random.default_rng(0)
    for _ in range(200):
        action = int(rng.integers(2))
        # Copy gymnasium's float64 state each step so float32 rounding cannot accumulate.
        _set(env, torch.as_tensor(ref.state).unsqueeze(0))
        obs, reward, terminated, _, _ = ref.step(action)
        out = env.step(torch.tensor([action]))
        assert_close(out["final_obs"][0], torch.as_tensor(obs, dtype=torch.float32), atol=1e-5, rtol=1e-5)
        assert out["terminated"][0, 0].item() == terminated
        if terminated:
            obs, _ = ref.reset()


def test_terminated_sub_envs_auto_reset_and_keep_their_final_observation() -> None:
    env = CartPole(3)
    env.reset()
    # Sub-env 1 is past the angle limit after one step; the others are near upright.
    state = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.25, 2.0], [0.01, 0.0, 0.0, 0.0]])
    _set(env, state)
    out = env.step(torch.tensor([0, 1, 1]))
    check_step_output(out, env.observation_spec, 3)
    assert out["terminated"][:, 0].tolist() == [False, True, False]
    assert not out["truncated"].any()
    assert out["final_obs"][1, 2] > CartPole.theta_threshold
    assert out["obs"][1].abs().max() <= 0.05  # fresh episode
    assert torch.equal(out["obs"][[0, 2]], out["final_obs"][[0, 2]])
    assert env.steps.tolist() == [1, 0, 1]


def test_truncation_happens_at_exactly_500_steps() -> None:
    env = CartPole(2)
    env.reset()
    _set(env, torch.zeros(2, 4), steps=torch.tensor([498, 10]))
    out = env.step(torch.tensor([0, 1]))
    assert not out["truncated"].any()
    out = env.step(torch.tensor([1, 0]))  # the 500th step of sub-env 0
    assert out["truncated"][:, 0].tolist() == [True, False]
    assert not out["terminated"].any()
    assert env.steps.tolist() == [0, 12]
    assert out["obs"][0].abs().max() <= 0.05


def test_terminated_and_truncated_are_never_both_set() -> None:
    env = CartPole(2)
    env.reset()
    # Both sub-envs fail on their 500th step: termination wins.
    _set(env, torch.tensor([[2.39, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]), steps=torch.tensor([499, 499]))
    out = env.step(torch.tensor([1, 1]))
    assert out["terminated"][:, 0].tolist() == [True, False]
    assert out["truncated"][:, 0].tolist() == [False, True]


def test_cartpole_accepts_actions_with_a_trailing_dim_and_batch_of_one() -> None:
    env = CartPole(1)
    env.reset()
    out = env.step(torch.tensor([[1]]))
    check_step_output(out, env.observation_spec, 1)


def test_state_dict_round_trip_reproduces_the_next_step() -> None:
    torch.manual_seed(0)
    env = CartPole(16)
    env.reset()
    for _ in range(30):
        env.step(torch.randint(0, 2, (16,)))
    state = env.state_dict()
    actions = torch.randint(0, 2, (16,))
    rng = torch.get_rng_state()
    expected = env.step(actions)
    other = CartPole(16)
    other.load_state_dict(state)
    torch.set_rng_state(rng)
    got = other.step(actions)
    for key in ("obs", "rewards", "terminated", "truncated", "final_obs"):
        assert torch.equal(got[key], expected[key]), key
