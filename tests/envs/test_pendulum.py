"""Pendulum: step-for-step parity with gymnasium Pendulum-v1, and truncation semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rlx.env import check_step_output
from rlx.envs import Pendulum


def test_pendulum_matches_gymnasium_step_for_step(envtest) -> None:
    ref = envtest.gym("Pendulum-v1")
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
    _, out, expected = ref.step_batch(Pendulum, states, torques)
    assert not expected["terminated"].any()
    assert_close(out["final_obs"], expected["obs"], atol=1e-5, rtol=1e-5)
    assert_close(out["rewards"], expected["rewards"].unsqueeze(-1), atol=1e-5, rtol=1e-5)
    assert not out["terminated"].any() and not out["truncated"].any()
    # The speed clip is exercised: pushed past the limit, the speed stays at it.
    assert out["final_obs"][n, 2] == 8.0 and out["final_obs"][n + 1, 2] == -8.0


def test_pendulum_follows_a_long_random_gymnasium_rollout(envtest) -> None:
    ref = envtest.gym("Pendulum-v1")
    rng = np.random.default_rng(0)

    def random_torque(state: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(rng.uniform(-2.5, 2.5, size=(1,)), dtype=torch.float32)

    # Both start from the same float32 state each step, so float32 rounding cannot
    # accumulate; no episode ever terminates.
    assert ref.follow(Pendulum(1), 400, random_torque, reward_tol=1e-5) == 0


def test_pendulum_truncates_at_exactly_200_steps_and_resets(envtest) -> None:
    torch.manual_seed(0)
    env = Pendulum(3)
    env.reset()
    for t in range(1, 201):
        if t == 51:
            # Sub-env 2 starts its episode 50 steps after the others.
            envtest.load(env, env.state_dict()["state"], steps=torch.tensor([50, 50, 0]))
        before = env.state_dict()
        torques = torch.rand(3, 1) * 4 - 2
        out = env.step(torques)
        check_step_output(out, env.observation_spec, 3)
        assert not out["terminated"].any()
        assert out["truncated"][:, 0].tolist() == [t == 200, t == 200, False], t
    assert env.steps.tolist() == [0, 0, 150]
    # final_obs is where the 200th step took the pendulum; obs is a fresh episode's start.
    same_state = Pendulum(3)
    envtest.load(same_state, before["state"])
    assert torch.equal(out["final_obs"], same_state.step(torques)["final_obs"])
    new_obs = out["obs"][:2]
    assert not torch.equal(new_obs, out["final_obs"][:2]) and (new_obs[:, 2].abs() <= 1.0).all()
    assert torch.equal(out["obs"][2], out["final_obs"][2])


def test_a_checkpointed_step_counter_of_199_truncates_on_the_next_step(envtest) -> None:
    env = Pendulum(2)
    envtest.load(env, torch.tensor([[0.5, 0.0], [0.5, 0.0]]), steps=torch.tensor([199, 3]))
    out = env.step(torch.zeros(2, 1))
    assert out["truncated"][:, 0].tolist() == [True, False]
    assert env.steps.tolist() == [0, 4]
    # Both sub-envs moved the same way; only sub-env 0 then started over.
    assert torch.equal(out["final_obs"][0], out["final_obs"][1])
    assert torch.equal(out["obs"][1], out["final_obs"][1])


@pytest.mark.parametrize("num_envs", [1, 5])
def test_every_step_of_a_rollout_follows_the_protocol(num_envs: int, envtest) -> None:
    obs, rollout = envtest.protocol_rollout(Pendulum(num_envs), 250, lambda: torch.rand(num_envs, 1) * 6 - 3, seed=2)
    assert obs.shape == (num_envs, 3)
    for t, (_, out) in enumerate(rollout, start=1):
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


def test_pendulum_specs_describe_one_sub_env(envtest) -> None:
    env = envtest.assert_specs(Pendulum, obs_shape=(3,), action_shape=(1,), action_dtype=torch.float32,
                                max_episode_steps=200)
    assert env.action_spec.space.low.item() == -2.0 and env.action_spec.space.high.item() == 2.0
