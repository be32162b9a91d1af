"""CartPole: step-for-step parity with gymnasium CartPole-v1, and episode-end semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rlx.envs import CartPole

X_LIMIT = 2.4
THETA_LIMIT = 12 * 2 * math.pi / 360


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


def test_cartpole_matches_gymnasium_step_for_step(envtest) -> None:
    ref = envtest.gym("CartPole-v1")
    torch.manual_seed(0)
    # Random states spanning the termination box and beyond it, plus the threshold cases.
    scale = torch.tensor([5.0, 4.0, 0.5, 4.0])
    random_states = (torch.rand(256, 4) * 2 - 1) * scale / 2
    states = torch.cat([random_states, _threshold_states()])
    B = states.shape[0]
    actions = torch.randint(0, 2, (B,))
    _, out, expected = ref.step_batch(CartPole, states, actions)
    assert_close(out["final_obs"], expected["obs"], atol=1e-5, rtol=1e-5)
    assert_close(out["rewards"], expected["rewards"].unsqueeze(-1))
    assert out["terminated"][:, 0].tolist() == expected["terminated"].tolist()
    assert 0 < out["terminated"].sum() < B  # both outcomes are exercised


def test_cartpole_terminates_exactly_where_gymnasium_does_at_the_thresholds(envtest) -> None:
    ref = envtest.gym("CartPole-v1")
    states = _threshold_states()
    env = CartPole(states.shape[0])
    envtest.load(env, states)
    out = env.step(torch.ones(states.shape[0], dtype=torch.int64))
    expected = [ref.step_from(state, 1)[2] for state in states]
    assert out["terminated"][:, 0].tolist() == expected
    # The float32 rounding of 2.4 and of 12 degrees lies OUTSIDE gymnasium's limits.
    assert expected[0] is True and expected[1] is False


def test_cartpole_follows_a_long_random_gymnasium_rollout(envtest) -> None:
    ref = envtest.gym("CartPole-v1")
    rng = np.random.default_rng(0)
    env = CartPole(1)
    env.reset()
    # Both start from the same float32 state each step, so float32 rounding cannot accumulate.
    assert ref.follow(env, 400, lambda state: torch.tensor(int(rng.integers(2)))) >= 5


def test_terminated_sub_envs_auto_reset_and_keep_their_final_observation(envtest) -> None:
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
    # final_obs of every sub-env is the state this step reached, ended or not: the same
    # as one sub-env stepped alone from that state. Sub-envs 0 and 2 carry on.
    env, out = envtest.step_with_ends(CartPole, states, actions, steps=torch.tensor([5, 6, 7, 8]))
    assert out["terminated"][:, 0].tolist() == [False, True, False, True]
    assert not out["truncated"].any()
    assert_close(out["rewards"], torch.ones(4, 1))
    assert out["final_obs"][1, 2] > THETA_LIMIT and out["final_obs"][3, 0] < -X_LIMIT
    # Ended sub-envs start afresh; the others carry on from where they are.
    assert out["obs"][[1, 3]].abs().max() <= 0.05
    assert torch.equal(env.state_dict()["state"], out["obs"])


def test_truncation_happens_at_exactly_500_steps(envtest) -> None:
    # The pole back upright before every step, so only the time limit can end it; sub-env
    # 1 starts its episode 100 steps after sub-env 0.
    upright = torch.zeros(2, 4)
    env, out = envtest.run_to_time_limit(CartPole, upright, lambda t: torch.tensor([t % 2, 1 - t % 2]), offset=100)
    assert env.steps.tolist() == [0, 400]
    # final_obs is the true last observation; obs is the new episode's fresh draw.
    envtest.assert_steps_as_alone(CartPole, upright[:1], torch.tensor([0]), out)
    assert out["obs"][0].abs().max() <= 0.05 and not torch.equal(out["obs"][0], out["final_obs"][0])


def test_a_checkpointed_step_counter_of_499_truncates_on_the_next_step(envtest) -> None:
    env = CartPole(3)
    envtest.load(env, torch.zeros(3, 4), steps=torch.tensor([499, 498, 0]))
    out = env.step(torch.tensor([1, 0, 1]))
    assert out["truncated"][:, 0].tolist() == [True, False, False]
    assert env.steps.tolist() == [0, 499, 1]


def test_terminated_and_truncated_are_never_both_set(envtest) -> None:
    # Both sub-envs take their 500th step; sub-env 0 also leaves the track: termination
    # alone is reported, since nothing should bootstrap from a failed state.
    envtest.assert_termination_wins_at_the_time_limit(
        CartPole, torch.tensor([[2.39, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]), torch.tensor([1, 1])
    )


@pytest.mark.parametrize("num_envs", [1, 7])
def test_every_step_of_a_random_rollout_follows_the_protocol(num_envs: int, envtest) -> None:
    obs, rollout = envtest.protocol_rollout(CartPole(num_envs), 300, lambda: torch.randint(0, 2, (num_envs,)))
    assert obs.shape == (num_envs, 4) and obs.abs().max() <= 0.05
    ended = 0
    for _, out in rollout:
        done = out["terminated"] | out["truncated"]
        ended += int(done.sum())
        # Every observation of a running episode lies inside the termination box.
        assert (out["obs"][:, 0].abs() <= X_LIMIT).all() and (out["obs"][:, 2].abs() <= THETA_LIMIT).all()
        assert torch.equal(torch.where(done, 0, out["obs"] - out["final_obs"]), torch.zeros_like(out["obs"]))
    assert ended >= num_envs  # random actions fail well within 300 steps


def test_cartpole_accepts_actions_with_a_trailing_dim(envtest) -> None:
    envtest.assert_trailing_action_dim_changes_nothing(CartPole, torch.tensor([0, 1, 1, 0, 1]))


def test_cartpole_specs_describe_one_sub_env(envtest) -> None:
    env = envtest.assert_specs(CartPole, obs_shape=(4,), action_shape=(), action_dtype=torch.int64,
                                max_episode_steps=500)
    assert env.action_spec.space.n == 2


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
