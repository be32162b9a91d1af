"""PointMass: dynamics by hand, per-env goals, reward, termination, truncation, state round trip."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from rlx.env import check_step_output
from rlx.envs import PointMass


def _reference_step(state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The documented dynamics, one sub-env at a time in float64, with Python branches.

    Returns:
        The observation reached (p, v, g - p), the reward and the termination flag.
    """
    obs, rewards, terminated = [], [], []
    for row, action in zip(state.double(), actions.double()):
        p, v, g = row[:2].clone(), row[2:4].clone(), row[4:]
        a = action.clamp(-1.0, 1.0)
        v = (0.9 * v + 0.1 * a).clamp(-1.0, 1.0)
        for axis in range(2):
            moved = p[axis] + 0.1 * v[axis]
            if moved > 1.0 or moved < -1.0:
                p[axis], v[axis] = moved.clamp(-1.0, 1.0), 0.0
            else:
                p[axis] = moved
        distance = torch.linalg.vector_norm(g - p)
        done = bool(distance < 0.05)
        obs.append(torch.cat([p, v, g - p]))
        rewards.append(-distance - 0.01 * a.square().sum() + (10.0 if done else 0.0))
        terminated.append(done)
    return torch.stack(obs), torch.stack(rewards), torch.tensor(terminated)


def test_point_mass_steps_as_documented(envtest) -> None:
    torch.manual_seed(0)
    n = 300
    random_states = torch.cat(
        [torch.rand(n, 2) * 2 - 1, torch.rand(n, 2) * 2 - 1, torch.rand(n, 2) * 1.6 - 0.8], dim=-1
    )
    # Edge cases: pushed into the right wall (only that component stops); into a corner;
    # reaching the goal; stopping just outside it; forces beyond the bounds; a speed
    # beyond the cap (only a loaded state can have one).
    edge_states = torch.tensor(
        [
            [0.99, 0.0, 0.5, 0.3, 0.0, 0.0],
            [-0.99, -0.99, -0.5, -0.5, 0.0, 0.0],
            [0.5, 0.5, 0.0, 0.0, 0.5, 0.52],
            [0.5, 0.5, 0.0, 0.0, 0.5, 0.554],
            [0.0, 0.0, 0.0, 0.0, 0.5, 0.5],
            [0.0, 0.0, 3.0, -3.0, 0.5, 0.5],
        ]
    )
    edge_actions = torch.tensor([[1.0, 0.0], [-1.0, -1.0], [0.0, 0.0], [0.0, 0.0], [5.0, -5.0], [0.0, 0.0]])
    states = torch.cat([random_states, edge_states])
    actions = torch.cat([(torch.rand(n, 2) * 2 - 1) * 1.5, edge_actions])
    B = states.shape[0]
    env = PointMass(B)
    envtest.load(env, states)
    out = env.step(actions)
    check_step_output(out, env.observation_spec, B)
    obs, rewards, terminated = _reference_step(states, actions)
    assert_close(out["final_obs"], obs.float(), atol=1e-6, rtol=1e-6)
    assert_close(out["rewards"][:, 0], rewards.float(), atol=1e-6, rtol=1e-6)
    assert torch.equal(out["terminated"][:, 0], terminated)
    e = n
    # The right wall stops the x component only; the corner stops both.
    assert out["final_obs"][e, 0] == 1.0 and out["final_obs"][e, 2] == 0.0
    assert_close(out["final_obs"][e, 3], torch.tensor(0.9 * 0.3))
    assert out["final_obs"][e + 1, :4].tolist() == [-1.0, -1.0, 0.0, 0.0]
    # 0.02 from the goal: reached, with the bonus; 0.054 away: not reached, -0.054.
    assert out["terminated"][e + 2 : e + 4, 0].tolist() == [True, False]
    assert_close(out["rewards"][e + 2 : e + 4, 0], torch.tensor([10.0 - 0.02, -0.054]))
    # The force is clipped to 1 for the physics and for its cost.
    assert_close(out["final_obs"][e + 4, 2:4], torch.tensor([0.1, -0.1]))
    assert_close(out["rewards"][e + 4, 0], -torch.tensor([0.01, -0.01]).sub(0.5).norm() - 0.02)
    # A loaded speed beyond the cap is clipped to 1 per axis.
    assert out["final_obs"][e + 5, 2:4].tolist() == [1.0, -1.0]


def test_goals_differ_per_env_and_are_redrawn_at_reset() -> None:
    torch.manual_seed(0)
    env = PointMass(256)
    obs = env.reset()
    goals = env.state_dict()["state"][:, 4:]
    assert_close(obs[:, 4:], goals - obs[:, :2])
    assert goals.abs().max() <= 0.8 and goals.abs().max() > 0.75
    assert goals.unique(dim=0).shape[0] == 256 and (goals.std(0) > 0.4).all()
    assert obs[:, :2].abs().max() <= 1.0 and (obs[:, 2:4] == 0).all()
    env.reset()
    assert (env.state_dict()["state"][:, 4:] != goals).all()


