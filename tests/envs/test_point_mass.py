"""PointMass: per-env goals, reward and termination, truncation, state round trip."""

from __future__ import annotations

import torch

from rlx.env import check_step_output
from rlx.envs import PointMass


def test_goals_differ_per_env_and_are_redrawn_at_reset() -> None:
    torch.manual_seed(0)
    env = PointMass(64)
    env.reset()
    goals = env.state[:, 4:].clone()
    assert goals.abs().max() <= 0.8 and goals.std(0).min() > 0.2
    env.reset()
    assert not torch.equal(goals, env.state[:, 4:])


def test_reaching_the_goal_terminates_with_the_bonus() -> None:
    env = PointMass(2)
    env.reset()
    state = torch.tensor([[0.5, 0.5, 0.0, 0.0, 0.5, 0.52], [0.0, 0.0, 0.0, 0.0, 0.5, 0.5]])
    env.load_state_dict({"state": state, "steps": torch.zeros(2, dtype=torch.long)})
    out = env.step(torch.zeros(2, 2))
    check_step_output(out, env.observation_spec, 2)
    assert out["terminated"][:, 0].tolist() == [True, False]
    assert out["rewards"][0, 0] > 9.9 and torch.isclose(out["rewards"][1, 0], -torch.tensor(0.5).sqrt() * 1.0, atol=1e-5)
    assert torch.equal(out["final_obs"][1], out["obs"][1])


def test_walls_stop_the_mass_and_truncation_comes_at_200_steps() -> None:
    env = PointMass(1)
    env.reset()
    env.load_state_dict({"state": torch.tensor([[0.99, 0.0, 1.0, 0.0, 0.0, 0.0]]), "steps": torch.tensor([198])})
    out = env.step(torch.tensor([[1.0, 0.0]]))
    assert out["final_obs"][0, 0] == 1.0 and out["final_obs"][0, 2] == 0.0
    assert not out["truncated"].any()
    out = env.step(torch.tensor([[1.0, 0.0]]))
    assert out["truncated"].all() and env.steps.item() == 0


def test_pushing_towards_the_goal_raises_the_reward() -> None:
    torch.manual_seed(1)
    env = PointMass(256)
    env.reset()
    first = None
    for _ in range(30):
        obs = env._obs(env.state)
        out = env.step(obs[:, 4:].sign() * (obs[:, 4:].abs() > 0.02))  # push toward the goal
        first = out["rewards"].mean() if first is None else first
    assert out["rewards"].mean() > first + 0.3
