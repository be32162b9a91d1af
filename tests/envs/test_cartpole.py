"""CartPole: step-for-step parity with gymnasium CartPole-v1, and episode-end semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rlx.env import check_step_output
from rlx.envs import CartPole

X_LIMIT = 2.4
THETA_LIMIT = 12 * 2 * math.pi / 360


def _load(env: CartPole, state: torch.Tensor, steps: int | torch.Tensor = 0) -> None:
    """Put every sub-env in ``state`` ``[B, 4]`` with ``steps`` steps already taken."""
    steps = torch.as_tensor(steps, dtype=torch.int64).expand(env.num_envs).clone()
    env.load_state_dict({"state": state.float(), "steps": steps})


def _gym_cartpole():
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("CartPole-v1").unwrapped
    ref.reset(seed=0)
    return ref


def _gym_step(ref, state: torch.Tensor, action: int) -> tuple[torch.Tensor, float, bool]:
    """Step gymnasium's env from ``state`` ``[4]`` (float32 values, given as float64)."""
    ref.state = state.double().numpy()
    ref.steps_beyond_terminated = None  # each call is a fresh transition, not a step past the end
    obs, reward, terminated, truncated, _ = ref.step(action)
    assert not truncated  # the unwrapped env never truncates; the time limit is a wrapper
    return torch.as_tensor(obs), float(reward), bool(terminated)


def _f32(value: float) -> float:
    return torch.tensor(value, dtype=torch.float32).item()


def _f32_next(value: float, toward: float) -> float:
    """The float32 neighbour of ``value``'s float32 rounding, one ulp toward ``toward``."""
    return torch.nextafter(torch.tensor(value, dtype=torch.float32), torch.tensor(toward)).item()


def _threshold_states() -> torch.Tensor:
    """States that end their step on (or one float32 ulp either side of) a threshold.

    With zero velocity the step leaves x unchanged, and with zero angular velocity it
    leaves theta unchanged, so the post-step value is exactly the one given here.
    """
    rows = []
    for sign in (1.0, -1.0):
        for x in (_f32(X_LIMIT), _f32_next(X_LIMIT, 0.0), _f32_next(X_LIMIT, math.inf), 2.3, 2.5):
            rows.append([sign * x, 0.0, 0.0, 0.0])
        for theta in (
            _f32(THETA_LIMIT),
            _f32_next(THETA_LIMIT, 0.0),
            _f32_next(_f32_next(THETA_LIMIT, 0.0), 0.0),
            _f32_next(THETA_LIMIT, math.inf),
        ):
            rows.append([0.0, 0.0, sign * theta, 0.0])
        # Crossing both limits in the same step.
        rows.append([sign * 2.399, sign * 1.0, sign * 0.209, sign * 1.0])
    return torch.tensor(rows, dtype=torch.float32)


def test_cartpole_matches_gymnasium_step_for_step() -> None:
    ref = _gym_cartpole()
    torch.manual_seed(0)
    # Random states spanning the termination box and beyond it, plus the threshold cases.
    scale = torch.tensor([5.0, 4.0, 0.5, 4.0])
    random_states = (torch.rand(256, 4) * 2 - 1) * scale / 2
    states = torch.cat([random_states, _threshold_states()])
    B = states.shape[0]
    actions = torch.randint(0, 2, (B,))
    env = CartPole(B)
    _load(env, states)
    out = env.step(actions)
    check_step_output(out, env.observation_spec, B)
    expected = [_gym_step(ref, states[i], int(actions[i])) for i in range(B)]
    assert_close(out["final_obs"], torch.stack([obs for obs, _, _ in expected]), atol=1e-5, rtol=1e-5)
    assert_close(out["rewards"], torch.tensor([[reward] for _, reward, _ in expected]))
    assert out["terminated"][:, 0].tolist() == [terminated for _, _, terminated in expected]
    assert 0 < out["terminated"].sum() < B  # both outcomes are exercised


