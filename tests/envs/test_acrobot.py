"""Acrobot: step-for-step parity with gymnasium Acrobot-v1, and episode-end semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rlx.env import check_step_output
from rlx.envs import Acrobot

MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi


def _load(env: Acrobot, state: torch.Tensor, steps: int | torch.Tensor = 0) -> None:
    """Put every sub-env in ``state`` ``[B, 4]`` (θ1, θ2, θ1', θ2') after ``steps`` steps."""
    steps = torch.as_tensor(steps, dtype=torch.int64).expand(env.num_envs).clone()
    env.load_state_dict({"state": torch.as_tensor(state, dtype=torch.float64), "steps": steps})


def _gym_acrobot():
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("Acrobot-v1").unwrapped
    ref.reset(seed=0)
    return ref


def _gym_step(ref, state: torch.Tensor, action: int) -> tuple[torch.Tensor, float, bool]:
    """Step gymnasium's env from the float64 ``state`` ``[4]``; its next state is ``ref.state``."""
    ref.state = state.double().numpy().copy()
    obs, reward, terminated, truncated, _ = ref.step(action)
    assert not truncated  # the unwrapped env never truncates; the time limit is a wrapper
    return torch.as_tensor(obs), float(reward), bool(terminated)


def _tip_height_after_one_step(ref, theta1: float) -> float:
    """gymnasium's tip height after one step, torque 0, from rest at (θ1, θ2 = 0)."""
    _gym_step(ref, torch.tensor([theta1, 0.0, 0.0, 0.0], dtype=torch.float64), 1)
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


def test_acrobot_matches_gymnasium_step_for_step() -> None:
    ref = _gym_acrobot()
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
    env = Acrobot(B)
    _load(env, states)
    out = env.step(actions)
    check_step_output(out, env.observation_spec, B)
    expected, next_states = [], []
    for i in range(B):
        expected.append(_gym_step(ref, states[i], int(actions[i])))
        next_states.append(torch.as_tensor(ref.state))
    assert_close(out["final_obs"], torch.stack([obs for obs, _, _ in expected]), atol=1e-5, rtol=1e-5)
    assert out["rewards"][:, 0].tolist() == [reward for _, reward, _ in expected]
    assert out["terminated"][:, 0].tolist() == [terminated for _, _, terminated in expected]
    assert 0 < out["terminated"].sum() < B  # both outcomes are exercised
    # The float64 state itself, wrapped angles included (cos and sin would hide a turn),
    # where the sub-env carries on.
    running = ~out["terminated"][:, 0]
    assert_close(env.state[running], torch.stack(next_states)[running], atol=1e-12, rtol=0)
    assert env.state[running, :2].abs().max() <= math.pi
    # Both speed bounds are reached and clipped exactly.
    assert out["final_obs"][:, 4].abs().max() == torch.tensor(MAX_VEL_1, dtype=torch.float32)
    assert out["final_obs"][:, 5].abs().max() == torch.tensor(MAX_VEL_2, dtype=torch.float32)


def test_acrobot_terminates_exactly_where_gymnasium_does_at_the_goal_height() -> None:
    ref = _gym_acrobot()
    boundary = _goal_boundary_theta1(ref)
    # Starts 1e-10 rad to 1e-6 rad either side of the boundary: the step ends that
    # close to the goal line, far below any float32 resolution of the state.
    offsets = [-1e-6, -1e-8, -1e-10, 1e-10, 1e-8, 1e-6]
    states = torch.tensor([[boundary + d, 0.0, 0.0, 0.0] for d in offsets], dtype=torch.float64)
    env = Acrobot(len(offsets))
    _load(env, states)
    out = env.step(torch.ones(len(offsets), dtype=torch.int64))
    expected = [_gym_step(ref, state, 1) for state in states]
    assert out["terminated"][:, 0].tolist() == [terminated for _, _, terminated in expected]
    assert out["terminated"][:, 0].tolist() == [False, False, False, True, True, True]
    # The terminating step pays 0, every other step -1.
    assert out["rewards"][:, 0].tolist() == [-1.0, -1.0, -1.0, 0.0, 0.0, 0.0]


def test_acrobot_follows_a_long_gymnasium_rollout() -> None:
    ref = _gym_acrobot()
    rng = np.random.default_rng(0)
    env = Acrobot(1)
    episodes = 0
    for _ in range(600):
        # Start both from gymnasium's state each step, so chaos cannot amplify a rounding.
        state = torch.as_tensor(ref.state, dtype=torch.float64)
        _load(env, state.unsqueeze(0))
        # Mostly pump energy (torque against θ1') so that episodes end within the run.
        action = (0 if state[2] > 0 else 2) if rng.random() < 0.8 else int(rng.integers(3))
        obs, reward, terminated = _gym_step(ref, state, action)
        out = env.step(torch.tensor([action]))
        assert_close(out["final_obs"][0], obs, atol=1e-5, rtol=1e-5)
        assert out["rewards"][0, 0].item() == reward
        assert out["terminated"][0, 0].item() == terminated
        if terminated:
            episodes += 1
            ref.reset()
        else:
            assert torch.equal(out["obs"], out["final_obs"])
    assert episodes >= 3


