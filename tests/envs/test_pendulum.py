"""Pendulum: step-for-step parity with gymnasium Pendulum-v1, and truncation semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rlx.env import check_step_output
from rlx.envs import Pendulum


def _load(env: Pendulum, state: torch.Tensor, steps: int | torch.Tensor = 0) -> None:
    """Put every sub-env in ``state`` ``[B, 2]`` (theta, theta_dot) after ``steps`` steps."""
    steps = torch.as_tensor(steps, dtype=torch.int64).expand(env.num_envs).clone()
    env.load_state_dict({"state": state.float(), "steps": steps})


def _gym_pendulum():
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("Pendulum-v1").unwrapped
    ref.reset(seed=0)
    return ref


def _gym_step(ref, state: torch.Tensor, torque: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Step gymnasium's env from ``state`` ``[2]`` with ``torque`` ``[1]`` (float32 values)."""
    ref.state = state.double().numpy()
    obs, reward, terminated, truncated, _ = ref.step(torque.double().numpy())
    assert not terminated and not truncated
    return torch.as_tensor(obs), float(reward)


def test_pendulum_matches_gymnasium_step_for_step() -> None:
    ref = _gym_pendulum()
    torch.manual_seed(0)
    n = 256
    # Angles over several turns, speeds up to the clip and beyond, torques beyond the bounds.
    random_states = torch.stack([(torch.rand(n) * 2 - 1) * 3 * math.pi, (torch.rand(n) * 2 - 1) * 9.0], -1)
    random_torques = (torch.rand(n, 1) * 2 - 1) * 3.0
    # Edge cases: at the speed limit pushed further (clipped) and back; the angle at and
    # around the wrap point ±π; the torque exactly at and far beyond its bounds.
    edge_states = torch.tensor(
        [
            [0.0, 8.0],
            [0.0, -8.0],
            [1.0, 7.99],
            [-1.0, -7.99],
            [0.5, 8.0],
            [math.pi, 0.0],
            [-math.pi, 0.0],
            [math.pi - 1e-3, 1.0],
            [-math.pi + 1e-3, -1.0],
            [3 * math.pi, 0.5],
            [0.0, 0.0],
            [0.1, 0.0],
        ]
    )
    edge_torques = torch.tensor([2.0, -2.0, 100.0, -100.0, -2.0, 0.0, 0.0, 1.0, -1.0, 2.5, 2.0, -2.0]).unsqueeze(-1)
    states = torch.cat([random_states, edge_states])
    torques = torch.cat([random_torques, edge_torques])
    B = states.shape[0]
    env = Pendulum(B)
    _load(env, states)
    out = env.step(torques)
    check_step_output(out, env.observation_spec, B)
    expected = [_gym_step(ref, states[i], torques[i]) for i in range(B)]
    assert_close(out["final_obs"], torch.stack([obs for obs, _ in expected]), atol=1e-5, rtol=1e-5)
    assert_close(out["rewards"], torch.tensor([[reward] for _, reward in expected]), atol=1e-5, rtol=1e-5)
    assert not out["terminated"].any() and not out["truncated"].any()
    # The speed clip is exercised: pushed past the limit, the speed stays at it.
    assert out["final_obs"][n, 2] == 8.0 and out["final_obs"][n + 1, 2] == -8.0


def test_pendulum_follows_a_long_random_gymnasium_rollout() -> None:
    ref = _gym_pendulum()
    rng = np.random.default_rng(0)
    env = Pendulum(1)
    for _ in range(400):
        # Start both from the same float32 state so float32 rounding cannot accumulate.
        state = torch.as_tensor(ref.state, dtype=torch.float32)
        _load(env, state.unsqueeze(0))
        torque = torch.as_tensor(rng.uniform(-2.5, 2.5, size=(1,)), dtype=torch.float32)
        obs, reward = _gym_step(ref, state, torque)
        out = env.step(torque.view(1, 1))
        assert_close(out["final_obs"][0], obs, atol=1e-5, rtol=1e-5)
        assert_close(out["rewards"][0, 0].item(), reward, atol=1e-5, rtol=1e-5)
        assert torch.equal(out["obs"], out["final_obs"])