def test_cartpole_terminates_exactly_where_gymnasium_does_at_the_thresholds() -> None:
    ref = _gym_cartpole()
    states = _threshold_states()
    env = CartPole(states.shape[0])
    _load(env, states)
    out = env.step(torch.ones(states.shape[0], dtype=torch.int64))
    expected = [_gym_step(ref, state, 1)[2] for state in states]
    assert out["terminated"][:, 0].tolist() == expected
    # The float32 rounding of 2.4 and of 12 degrees lies OUTSIDE gymnasium's limits.
    assert expected[0] is True and expected[1] is False


def test_cartpole_follows_a_long_random_gymnasium_rollout() -> None:
    ref = _gym_cartpole()
    rng = np.random.default_rng(0)
    env = CartPole(1)
    env.reset()
    episodes = 0
    for _ in range(400):
        # Start both from the same float32 state so float32 rounding cannot accumulate.
        state = torch.as_tensor(ref.state, dtype=torch.float32)
        _load(env, state.unsqueeze(0))
        action = int(rng.integers(2))
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
    assert episodes >= 5


def test_terminated_sub_envs_auto_reset_and_keep_their_final_observation() -> None:
    torch.manual_seed(0)
    # Sub-env 1 tips past 12 degrees and sub-env 3 leaves the track this step.
    states = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 0.2, 2.0],
            [0.01, 0.1, -0.02, 0.0],
            [-2.39, -1.0, 0.0, 0.0],
        ]
    )
    actions = torch.tensor([0, 1, 1, 0])
    env = CartPole(4)
    _load(env, states, steps=torch.tensor([5, 6, 7, 8]))
    out = env.step(actions)
    check_step_output(out, env.observation_spec, 4)
    assert out["terminated"][:, 0].tolist() == [False, True, False, True]
    assert not out["truncated"].any()
    assert_close(out["rewards"], torch.ones(4, 1))
    # final_obs of every sub-env is the state this step reached, ended or not: the same
    # as one sub-env stepped alone from that state.
    for i in range(4):
        alone = CartPole(1)
        _load(alone, states[i : i + 1])
        assert_close(out["final_obs"][i], alone.step(actions[i : i + 1])["final_obs"][0], rtol=0, atol=0)
    assert out["final_obs"][1, 2] > THETA_LIMIT and out["final_obs"][3, 0] < -X_LIMIT
    # Ended sub-envs start afresh; the others carry on from where they are.
    assert out["obs"][[1, 3]].abs().max() <= 0.05
    assert torch.equal(out["obs"][[0, 2]], out["final_obs"][[0, 2]])
    assert env.steps.tolist() == [6, 0, 8, 0]
    assert torch.equal(env.state_dict()["state"], out["obs"])


def test_truncation_happens_at_exactly_500_steps() -> None:
    env = CartPole(2)
    env.reset()
    upright = torch.zeros(2, 4)
    for t in range(1, 501):
        steps = env.state_dict()["steps"]
        if t == 101:
            steps[1] = 0  # sub-env 1 starts its episode 100 steps after sub-env 0
        # Put the pole back upright before every step, so only the time limit can end it.
        _load(env, upright, steps=steps)
        out = env.step(torch.tensor([t % 2, 1 - t % 2]))
        check_step_output(out, env.observation_spec, 2)
        assert not out["terminated"].any()
        assert out["truncated"][:, 0].tolist() == [t == 500, False], t
    assert env.steps.tolist() == [0, 400]
    # final_obs is the true last observation; obs is the new episode's fresh draw.
    alone = CartPole(1)
    _load(alone, upright[:1])
    assert torch.equal(out["final_obs"][0], alone.step(torch.tensor([0]))["final_obs"][0])
    assert out["obs"][0].abs().max() <= 0.05 and not torch.equal(out["obs"][0], out["final_obs"][0])


