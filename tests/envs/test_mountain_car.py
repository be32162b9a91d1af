"""MountainCarContinuous: step-for-step parity with gymnasium, and episode-end semantics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rlx.envs import MountainCarContinuous


def _f32(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float32)


def _goal_threshold_states() -> torch.Tensor:
    """States whose step ends one float32 ulp below, at and above the goal position 0.45.

    At full speed pushed forward, the velocity stays clipped at 0.07 exactly, so the step
    adds exactly float32(0.07) to the position: the end position is known to the bit.
    """
    goal, speed = _f32(0.45), _f32(0.07)
    targets = [torch.nextafter(goal, _f32(0.0)), goal, torch.nextafter(goal, _f32(1.0))]
    start = goal - speed
    candidates = [start]
    for _ in range(4):  # a few float32 ulps either side of the guess
        lower, higher = torch.nextafter(candidates[0], _f32(0.0)), torch.nextafter(candidates[-1], _f32(1.0))
        candidates = [lower, *candidates, higher]
    rows = []
    for target in targets:
        hits = [c for c in candidates if c + speed == target]
        assert hits, "no start position lands on the target"
        rows.append([hits[0].item(), speed.item()])
    return torch.tensor(rows, dtype=torch.float32)


def test_mountain_car_matches_gymnasium_step_for_step(envtest) -> None:
    # Float32 state and action arrays, as gymnasium keeps its state and as its action
    # space is, so that it computes in float32 like the batched env.
    ref = envtest.gym("MountainCarContinuous-v0", dtype=torch.float32)
    torch.manual_seed(0)
    n = 400
    random_states = torch.stack([torch.rand(n) * 1.8 - 1.2, (torch.rand(n) * 2 - 1) * 0.07], dim=-1)
    random_actions = (torch.rand(n, 1) * 2 - 1) * 1.5  # beyond the bounds too
    # Edge cases, each with the force that matters for it.
    edge = [
        ([-1.19, -0.07], -1.0),  # runs into the left wall: clipped there and stopped
        ([-1.2, -0.05], 0.0),  # already at the wall, still moving left: stopped
        ([-1.2, 0.0], 1.0),  # at the wall, pulled and pushed right: keeps its velocity
        ([-0.5, 0.07], 1.0),  # at the speed limit pushed further: clipped at 0.07
        ([-0.5, -0.07], -1.0),  # and at -0.07
        ([0.59, 0.07], 1.0),  # past the right end: clipped at 0.6, goal reached, velocity kept
        ([0.5, -0.01], -1.0),  # past the goal moving back: not terminated
        ([0.449, 0.01], 0.0),  # crosses the goal moving forward
        ([-0.5, 0.0], 100.0),  # far beyond the force bound: clipped force, full cost
        ([-0.5, 0.0], -100.0),
    ]
    edge_states = torch.tensor([state for state, _ in edge])
    edge_actions = torch.tensor([[action] for _, action in edge])
    threshold_states = _goal_threshold_states()
    states = torch.cat([random_states, edge_states, threshold_states])
    actions = torch.cat([random_actions, edge_actions, torch.ones(3, 1)])
    _, out, expected = ref.step_batch(MountainCarContinuous, states, actions)
    final_obs = expected["obs"]
    assert_close(out["final_obs"], final_obs, atol=1e-5, rtol=1e-5)
    # The velocities are small (|v| <= 0.07): check them at the scale of float32 rounding too.
    assert_close(out["final_obs"][:, 1], final_obs[:, 1], atol=1e-8, rtol=1e-6)
    assert_close(out["rewards"][:, 0], expected["rewards"], atol=1e-5, rtol=1e-5)
    assert out["terminated"][:, 0].tolist() == expected["terminated"].tolist()

    e = n  # the edge cases, row by row
    assert out["final_obs"][e].tolist() == [_f32(-1.2).item(), 0.0]
    assert out["final_obs"][e + 1, 1] == 0.0 and out["final_obs"][e + 2, 1] > 0
    assert out["final_obs"][e + 3, 1] == _f32(0.07) and out["final_obs"][e + 4, 1] == -_f32(0.07)
    assert out["final_obs"][e + 5].tolist() == [_f32(0.6).item(), _f32(0.07).item()]
    assert out["terminated"][e : e + 8, 0].tolist() == [False] * 5 + [True, False, True]
    assert out["rewards"][e + 5, 0] == pytest.approx(100.0 - 0.1)
    assert out["rewards"][e + 8, 0] == pytest.approx(-1000.0)
    # At the goal threshold: one float32 ulp short does not end the episode, at and above
    # do (gymnasium compares its float32 position with 0.45 rounded to float32 too).
    goal = _f32(0.45)
    ends = [torch.nextafter(goal, _f32(0.0)), goal, torch.nextafter(goal, _f32(1.0))]
    assert out["final_obs"][-3:, 0].tolist() == [end.item() for end in ends]
    assert out["terminated"][-3:, 0].tolist() == [False, True, True]


def test_mountain_car_follows_a_long_gymnasium_rollout(envtest) -> None:
    ref = envtest.gym("MountainCarContinuous-v0", dtype=torch.float32)
    rng = np.random.default_rng(0)

    def rock(state: torch.Tensor) -> torch.Tensor:
        # Mostly push along the velocity (rocking the car up the hill), with noise.
        push = 1.0 if state[1] >= 0 else -1.0
        return torch.tensor([push * rng.uniform(0.5, 1.2) if rng.random() < 0.9 else rng.uniform(-1.2, 1.2)])

    # Both start from gymnasium's float32 state each step.
    assert ref.follow(MountainCarContinuous(1), 700, rock, reward_tol=1e-5) >= 3


def test_ended_sub_envs_auto_reset_and_keep_their_final_observation(envtest) -> None:
    torch.manual_seed(0)
    # Sub-env 1 reaches the goal this step; sub-env 2 takes its 999th step.
    states = torch.tensor([[-0.5, 0.01], [0.44, 0.05], [-0.5, 0.0], [0.2, -0.03]])
    actions = torch.tensor([[1.0], [0.5], [-0.2], [0.0]])
    # Sub-envs 0 and 3 carry on; each final_obs is what the sub-env reaches stepped alone.
    _, out = envtest.step_with_ends(MountainCarContinuous, states, actions, steps=torch.tensor([3, 100, 998, 7]))
    assert out["terminated"][:, 0].tolist() == [False, True, False, False]
    assert out["truncated"][:, 0].tolist() == [False, False, True, False]
    assert_close(out["rewards"][:, 0], torch.tensor([-0.1, 100.0 - 0.025, -0.004, 0.0]))
    assert out["final_obs"][1, 0] >= 0.45
    # Ended sub-envs start afresh at rest in the valley.
    fresh = out["obs"][[1, 2]]
    assert ((fresh[:, 0] >= -0.6) & (fresh[:, 0] <= -0.4)).all() and (fresh[:, 1] == 0).all()
    assert not torch.equal(fresh, out["final_obs"][[1, 2]])


def test_truncation_happens_at_exactly_999_steps(envtest) -> None:
    torch.manual_seed(0)
    # Back to rest in the valley before every step, so only the time limit can end it;
    # sub-env 1 starts its episode 100 steps after sub-env 0.
    valley = torch.tensor([[-0.5, 0.0], [-0.5, 0.0]])
    actions = torch.tensor([[0.3], [-0.3]])
    env, out = envtest.run_to_time_limit(MountainCarContinuous, valley, lambda t: actions, offset=100)
    assert env.steps.tolist() == [0, 899]
    envtest.assert_steps_as_alone(MountainCarContinuous, valley[:1], torch.tensor([[0.3]]), out)
    assert not torch.equal(out["obs"][0], out["final_obs"][0]) and out["obs"][0, 1] == 0


def test_terminated_and_truncated_are_never_both_set(envtest) -> None:
    envtest.assert_termination_wins_at_the_time_limit(
        MountainCarContinuous, torch.tensor([[0.44, 0.05], [-0.5, 0.0]]), torch.zeros(2, 1)
    )


@pytest.mark.parametrize("num_envs", [1, 6])
def test_every_step_of_a_random_rollout_follows_the_protocol(num_envs: int, envtest) -> None:
    env = MountainCarContinuous(num_envs)
    obs, rollout = envtest.protocol_rollout(env, 200, lambda: torch.rand(num_envs, 1) * 3 - 1.5)
    assert obs.shape == (num_envs, 2)
    for actions, out in rollout:
        for key in ("obs", "final_obs"):
            assert (out[key][:, 0] >= _f32(-1.2)).all() and (out[key][:, 0] <= _f32(0.6)).all()
            assert (out[key][:, 1].abs() <= _f32(0.07)).all()
        # Away from the goal, the reward is the action cost alone.
        assert_close(out["rewards"], -0.1 * actions.square())


def test_reset_puts_the_car_at_rest_in_the_valley() -> None:
    torch.manual_seed(0)
    env = MountainCarContinuous(2000)
    obs = env.reset()
    assert (obs[:, 0] >= -0.6).all() and (obs[:, 0] <= -0.4).all()
    assert obs[:, 0].min() < -0.59 and obs[:, 0].max() > -0.41 and (obs[:, 1] == 0).all()
    assert env.steps.eq(0).all()


def test_mountain_car_accepts_flat_actions(envtest) -> None:
    state = torch.tensor([[-0.5, 0.0], [0.0, 0.02], [-1.0, -0.03]])
    envtest.assert_trailing_action_dim_changes_nothing(MountainCarContinuous, torch.tensor([0.5, -1.0, 0.2]), state)


def test_mountain_car_specs_describe_one_sub_env(envtest) -> None:
    env = envtest.assert_specs(
        MountainCarContinuous, obs_shape=(2,), action_shape=(1,), action_dtype=torch.float32, max_episode_steps=999
    )
    assert env.action_spec.space.low.item() == -1.0 and env.action_spec.space.high.item() == 1.0