def test_ended_sub_envs_auto_reset_and_keep_their_final_observation() -> None:
    torch.manual_seed(0)
    # Sub-env 1 starts straight up and reaches the goal this step; sub-env 2 takes its
    # 500th step.
    states = torch.tensor(
        [[0.05, -0.02, 0.1, 0.0], [math.pi, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [-0.5, 0.5, 1.0, -1.0]],
        dtype=torch.float64,
    )
    actions = torch.tensor([0, 1, 2, 1])
    env = Acrobot(4)
    _load(env, states, steps=torch.tensor([3, 10, 499, 7]))
    out = env.step(actions)
    check_step_output(out, env.observation_spec, 4)
    assert out["terminated"][:, 0].tolist() == [False, True, False, False]
    assert out["truncated"][:, 0].tolist() == [False, False, True, False]
    assert out["rewards"][:, 0].tolist() == [-1.0, 0.0, -1.0, -1.0]
    # final_obs of every sub-env is the observation this step reached, ended or not: the
    # same as one sub-env stepped alone from that state.
    for i in range(4):
        alone = Acrobot(1)
        _load(alone, states[i : i + 1])
        assert torch.equal(out["final_obs"][i], alone.step(actions[i : i + 1])["final_obs"][0])
    # Ended sub-envs start afresh, near hanging down at rest; the others carry on.
    fresh = out["obs"][[1, 2]]
    assert (fresh[:, [0, 2]] >= math.cos(0.1)).all() and fresh[:, [1, 3, 4, 5]].abs().max() <= 0.1
    assert not torch.equal(out["obs"][[1, 2]], out["final_obs"][[1, 2]])
    assert torch.equal(out["obs"][[0, 3]], out["final_obs"][[0, 3]])
    assert env.steps.tolist() == [4, 0, 0, 8]


def test_truncation_happens_at_exactly_500_steps() -> None:
    torch.manual_seed(0)
    env = Acrobot(2)
    env.reset()
    hanging = torch.zeros(2, 4, dtype=torch.float64)
    for t in range(1, 501):
        steps = env.state_dict()["steps"]
        if t == 101:
            steps[1] = 0  # sub-env 1 starts its episode 100 steps after sub-env 0
        # Back to hanging at rest before every step, so only the time limit can end it.
        _load(env, hanging, steps=steps)
        out = env.step(torch.tensor([t % 3, 2 - t % 3]))
        check_step_output(out, env.observation_spec, 2)
        assert not out["terminated"].any()
        assert out["truncated"][:, 0].tolist() == [t == 500, False], t
    assert env.steps.tolist() == [0, 400]
    assert out["rewards"][:, 0].tolist() == [-1.0, -1.0]
    # final_obs is the true last observation; obs is the new episode's fresh draw.
    alone = Acrobot(1)
    _load(alone, hanging[:1])
    assert torch.equal(out["final_obs"][0], alone.step(torch.tensor([500 % 3]))["final_obs"][0])
    assert not torch.equal(out["obs"][0], out["final_obs"][0])


def test_terminated_and_truncated_are_never_both_set() -> None:
    env = Acrobot(2)
    # Both sub-envs take their 500th step; sub-env 0 also reaches the goal: termination
    # alone is reported, since nothing should bootstrap from a terminal state.
    _load(env, torch.tensor([[math.pi, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]), steps=499)
    out = env.step(torch.tensor([1, 1]))
    assert out["terminated"][:, 0].tolist() == [True, False]
    assert out["truncated"][:, 0].tolist() == [False, True]


@pytest.mark.parametrize("num_envs", [1, 6])
def test_every_step_of_a_random_rollout_follows_the_protocol(num_envs: int) -> None:
    torch.manual_seed(1)
    env = Acrobot(num_envs)
    obs = env.reset()
    assert obs.shape == (num_envs, 6) and obs.dtype == torch.float32
    for _ in range(200):
        out = env.step(torch.randint(0, 3, (num_envs,)))
        check_step_output(out, env.observation_spec, num_envs)
        assert out.batch_size == torch.Size([num_envs]) and out.device == env.device
        assert not (out["terminated"] & out["truncated"]).any()
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


def test_acrobot_accepts_actions_with_a_trailing_dim() -> None:
    torch.manual_seed(0)
    flat, trailing = Acrobot(5), Acrobot(5)
    flat.reset()
    _load(trailing, flat.state_dict()["state"])
    actions = torch.tensor([0, 1, 2, 0, 2])
    assert torch.equal(flat.step(actions)["final_obs"], trailing.step(actions.unsqueeze(-1))["final_obs"])


def test_acrobot_specs_describe_one_sub_env() -> None:
    env = Acrobot(3)
    assert env.observation_spec.shape == (6,) and env.observation_spec.dtype == torch.float32
    assert env.action_spec.shape == () and env.action_spec.space.n == 3
    assert env.action_spec.dtype == torch.int64
    assert Acrobot.graph_safe and Acrobot.max_episode_steps == 500


def test_the_state_is_kept_in_float64() -> None:
    assert Acrobot(2).state_dict()["state"].dtype == torch.float64