def test_ended_sub_envs_get_a_new_goal_and_the_others_keep_theirs(envtest) -> None:
    torch.manual_seed(0)
    # Sub-env 1 reaches its goal this step; sub-env 2 takes its 200th step.
    states = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0, 0.5, 0.5],
            [0.3, -0.3, 0.0, 0.0, 0.3, -0.31],
            [0.1, 0.1, 0.0, 0.0, -0.5, 0.5],
            [0.9, -0.9, 0.2, 0.2, 0.0, 0.0],
        ]
    )
    actions = torch.tensor([[1.0, 1.0], [0.0, 0.0], [-1.0, 1.0], [0.0, 0.0]])
    # final_obs is the observation this step reached, the same as one sub-env alone;
    # sub-envs 0 and 3 carry on.
    env, out = envtest.step_with_ends(PointMass, states, actions, steps=torch.tensor([3, 10, 199, 7]))
    assert out["terminated"][:, 0].tolist() == [False, True, False, False]
    assert out["truncated"][:, 0].tolist() == [False, False, True, False]
    assert out["rewards"][1, 0] > 9.9 and (out["rewards"][[0, 2, 3], 0] < 0).all()
    goals = env.state_dict()["state"][:, 4:]
    assert torch.equal(goals[[0, 3]], states[[0, 3], 4:])
    assert (goals[[1, 2]] != states[[1, 2], 4:]).all()
    assert (out["obs"][[1, 2], 2:4] == 0).all()


def test_truncation_happens_at_exactly_200_steps(envtest) -> None:
    torch.manual_seed(0)
    # Far from the goals, held still: only the time limit can end an episode. Sub-env 1
    # starts its episode 50 steps after sub-env 0.
    far = torch.tensor([[-1.0, -1.0, 0.0, 0.0, 0.8, 0.8], [1.0, 1.0, 0.0, 0.0, -0.8, -0.8]])
    env, out = envtest.run_to_time_limit(PointMass, far, lambda t: torch.zeros(2, 2), offset=50)
    assert env.steps.tolist() == [0, 150]
    assert_close(out["rewards"][:, 0], -torch.tensor([1.8, 1.8]).square().sum().sqrt().expand(2))
    assert out["final_obs"][0, :2].tolist() == [-1.0, -1.0]
    assert not torch.equal(out["obs"][0], out["final_obs"][0])


def test_terminated_and_truncated_are_never_both_set(envtest) -> None:
    envtest.assert_termination_wins_at_the_time_limit(
        PointMass, torch.tensor([[0.5, 0.5, 0.0, 0.0, 0.5, 0.5], [-1.0, -1.0, 0.0, 0.0, 0.5, 0.5]]), torch.zeros(2, 2)
    )


@pytest.mark.parametrize("num_envs", [1, 7])
def test_every_step_of_a_random_rollout_follows_the_protocol(num_envs: int, envtest) -> None:
    obs, rollout = envtest.protocol_rollout(PointMass(num_envs), 250, lambda: torch.rand(num_envs, 2) * 3 - 1.5)
    assert obs.shape == (num_envs, 6)
    for _, out in rollout:
        for key in ("obs", "final_obs"):
            assert out[key][:, :4].abs().max() <= 1.0
            assert ((out[key][:, :2] + out[key][:, 4:]).abs() <= 0.8 + 1e-6).all()  # the goal
        assert (out["rewards"] >= -2.6).all() and (out["rewards"] <= 10.0).all()


def test_a_proportional_derivative_controller_reaches_every_goal() -> None:
    torch.manual_seed(0)
    B = 512
    env = PointMass(B)
    obs = env.reset()
    reached = torch.zeros(B, dtype=torch.bool)
    returns = torch.zeros(B)
    for _ in range(60):
        out = env.step((10 * obs[:, 4:] - 3 * obs[:, 2:4]).clamp(-1, 1))
        returns += torch.where(reached, 0.0, out["rewards"][:, 0])
        reached |= out["terminated"][:, 0]
        obs = out["obs"]
    assert reached.all()
    # A random policy scores about -190 over its 200 steps.
    assert returns.mean() > -1.0


def test_point_mass_specs_describe_one_sub_env(envtest) -> None:
    env = envtest.assert_specs(PointMass, obs_shape=(6,), action_shape=(2,), action_dtype=torch.float32,
                                max_episode_steps=200)
    assert (env.action_spec.space.low == -1).all() and (env.action_spec.space.high == 1).all()


def test_the_state_holds_position_velocity_and_goal() -> None:
    assert PointMass(8).state_dict()["state"].shape == (8, 6)