def test_a_checkpointed_step_counter_of_499_truncates_on_the_next_step() -> None:
    env = CartPole(3)
    _load(env, torch.zeros(3, 4), steps=torch.tensor([499, 498, 0]))
    out = env.step(torch.tensor([1, 0, 1]))
    assert out["truncated"][:, 0].tolist() == [True, False, False]
    assert env.steps.tolist() == [0, 499, 1]


def test_terminated_and_truncated_are_never_both_set() -> None:
    env = CartPole(2)
    # Both sub-envs take their 500th step; sub-env 0 also leaves the track: termination
    # alone is reported, since nothing should bootstrap from a failed state.
    _load(env, torch.tensor([[2.39, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]), steps=499)
    out = env.step(torch.tensor([1, 1]))
    assert out["terminated"][:, 0].tolist() == [True, False]
    assert out["truncated"][:, 0].tolist() == [False, True]


@pytest.mark.parametrize("num_envs", [1, 7])
def test_every_step_of_a_random_rollout_follows_the_protocol(num_envs: int) -> None:
    torch.manual_seed(1)
    env = CartPole(num_envs)
    obs = env.reset()
    assert obs.shape == (num_envs, 4) and obs.dtype == torch.float32 and obs.abs().max() <= 0.05
    ended = 0
    for _ in range(300):
        out = env.step(torch.randint(0, 2, (num_envs,)))
        check_step_output(out, env.observation_spec, num_envs)
        assert out.batch_size == torch.Size([num_envs]) and out.device == env.device
        assert not (out["terminated"] & out["truncated"]).any()
        done = out["terminated"] | out["truncated"]
        ended += int(done.sum())
        # Every observation of a running episode lies inside the termination box.
        assert (out["obs"][:, 0].abs() <= X_LIMIT).all() and (out["obs"][:, 2].abs() <= THETA_LIMIT).all()
        assert torch.equal(torch.where(done, 0, out["obs"] - out["final_obs"]), torch.zeros_like(out["obs"]))
    assert ended >= num_envs  # random actions fail well within 300 steps


def test_cartpole_accepts_actions_with_a_trailing_dim() -> None:
    torch.manual_seed(0)
    flat, trailing = CartPole(5), CartPole(5)
    state = flat.reset()
    _load(trailing, state)
    actions = torch.tensor([0, 1, 1, 0, 1])
    assert torch.equal(flat.step(actions)["final_obs"], trailing.step(actions.unsqueeze(-1))["final_obs"])


def test_cartpole_specs_describe_one_sub_env() -> None:
    env = CartPole(3)
    assert env.observation_spec.shape == (4,) and env.observation_spec.dtype == torch.float32
    assert env.action_spec.shape == () and env.action_spec.space.n == 2
    assert env.action_spec.dtype == torch.int64
    assert CartPole.graph_safe and CartPole.max_episode_steps == 500


def test_same_seed_gives_the_same_episodes() -> None:
    def rollout() -> list[torch.Tensor]:
        torch.manual_seed(7)
        env = CartPole(8)
        obs = [env.reset()]
        for _ in range(60):
            obs.append(env.step(torch.randint(0, 2, (8,)))["obs"])
        return obs

    first, second = rollout(), rollout()
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_cartpole_without_velocities_observes_position_and_angle_of_the_same_dynamics() -> None:
    from rlx.envs import CartPoleNoVelocity

    torch.manual_seed(0)
    full = CartPole(8)
    full_obs = full.reset()
    torch.manual_seed(0)
    hidden = CartPoleNoVelocity(8)
    obs = hidden.reset()
    assert hidden.observation_spec.shape == (2,) and torch.equal(obs, full_obs[:, [0, 2]])
    for step in range(30):
        actions = torch.randint(0, 2, (8,))
        torch.manual_seed(step)  # the same reset draws in both
        a = full.step(actions)
        torch.manual_seed(step)
        b = hidden.step(actions)
        for key in ("obs", "final_obs"):
            assert torch.equal(b[key], a[key][:, [0, 2]])
        for key in ("rewards", "terminated", "truncated"):
            assert torch.equal(b[key], a[key])
