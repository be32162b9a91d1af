"""collect(): buffer contents, episode ends, episode statistics and bad env outputs."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from tensordict import TensorDict
from torch.testing import assert_close
from torchrl.data import Categorical, Unbounded

from rlx import AlgorithmConfig, NPGConfig
from rlx.envs import CartPole
from rlx.env import Env


def _build(env_cls, **kwargs):
    kwargs.setdefault("device", "cpu")
    kwargs.setdefault("seed", 0)
    kwargs.setdefault("model_config", {"hiddens": [16]})
    return AlgorithmConfig(**kwargs).build(env_cls)


def _episode_reference(env_cls, num_envs: int, horizon: int, collects: int, actions_fn) -> list[tuple[float, float, float]]:
    """(count, return_mean, length_mean) per collect, by stepping a twin env in a Python loop."""
    env = env_cls(num_envs, horizon)
    env.reset()
    ret = [0.0] * num_envs
    length = [0] * num_envs
    out = []
    for _ in range(collects):
        finished = []
        for _ in range(horizon):
            td = env.step(actions_fn())
            done = (td["terminated"] | td["truncated"]).squeeze(-1).tolist()
            for i, r in enumerate(td["rewards"].squeeze(-1).tolist()):
                ret[i] += r
                length[i] += 1
                if done[i]:
                    finished.append((ret[i], length[i]))
                    ret[i], length[i] = 0.0, 0
        n = len(finished)
        out.append((float(n), sum(f[0] for f in finished) / n, sum(f[1] for f in finished) / n))
    return out


def test_episode_stats_count_episodes_across_collects(scripted_env) -> None:
    # T=3 is shorter than most episodes, so returns must carry across collects.
    algo = _build(scripted_env, num_envs=7, horizon=3)
    stats = []
    for _ in range(4):
        stats.append(algo.collect())
        algo.step()
    # Episode ends do not depend on the actions, so counts and lengths are exact.
    ref = _episode_reference(scripted_env, 7, 3, 4, lambda: torch.zeros(7, dtype=torch.long))
    for s, (count, _, length_mean) in zip(stats, ref):
        assert s["episodes/count"] == count
        assert s["episodes/length_mean"] == pytest.approx(length_mean)


def test_episode_returns_match_a_python_loop_with_fixed_actions(scripted_env) -> None:
    class ZeroActionModel(torch.nn.Module):
        def __init__(self, observation_spec, action_spec, /, *, num_params):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.tensor([30.0, -30.0]))  # always action 0

        def forward(self, obs):
            return self.bias.expand(obs.shape[0], 2), torch.zeros(obs.shape[0], 1)

    algo = _build(scripted_env, num_envs=9, horizon=4, model_cls=ZeroActionModel, model_config=None)
    ref = _episode_reference(scripted_env, 9, 4, 3, lambda: torch.zeros(9, dtype=torch.long))
    for count, return_mean, length_mean in ref:
        s = algo.collect()
        assert s["episodes/count"] == count
        assert s["episodes/return_mean"] == pytest.approx(return_mean)
        assert s["episodes/length_mean"] == pytest.approx(length_mean)


def test_buffer_holds_episode_ends_and_auto_reset_observations(scripted_env) -> None:
    algo = _build(scripted_env, num_envs=4, horizon=6)
    algo.collect()
    buf = algo.buffer
    # Sub-env 1 (length 2, truncates) ends at steps 1, 3, 5; sub-env 2 (length 3, terminates) at 2, 5.
    assert buf["truncated"][1, :6, 0].tolist() == [False, True, False, True, False, True]
    assert not buf["terminated"][1].any()
    assert buf["terminated"][2, :6, 0].tolist() == [False, False, True, False, False, True]
    assert not buf["truncated"][2].any()
    # Column t+1 holds the first obs of the next episode; final_obs the true last one.
    assert buf["obs"][1, 2].tolist() == [0.0, 1.0]
    assert buf["final_obs"][1, 1].tolist() == [2.0, 1.0]


def test_truncation_bootstraps_from_the_value_of_the_final_observation(scripted_env) -> None:
    algo = _build(scripted_env, num_envs=4, horizon=6)
    algo.collect()
    buf = algo.buffer
    truncated = buf["truncated"][:, :6]
    expected = algo.policy.value(buf["final_obs"][:, :6].reshape(-1, 2)).view(4, 6, 1)
    assert_close(buf["final_values"][:, :6][truncated], expected[truncated])
    assert (buf["final_values"][:, :6][~truncated] == 0).all()


def test_values_column_t_is_the_bootstrap_of_the_last_observation(scripted_env) -> None:
    algo = _build(scripted_env, num_envs=3, horizon=5)
    algo.collect()
    assert_close(algo.buffer["values"][:, 5], algo.policy.value(algo.buffer["obs"][:, 5]))


def test_buffer_is_allocated_once_and_reused(scripted_env) -> None:
    algo = _build(scripted_env, num_envs=4, horizon=5)
    ptrs = {k: v.data_ptr() for k, v in algo.buffer.items()}
    for _ in range(3):
        algo.collect()
        algo.step()
    assert {k: v.data_ptr() for k, v in algo.buffer.items()} == ptrs


def test_collection_continues_from_the_last_observation(scripted_env) -> None:
    algo = _build(scripted_env, num_envs=4, horizon=3)
    algo.collect()
    last = algo.buffer["obs"][:, 3].clone()
    algo.step()
    algo.collect()
    assert torch.equal(algo.buffer["obs"][:, 0], last)


class CountingResetEnv(Env):
    """rl8-style infinite-horizon env (obs and rewards only) that counts its resets."""

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(1,), device=self.device)
        self.action_spec = Categorical(2, shape=torch.Size([1]), device=self.device)
        self.resets = 0

    def reset(self, *, config: dict | None = None) -> torch.Tensor:
        self.resets += 1
        self.state = torch.zeros(self.num_envs, 1, device=self.device)
        return self.state.clone()

    def step(self, actions: torch.Tensor) -> TensorDict:
        self.state = self.state + 1
        return TensorDict({"obs": self.state.clone(), "rewards": -self.state.abs()}, batch_size=[self.num_envs])


@pytest.mark.parametrize("horizons_per_env_reset, expected_resets", [(-1, 1), (1, 4), (2, 2)])
def test_horizons_per_env_reset_keeps_rl8_meaning(horizons_per_env_reset: int, expected_resets: int) -> None:
    algo = _build(CountingResetEnv, num_envs=2, horizon=3, horizons_per_env_reset=horizons_per_env_reset)
    resets_at_build = algo.env.resets
    env_resets = []
    for _ in range(4):
        env_resets.append(algo.collect()["env/resets"])
        algo.step()
    assert algo.env.resets - resets_at_build == expected_resets
    assert sum(r > 0 for r in env_resets) == expected_resets


def test_infinite_horizon_env_reports_no_episodes() -> None:
    algo = _build(CountingResetEnv, num_envs=2, horizon=3)
    stats = algo.collect()
    assert stats["episodes/count"] == 0 and math.isnan(stats["episodes/return_mean"])
    assert not algo.buffer["terminated"].any() and not algo.buffer["truncated"].any()
    assert stats["env/steps"] == 6


def test_collect_stats_have_the_rl8_keys_and_episode_keys(scripted_env) -> None:
    stats = _build(scripted_env, num_envs=4, horizon=3).collect()
    for key in [
        "returns/min", "returns/max", "returns/mean", "returns/std",
        "rewards/min", "rewards/max", "rewards/mean", "rewards/std",
        "env/resets", "env/steps", "profiling/collect_ms",
        "episodes/count", "episodes/return_mean", "episodes/length_mean",
    ]:
        assert isinstance(stats[key], float), key


def test_deterministic_collect_takes_the_mode(masked_choice_env) -> None:
    algo = _build(masked_choice_env, num_envs=32, horizon=4)
    algo.collect(deterministic=True)
    params, _ = algo.policy.model(algo.buffer["obs"][:, :4].reshape(-1))
    dist = algo.policy.distribution(params, algo.buffer["obs"][:, :4].reshape(-1))
    assert torch.equal(algo.buffer["actions"][:, :4].reshape(-1), dist.mode())


@pytest.mark.parametrize("rows_per_pass", [2048, 7])  # one pass; passes of 1 column (B=6)
def test_values_computed_after_the_loop_equal_the_acting_values(rows_per_pass, monkeypatch) -> None:
    from rlx import AlgorithmConfig
    from rlx.envs import CartPole

    monkeypatch.setattr("rlx.algorithms.base.VALUE_PASS_ROWS", rows_per_pass)
    algo = AlgorithmConfig(num_envs=6, horizon=9, device="cpu", seed=0, normalize_obs=True,
                           model_config={"hiddens": [16]}).build(CartPole)
    assert not algo.policy.values_while_acting  # the default model has separate heads
    for _ in range(2):
        algo.collect()
        algo.step()
    algo.collect()
    buf = algo.buffer
    for t in range(10):  # column T (the bootstrap) included
        expected = algo.policy.act(buf.get("obs")[:, t]).values
        torch.testing.assert_close(buf.get("values")[:, t], expected, atol=1e-6, rtol=1e-6)


class _HugeRewardCartPole(CartPole):
    """Finite rewards of 3e38: their returns overflow float32 inside the update."""

    def step(self, actions: torch.Tensor):
        out = super().step(actions)
        out["rewards"] = out["rewards"] * 3e38
        return out


@pytest.mark.parametrize("config_cls", [AlgorithmConfig, NPGConfig])
def test_an_update_that_leaves_nan_parameters_raises(config_cls) -> None:
    algo = config_cls(
        num_envs=4, horizon=8, device="cpu", seed=0, normalize_rewards=False, model_config={"hiddens": [8]}
    ).build(_HugeRewardCartPole)
    algo.collect()  # every reward is finite: collect has nothing to object to
    with pytest.raises(FloatingPointError, match=r"step\(\): the update left NaN or inf in the policy's parameters.*losses/vf = nan"):
        algo.step()
    healthy = config_cls(num_envs=4, horizon=8, device="cpu", seed=0, model_config={"hiddens": [8]}).build(CartPole)
    healthy.collect()
    healthy.step()  # the check costs no sync and never fires on a finite update


class RandomEndsEnv(Env):
    """Random observations, and steps that truncate with probability ``p_truncate`` and
    otherwise terminate with probability 0.1: many truncations per env and collect."""

    p_truncate = 0.3

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(3,), device=self.device)
        self.action_spec = Categorical(2, device=self.device)

    def reset(self, *, config: dict | None = None) -> torch.Tensor:
        return torch.randn(self.num_envs, 3)

    def step(self, actions: torch.Tensor) -> TensorDict:
        B = self.num_envs
        truncated = torch.rand(B, 1) < self.p_truncate
        terminated = (torch.rand(B, 1) < 0.1) & ~truncated
        return TensorDict(
            {"obs": torch.randn(B, 3), "rewards": torch.randn(B, 1), "terminated": terminated,
             "truncated": truncated, "final_obs": torch.randn(B, 3)},
            batch_size=[B],
        )


@pytest.mark.parametrize("num_envs, horizon", [(1, 1), (1, 7), (3, 1), (5, 16), (32, 8)])
@pytest.mark.parametrize("p_truncate", [0.0, 0.05, 0.5, 1.0])
@pytest.mark.parametrize("capacity", [1, 4, None])
def test_truncation_bootstrap_values_exactly_the_truncated_steps(num_envs, horizon, p_truncate, capacity) -> None:
    # Only truncated steps are valued, up to a capacity; beyond it collect() falls back to
    # valuing every step after its sync. Either way the buffer must hold V(final_obs)
    # where truncated and 0 elsewhere, as one pass over every step computes it.
    env_cls = type("Env", (RandomEndsEnv,), {"p_truncate": p_truncate})
    algo = _build(env_cls, num_envs=num_envs, horizon=horizon)
    if capacity is not None:
        algo.rollout.set_truncation_capacity(capacity)
    for _ in range(3):
        algo.collect()
        buf = algo.buffer
        truncated = buf["truncated"][:, :horizon]
        flat = buf["final_obs"][:, :horizon].reshape(-1, 3)
        expected = algo.policy.value(flat).view(num_envs, horizon, 1).masked_fill(~truncated, 0.0)
        assert_close(buf["final_values"][:, :horizon], expected, atol=1e-6, rtol=1e-5)
        assert_close(algo.rollout.all_final_values(), expected, atol=1e-6, rtol=1e-5)
        compacted, overflow = algo.rollout.truncated_final_values()
        assert bool(overflow) == (int(truncated.sum()) > algo.rollout.truncation_capacity)
        if not overflow:
            assert_close(compacted, expected, atol=1e-6, rtol=1e-5)
        algo.step()


@pytest.mark.parametrize("capacity", [2, 12, None])  # shares of 1, 6 and 5 (one per sub-env)
def test_two_members_value_their_own_truncated_steps(capacity) -> None:
    # Each member values up to its share of the capacity of its own truncated steps,
    # found and passed member by member; the uneven counts of random truncations must
    # still land each value on its own step, and a member past its share overflows.
    env_cls = type("Env", (RandomEndsEnv,), {"p_truncate": 0.05})  # about 2 truncations a member and collect
    algo = _build(env_cls, num_envs=5, horizon=8, num_seeds=2)
    if capacity is not None:
        algo.rollout.set_truncation_capacity(capacity)
    share = algo.rollout.truncation_capacity // 2
    valued = 0
    for _ in range(6):
        algo.collect()
        truncated = algo.buffer["truncated"][:, :8]
        expected = algo.rollout.all_final_values()
        assert_close(algo.buffer["final_values"][:, :8], expected, atol=1e-6, rtol=1e-5)
        compacted, overflow = algo.rollout.truncated_final_values()
        assert bool(overflow) == bool((truncated.reshape(2, -1).sum(1) > share).any())
        if not overflow:
            assert_close(compacted, expected, atol=1e-6, rtol=1e-5)
            valued += int(truncated.sum())
        algo.step()
    assert valued > 0 or share == 1


def test_truncation_capacity_follows_the_env_time_limit() -> None:
    from rlx.envs import Pendulum  # truncates at 200 steps

    assert _build(Pendulum, num_envs=4, horizon=64).rollout.truncation_capacity == 4
    assert _build(Pendulum, num_envs=4, horizon=200).rollout.truncation_capacity == 4
    assert _build(Pendulum, num_envs=4, horizon=201).rollout.truncation_capacity == 8  # twice in 201 steps
    assert _build(RandomEndsEnv, num_envs=4, horizon=16).rollout.truncation_capacity == 4  # no declared limit
    assert _build(RandomEndsEnv, num_envs=4, horizon=1).rollout.truncation_capacity == 4  # B * T: plain pass
