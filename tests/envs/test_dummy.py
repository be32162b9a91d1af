"""rl8's dummy envs: the same semantics as rl8, infinite horizon."""

from __future__ import annotations

import torch

from rlx.env import check_step_output
from rlx.envs import ContinuousDummyEnv, DiscreteDummyEnv


def test_discrete_dummy_moves_one_unit_and_rewards_minus_distance() -> None:
    env = DiscreteDummyEnv(3)
    obs = env.reset()
    assert obs.shape == (3, 1) and obs.abs().max() <= 100.0
    out = env.step(torch.tensor([[1], [0], [1]]))
    check_step_output(out, env.observation_spec, 3)
    assert set(out.keys()) == {"obs", "rewards"}
    assert torch.equal(out["obs"], obs + torch.tensor([[1.0], [-1.0], [1.0]]))
    assert torch.equal(out["rewards"], -out["obs"].abs())


def test_continuous_dummy_moves_by_the_action() -> None:
    env = ContinuousDummyEnv(2)
    obs = env.reset()
    out = env.step(torch.tensor([[0.5], [-2.0]]))
    assert torch.equal(out["obs"], obs + torch.tensor([[0.5], [-2.0]]))
    assert torch.equal(out["rewards"], -out["obs"].abs())


def test_reset_bounds_come_from_the_config_and_persist() -> None:
    env = DiscreteDummyEnv(1000)
    assert env.reset(config={"bounds": 2.0}).abs().max() <= 2.0
    assert env.reset().abs().max() <= 2.0
    assert env.reset().abs().max() > 1.0


def test_returned_observations_are_not_mutated_by_later_steps() -> None:
    env = ContinuousDummyEnv(2)
    obs = env.reset()
    first = env.step(torch.ones(2, 1))["obs"]
    snapshot = first.clone()
    env.step(torch.ones(2, 1))
    assert torch.equal(first, snapshot) and not torch.equal(obs, first)