def test_pendulum_truncates_at_exactly_200_steps_and_resets() -> None:
    torch.manual_seed(0)
    env = Pendulum(3)
    env.reset()
    for t in range(1, 201):
        if t == 51:
            # Sub-env 2 starts its episode 50 steps after the others.
            _load(env, env.state_dict()["state"], steps=torch.tensor([50, 50, 0]))
        before = env.state_dict()
        torques = torch.rand(3, 1) * 4 - 2
        out = env.step(torques)
        check_step_output(out, env.observation_spec, 3)
        assert not out["terminated"].any()
        assert out["truncated"][:, 0].tolist() == [t == 200, t == 200, False], t
    assert env.steps.tolist() == [0, 0, 150]
    # final_obs is where the 200th step took the pendulum; obs is a fresh episode's start.
    same_state = Pendulum(3)
    _load(same_state, before["state"])
    assert torch.equal(out["final_obs"], same_state.step(torques)["final_obs"])
    new_obs = out["obs"][:2]
    assert not torch.equal(new_obs, out["final_obs"][:2]) and (new_obs[:, 2].abs() <= 1.0).all()
    assert torch.equal(out["obs"][2], out["final_obs"][2])


def test_a_checkpointed_step_counter_of_199_truncates_on_the_next_step() -> None:
    env = Pendulum(2)
    _load(env, torch.tensor([[0.5, 0.0], [0.5, 0.0]]), steps=torch.tensor([199, 3]))
    out = env.step(torch.zeros(2, 1))
    assert out["truncated"][:, 0].tolist() == [True, False]
    assert env.steps.tolist() == [0, 4]
    # Both sub-envs moved the same way; only sub-env 0 then started over.
    assert torch.equal(out["final_obs"][0], out["final_obs"][1])
    assert torch.equal(out["obs"][1], out["final_obs"][1])


@pytest.mark.parametrize("num_envs", [1, 5])
def test_every_step_of_a_rollout_follows_the_protocol(num_envs: int) -> None:
    torch.manual_seed(2)
    env = Pendulum(num_envs)
    obs = env.reset()
    assert obs.shape == (num_envs, 3) and obs.dtype == torch.float32
    for t in range(1, 251):
        out = env.step(torch.rand(num_envs, 1) * 6 - 3)
        check_step_output(out, env.observation_spec, num_envs)
        assert out.batch_size == torch.Size([num_envs]) and out.device == env.device
        assert out["terminated"].dtype == torch.bool and not out["terminated"].any()
        assert out["truncated"].all() if t == 200 else not out["truncated"].any()
        # The reward is bounded: angle² ≤ π², speed clipped to 8, torque clipped to 2.
        assert (out["rewards"] <= 0).all() and (out["rewards"] >= -(math.pi**2 + 6.4 + 0.004) - 1e-4).all()
        assert (out["obs"][:, 2].abs() <= 8.0).all()


def test_reset_draws_the_angle_over_the_full_circle_and_a_small_speed() -> None:
    torch.manual_seed(0)
    env = Pendulum(2000)
    obs = env.reset()
    assert_close(obs[:, 0].square() + obs[:, 1].square(), torch.ones(2000))
    theta = torch.atan2(obs[:, 1], obs[:, 0])
    assert theta.min() < -3.0 and theta.max() > 3.0
    assert obs[:, 2].abs().max() <= 1.0 and obs[:, 2].abs().max() > 0.99
    assert env.steps.eq(0).all()


def test_pendulum_specs_describe_one_sub_env() -> None:
    env = Pendulum(4)
    assert env.observation_spec.shape == (3,) and env.observation_spec.dtype == torch.float32
    assert env.action_spec.shape == (1,)
    assert env.action_spec.space.low.item() == -2.0 and env.action_spec.space.high.item() == 2.0
    assert Pendulum.graph_safe and Pendulum.max_episode_steps == 200
