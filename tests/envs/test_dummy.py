"""rl8's dummy envs: rl8's semantics, an infinite horizon, and fresh output tensors."""

from __future__ import annotations

import pytest
import torch

from rlx.env import check_step_output
from rlx.envs import ContinuousDummyEnv, DiscreteDummyEnv


def test_discrete_dummy_moves_one_unit_and_rewards_minus_distance() -> None:
    torch.manual_seed(0)
    env = DiscreteDummyEnv(3)
    obs = env.reset()
    assert obs.shape == (3, 1) and obs.dtype == torch.float32
    out = env.step(torch.tensor([[1], [0], [1]]))
    check_step_output(out, env.observation_spec, 3)
    # No episode ends: only rl8's two keys come back.
    assert set(out.keys()) == {"obs", "rewards"}
    assert torch.equal(out["obs"], obs + torch.tensor([[1.0], [-1.0], [1.0]]))
    assert torch.equal(out["rewards"], -out["obs"].abs())


def test_continuous_dummy_moves_by_the_action() -> None:
    torch.manual_seed(0)
    env = ContinuousDummyEnv(2)
    obs = env.reset()
    out = env.step(torch.tensor([[0.5], [-2.0]]))
    check_step_output(out, env.observation_spec, 2)
    assert set(out.keys()) == {"obs", "rewards"}
    assert torch.equal(out["obs"], obs + torch.tensor([[0.5], [-2.0]]))
    assert torch.equal(out["rewards"], -out["obs"].abs())


def test_the_agent_can_walk_to_the_origin_and_earn_zero_reward() -> None:
    env = DiscreteDummyEnv(2)
    env.load_state_dict({"state": torch.tensor([[3.0], [-2.0]]), "bounds": torch.tensor(100.0)})
    # Sub-env 0 walks left three times; sub-env 1 right twice and then oversteps.
    rewards = [env.step(torch.tensor([[0], [1]]))["rewards"][:, 0].tolist() for _ in range(3)]
    assert rewards == [[-2.0, -1.0], [-1.0, 0.0], [0.0, -1.0]]


def test_reset_draws_within_bounds_that_default_to_100() -> None:
    torch.manual_seed(0)
    obs = DiscreteDummyEnv(2000).reset()
    assert obs.abs().max() <= 100.0 and obs.abs().max() > 95.0
    assert (obs < 0).any() and (obs > 0).any()


def test_reset_bounds_come_from_the_config_and_persist() -> None:
    torch.manual_seed(0)
    env = DiscreteDummyEnv(1000)
    assert env.reset(config={"bounds": 2.0}).abs().max() <= 2.0
    assert env.reset().abs().max() <= 2.0
    assert env.reset(config={}).abs().max() <= 2.0
    assert env.reset().abs().max() > 1.0


@pytest.mark.parametrize("env_cls", [DiscreteDummyEnv, ContinuousDummyEnv])
def test_returned_observations_are_not_mutated_by_later_steps(env_cls) -> None:
    torch.manual_seed(0)
    env = env_cls(2)
    obs = env.reset()
    obs_snapshot = obs.clone()
    actions = torch.ones(2, 1, dtype=env.action_spec.dtype)
    out = env.step(actions)
    out_snapshot = out.clone()
    env.step(actions)
    env.reset()
    assert torch.equal(obs, obs_snapshot)
    assert torch.equal(out["obs"], out_snapshot["obs"])
    assert torch.equal(out["rewards"], out_snapshot["rewards"])


@pytest.mark.parametrize("env_cls", [DiscreteDummyEnv, ContinuousDummyEnv])
def test_a_batch_of_one_works(env_cls) -> None:
    env = env_cls(1)
    env.reset()
    out = env.step(env.action_spec.zero().unsqueeze(0))
    check_step_output(out, env.observation_spec, 1)


def test_specs_match_rl8() -> None:
    discrete, continuous = DiscreteDummyEnv(1), ContinuousDummyEnv(1)
    assert discrete.observation_spec.shape == (1,) and continuous.observation_spec.shape == (1,)
    assert discrete.action_spec.shape == (1,) and discrete.action_spec.space.n == 2
    assert discrete.action_spec.dtype == torch.int64
    assert continuous.action_spec.shape == (1,) and continuous.action_spec.dtype == torch.float32
    assert DiscreteDummyEnv.graph_safe and ContinuousDummyEnv.graph_safe


@pytest.mark.parametrize("env_cls", [DiscreteDummyEnv, ContinuousDummyEnv])
def test_state_dict_round_trip_restores_position_and_bounds(env_cls) -> None:
    torch.manual_seed(0)
    env = env_cls(4)
    env.reset(config={"bounds": 5.0})
    actions = torch.ones(4, 1, dtype=env.action_spec.dtype)
    env.step(actions)
    state = env.state_dict()
    assert all(isinstance(value, torch.Tensor) for value in state.values())
    expected = env.step(actions)
    other = env_cls(4)
    other.load_state_dict(state)
    assert torch.equal(other.step(actions)["obs"], expected["obs"])
    assert other.reset().abs().max() <= 5.0


def test_same_seed_gives_the_same_resets() -> None:
    torch.manual_seed(3)
    first = ContinuousDummyEnv(8).reset()
    torch.manual_seed(3)
    assert torch.equal(ContinuousDummyEnv(8).reset(), first)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("env_cls", [DiscreteDummyEnv, ContinuousDummyEnv])
def test_dummy_steps_without_syncs_and_replays_as_a_cuda_graph(env_cls, envtest) -> None:
    env = env_cls(16, device="cuda")
    env.reset()
    actions = torch.ones(16, 1, dtype=env.action_spec.dtype, device="cuda")
    # One step without a host sync (after a warm-up), then one step captured.
    graph, static_out = envtest.capture_step(env, actions)
    before = env.state_dict()["state"]
    graph.replay()
    graph.replay()
    # Every replay moves the live state by one unit.
    assert torch.equal(static_out["obs"], before + 2.0)
    assert torch.equal(env.state_dict()["state"], before + 2.0)
