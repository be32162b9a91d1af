"""Acrobot: step-for-step parity with gymnasium Acrobot-v1, and episode-end semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rlx.envs import Acrobot

MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi


def _tip_height_after_one_step(ref, theta1: float) -> float:
    """gymnasium's tip height after one step, torque 0, from rest at (θ1, θ2 = 0)."""
    ref.step_from(torch.tensor([theta1, 0.0, 0.0, 0.0], dtype=torch.float64), 1)
    return float(-np.cos(ref.state[0]) - np.cos(ref.state[1] + ref.state[0]))


def _goal_boundary_theta1(ref) -> float:
    """The θ1 (from rest, θ2 = 0, torque 0) whose step ends exactly at the goal height.

    At rest with the links straight, the tip is above the goal line once θ1 > 2π/3;
    gravity swings the links back down during the step, so the start has to be a
    little higher. The height after the step grows with θ1 there: bisect gymnasium's.
    """
    lo, hi = 2 * math.pi / 3, 2.6
    assert _tip_height_after_one_step(ref, lo) < 1.0 < _tip_height_after_one_step(ref, hi)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _tip_height_after_one_step(ref, mid) <= 1.0 else (lo, mid)
    return hi


def test_acrobot_matches_gymnasium_step_for_step(envtest) -> None:
    ref = envtest.gym("Acrobot-v1")
    torch.manual_seed(0)
    n = 300
    # Random states: angles over more than one turn (wrapped after the step), speeds up
    # to twice their bounds (clipped after the step).
    random_states = torch.cat(
        [
            (torch.rand(n, 2, dtype=torch.float64) * 2 - 1) * 4.0,
            (torch.rand(n, 1, dtype=torch.float64) * 2 - 1) * 2 * MAX_VEL_1,
            (torch.rand(n, 1, dtype=torch.float64) * 2 - 1) * 2 * MAX_VEL_2,
        ],
        dim=-1,
    )
    # Edge cases: at rest hanging down and straight up; at both speed bounds (pushed
    # further); angles at ±π and crossing the wrap point; several turns out.
    edge_states = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],
            [math.pi, 0.0, 0.0, 0.0],
            [0.0, 0.0, MAX_VEL_1, MAX_VEL_2],
            [0.0, 0.0, -MAX_VEL_1, -MAX_VEL_2],
            [0.3, -0.2, MAX_VEL_1 - 1e-3, MAX_VEL_2 - 1e-3],
            [math.pi, math.pi, 0.0, 0.0],
            [-math.pi, -math.pi, 0.0, 0.0],
            [math.pi - 1e-3, -math.pi + 1e-3, 3.0, -3.0],
            [-math.pi + 1e-3, math.pi - 1e-3, -3.0, 3.0],
            [3 * math.pi + 0.5, -5 * math.pi, 1.0, 1.0],
        ],
        dtype=torch.float64,
    )
    states = torch.cat([random_states, edge_states]).repeat_interleave(3, dim=0)
    actions = torch.arange(3).repeat(states.shape[0] // 3)  # every state with every torque
    B = states.shape[0]
    env, out, expected = ref.step_batch(Acrobot, states, actions)
    assert_close(out["final_obs"], expected["obs"], atol=1e-5, rtol=1e-5)
    assert out["rewards"][:, 0].tolist() == expected["rewards"].tolist()
    assert out["terminated"][:, 0].tolist() == expected["terminated"].tolist()
    assert 0 < out["terminated"].sum() < B  # both outcomes are exercised
    # The float64 state itself, wrapped angles included (cos and sin would hide a turn),
    # where the sub-env carries on. Two float64 RK4 steps (torch's and numpy's sin and cos,
    # each within an ulp or two, other libms on other CPUs) differ by the rounding of
    # ~200 operations on values up to 30 (200 · 30 · 2^-53 ≈ 7e-13), grown over the 0.2 s
    # step by at most e^{L·dt} <= e^{20 · 0.2} ≈ 55: 4e-11 (measured 5e-13 here).
    running = ~out["terminated"][:, 0]
    assert_close(env.state[running], expected["state"][running], atol=1e-10, rtol=0)
    assert env.state[running, :2].abs().max() <= math.pi
    # Both speed bounds are reached and clipped exactly.
    assert out["final_obs"][:, 4].abs().max() == torch.tensor(MAX_VEL_1, dtype=torch.float32)
    assert out["final_obs"][:, 5].abs().max() == torch.tensor(MAX_VEL_2, dtype=torch.float32)


def test_acrobot_terminates_exactly_where_gymnasium_does_at_the_goal_height(envtest) -> None:
    ref = envtest.gym("Acrobot-v1")
    boundary = _goal_boundary_theta1(ref)
    # Starts 1e-10 rad to 1e-6 rad either side of the boundary: the step ends that
    # close to the goal line, far below any float32 resolution of the state.
    offsets = [-1e-6, -1e-8, -1e-10, 1e-10, 1e-8, 1e-6]
    states = torch.tensor([[boundary + d, 0.0, 0.0, 0.0] for d in offsets], dtype=torch.float64)
    env = Acrobot(len(offsets))
    envtest.load(env, states)
    out = env.step(torch.ones(len(offsets), dtype=torch.int64))
    expected = [ref.step_from(state, 1) for state in states]
    assert out["terminated"][:, 0].tolist() == [terminated for _, _, terminated in expected]
    assert out["terminated"][:, 0].tolist() == [False, False, False, True, True, True]
    # The terminating step pays 0, every other step -1.
    assert out["rewards"][:, 0].tolist() == [-1.0, -1.0, -1.0, 0.0, 0.0, 0.0]


def test_acrobot_follows_a_long_gymnasium_rollout(envtest) -> None:
    ref = envtest.gym("Acrobot-v1")
    rng = np.random.default_rng(0)

    def pump(state: torch.Tensor) -> torch.Tensor:
        # Mostly pump energy (torque against θ1') so that episodes end within the run.
        return torch.tensor((0 if state[2] > 0 else 2) if rng.random() < 0.8 else int(rng.integers(3)))

    # Both start from gymnasium's state each step, so chaos cannot amplify a rounding.
    assert ref.follow(Acrobot(1), 600, pump) >= 3


def test_ended_sub_envs_auto_reset_and_keep_their_final_observation(envtest) -> None:
    torch.manual_seed(0)
    # Sub-env 1 starts straight up and reaches the goal this step; sub-env 2 takes its
    # 500th step.
    states = torch.tensor(
        [[0.05, -0.02, 0.1, 0.0], [math.pi, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [-0.5, 0.5, 1.0, -1.0]],
        dtype=torch.float64,
    )
    actions = torch.tensor([0, 1, 2, 1])
    # final_obs of every sub-env is the observation this step reached, ended or not: the
    # same as one sub-env stepped alone from that state. Sub-envs 0 and 3 carry on.
    _, out = envtest.step_with_ends(Acrobot, states, actions, steps=torch.tensor([3, 10, 499, 7]))
    assert out["terminated"][:, 0].tolist() == [False, True, False, False]
    assert out["truncated"][:, 0].tolist() == [False, False, True, False]
    assert out["rewards"][:, 0].tolist() == [-1.0, 0.0, -1.0, -1.0]
    # Ended sub-envs start afresh, near hanging down at rest; the others carry on.
    fresh = out["obs"][[1, 2]]
    assert (fresh[:, [0, 2]] >= math.cos(0.1)).all() and fresh[:, [1, 3, 4, 5]].abs().max() <= 0.1
    assert not torch.equal(out["obs"][[1, 2]], out["final_obs"][[1, 2]])


def test_truncation_happens_at_exactly_500_steps(envtest) -> None:
    torch.manual_seed(0)
    # Back to hanging at rest before every step, so only the time limit can end it; sub-env
    # 1 starts its episode 100 steps after sub-env 0.
    hanging = torch.zeros(2, 4, dtype=torch.float64)
    env, out = envtest.run_to_time_limit(Acrobot, hanging, lambda t: torch.tensor([t % 3, 2 - t % 3]), offset=100)
    assert env.steps.tolist() == [0, 400]
    assert out["rewards"][:, 0].tolist() == [-1.0, -1.0]
    # final_obs is the true last observation; obs is the new episode's fresh draw.
    envtest.assert_steps_as_alone(Acrobot, hanging[:1], torch.tensor([500 % 3]), out)
    assert not torch.equal(out["obs"][0], out["final_obs"][0])


def test_terminated_and_truncated_are_never_both_set(envtest) -> None:
    # Both sub-envs take their 500th step; sub-env 0 also reaches the goal: termination
    # alone is reported, since nothing should bootstrap from a terminal state.
    envtest.assert_termination_wins_at_the_time_limit(
        Acrobot, torch.tensor([[math.pi, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]), torch.tensor([1, 1])
    )


@pytest.mark.parametrize("num_envs", [1, 6])
def test_every_step_of_a_random_rollout_follows_the_protocol(num_envs: int, envtest) -> None:
    obs, rollout = envtest.protocol_rollout(Acrobot(num_envs), 200, lambda: torch.randint(0, 3, (num_envs,)))
    assert obs.shape == (num_envs, 6)
    for _, out in rollout:
        for key in ("obs", "final_obs"):
            cos_sin = out[key][:, :4]
            assert_close(cos_sin[:, 0::2].square() + cos_sin[:, 1::2].square(), torch.ones(num_envs, 2))
            assert (out[key][:, 4].abs() <= MAX_VEL_1 + 1e-5).all()
            assert (out[key][:, 5].abs() <= MAX_VEL_2 + 1e-5).all()


def test_reset_draws_every_state_variable_uniformly_in_a_small_box() -> None:
    torch.manual_seed(0)
    env = Acrobot(4000)
    env.reset()
    state = env.state_dict()["state"]
    assert state.dtype == torch.float64
    assert state.abs().max() <= 0.1 and (state.abs().amax(0) > 0.099).all()
    # Drawn in float32, as gymnasium's reset.
    assert torch.equal(state, state.float().double())
    assert env.steps.eq(0).all()


def test_acrobot_accepts_actions_with_a_trailing_dim(envtest) -> None:
    envtest.assert_trailing_action_dim_changes_nothing(Acrobot, torch.tensor([0, 1, 2, 0, 2]))


def test_acrobot_specs_describe_one_sub_env(envtest) -> None:
    env = envtest.assert_specs(Acrobot, obs_shape=(6,), action_shape=(), action_dtype=torch.int64,
                                max_episode_steps=500)
    assert env.action_spec.space.n == 3


def test_the_state_is_kept_in_float64() -> None:
    assert Acrobot(2).state_dict()["state"].dtype == torch.float64
