"""The env protocol: bad env outputs and limits raise clear errors at build or collect."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Categorical, Unbounded

from rlx import AlgorithmConfig, EnvOutputError
from rlx.env import Env, check_env_limits, resolve_device


class ConfigurableEnv(Env):
    """A 3-feature env whose outputs can be broken one at a time through class attributes."""

    reset_obs_shape: ClassVar[tuple[int, ...] | None] = None
    step_obs_shape: ClassVar[tuple[int, ...] | None] = None
    rewards_shape: ClassVar[tuple[int, ...] | None] = None
    drop_key: ClassVar[str | None] = None
    truncates: ClassVar[bool] = False
    nan_reward_at: ClassVar[int | None] = None
    inf_obs_at: ClassVar[int | None] = None

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(3,), device=self.device)
        self.action_spec = Categorical(2, device=self.device)
        self.t = 0

    def reset(self, *, config: dict | None = None) -> torch.Tensor:
        self.t = 0
        return torch.zeros(self.num_envs, *(self.reset_obs_shape or (3,)))

    def step(self, actions: torch.Tensor) -> TensorDict:
        self.t += 1
        B = self.num_envs
        obs = torch.zeros(B, *(self.step_obs_shape or (3,)))
        rewards = torch.ones(*(self.rewards_shape or (B, 1)))
        if self.nan_reward_at is not None and self.t == self.nan_reward_at:
            rewards[B - 1] = float("nan")
        if self.inf_obs_at is not None and self.t == self.inf_obs_at:
            obs[0, 2] = float("inf")
        out = {"obs": obs, "rewards": rewards, "terminated": torch.zeros(B, 1, dtype=torch.bool)}
        if self.truncates:
            out["truncated"] = torch.zeros(B, 1, dtype=torch.bool)
        if self.drop_key is not None:
            del out[self.drop_key]
        return TensorDict(out, batch_size=[B])


def _env(**attrs: Any) -> type[ConfigurableEnv]:
    return type("BrokenEnv", (ConfigurableEnv,), attrs)


def _build(env_cls, **kwargs):
    return AlgorithmConfig(num_envs=4, horizon=5, device="cpu", seed=0, model_config={"hiddens": [8]}, **kwargs).build(env_cls)


def test_wrong_obs_shape_from_reset_names_shapes() -> None:
    with pytest.raises(EnvOutputError, match=r"reset\(\).*'obs' has shape \[4, 5\], expected \[4, 3\]"):
        _build(_env(reset_obs_shape=(5,)))


def test_wrong_obs_shape_from_step_names_shapes() -> None:
    with pytest.raises(EnvOutputError, match=r"step\(\).*'obs' has shape \[4, 2\], expected \[4, 3\]"):
        _build(_env(step_obs_shape=(2,)))


def test_rewards_without_the_trailing_dim_are_rejected() -> None:
    with pytest.raises(EnvOutputError, match=r"'rewards' has shape \[4\], expected \[4, 1\]"):
        _build(_env(rewards_shape=(4,)))


def test_missing_rewards_key_is_named() -> None:
    with pytest.raises(EnvOutputError, match="required key 'rewards' is missing"):
        _build(_env(drop_key="rewards"))


def test_truncated_without_final_obs_is_rejected() -> None:
    with pytest.raises(EnvOutputError, match="'truncated' but no 'final_obs'"):
        _build(_env(truncates=True))


def test_nan_rewards_raise_at_the_first_collect_with_their_location() -> None:
    algo = _build(_env(nan_reward_at=3))
    with pytest.raises(ValueError, match=r"non-finite value nan in 'rewards'.*env 3, step 2"):
        algo.collect()


def test_inf_observations_raise_at_the_first_collect_with_their_location() -> None:
    algo = _build(_env(inf_obs_at=2))
    with pytest.raises(ValueError, match=r"non-finite value inf in 'obs'.*env 0, step 1"):
        algo.collect()


class NaNFinalObsEnv(ConfigurableEnv):
    """Truncates env 1 at step 2 with a NaN in its final observation; every other step's
    final observation is NaN too, where nothing truncates and nothing is valued."""

    truncate_with_nan: ClassVar[bool] = True

    def step(self, actions: torch.Tensor) -> TensorDict:
        out = super().step(actions)
        B = self.num_envs
        truncated = torch.zeros(B, 1, dtype=torch.bool)
        final_obs = torch.full((B, 3), float("nan"))
        if self.t == 3:
            truncated[1] = True
            final_obs[1] = torch.tensor([0.0, float("nan") if self.truncate_with_nan else 0.0, 0.0])
        out["truncated"], out["final_obs"] = truncated, final_obs
        return out


def test_nan_final_obs_of_a_truncated_step_raises_with_its_location() -> None:
    # V(final_obs) bootstraps the truncated episode: a NaN there would reach the
    # advantages silently.
    algo = _build(NaNFinalObsEnv)
    with pytest.raises(ValueError, match=r"non-finite value nan in 'final_obs'.*env 1, step 2"):
        algo.collect()


def test_nan_final_obs_of_steps_that_do_not_truncate_is_ignored() -> None:
    algo = _build(type("CleanTruncation", (NaNFinalObsEnv,), {"truncate_with_nan": False}))
    algo.collect()
    algo.step()
    assert all(torch.isfinite(p).all() for p in algo.policy.parameters())


class ActionZeroingEnv(ConfigurableEnv):
    """Zeroes the action tensor it receives, in place."""

    def step(self, actions: torch.Tensor) -> TensorDict:
        actions.zero_()
        return super().step(actions)


def test_the_buffer_keeps_the_sampled_actions_when_the_env_modifies_them_in_place() -> None:
    from rlx.collect.buffer import ACTIONS, LOGP
    from rlx.env import OBS

    algo = _build(ActionZeroingEnv)
    algo.collect()
    actions = algo.buffer.get(ACTIONS)[:, :5]
    assert actions.any()  # 20 samples of a 2-way policy: not all 0 (p = 2^-20)
    with torch.no_grad():
        logp = algo.policy.evaluate(algo.buffer.get(OBS)[:, :5].reshape(20, 3), actions.reshape(20)).logp
    torch.testing.assert_close(logp, algo.buffer.get(LOGP)[:, :5].reshape(20, 1))


class LateTerminationEnv(ConfigurableEnv):
    """Returns 'terminated' only from step 3 on: absent when validate() looked."""

    def step(self, actions: torch.Tensor) -> TensorDict:
        out = super().step(actions)
        if self.t < 3:
            del out["terminated"]
        return out


def test_terminated_appearing_after_validation_raises_instead_of_being_dropped() -> None:
    algo = _build(LateTerminationEnv)
    with pytest.raises(EnvOutputError, match=r"returned 'terminated' at step \d but not when validated"):
        algo.collect()


class WrongDeviceEnv(ConfigurableEnv):
    """Returns its reset observation or its step rewards on the meta device."""

    meta_key: ClassVar[str] = "obs"

    def reset(self, *, config: dict | None = None) -> torch.Tensor:
        obs = super().reset(config=config)
        return obs.to("meta") if self.meta_key == "obs" else obs

    def step(self, actions: torch.Tensor) -> TensorDict:
        out = super().step(actions)
        if self.meta_key == "rewards":
            out["rewards"] = out["rewards"].to("meta")
        return out


@pytest.mark.parametrize(
    ("key", "where"), [("obs", r"WrongDeviceEnv\.reset\(\)"), ("rewards", r"WrongDeviceEnv\.step\(\)")]
)
def test_outputs_on_another_device_are_refused_at_build(key: str, where: str) -> None:
    env_cls = type("WrongDeviceEnv", (WrongDeviceEnv,), {"meta_key": key})
    with pytest.raises(EnvOutputError, match=rf"{where}: '{key}' is on meta, expected cpu"):
        _build(env_cls)


def test_spellings_of_the_algorithm_device_are_one_device() -> None:
    AlgorithmConfig(num_envs=4, horizon=5, device="cpu:0", seed=0, model_config={"hiddens": [8]}).build(ConfigurableEnv).collect()


class LimitedEnv(ConfigurableEnv):
    max_num_envs: ClassVar[int] = 4
    max_horizon: ClassVar[int] = 5


def test_env_limits_raise_instead_of_clamping() -> None:
    with pytest.raises(ValueError, match=r"num_envs=8 exceeds LimitedEnv.max_num_envs=4"):
        AlgorithmConfig(num_envs=8, horizon=5, device="cpu").build(LimitedEnv)
    with pytest.raises(ValueError, match=r"horizon=6 exceeds LimitedEnv.max_horizon=5"):
        AlgorithmConfig(num_envs=4, horizon=6, device="cpu").build(LimitedEnv)
    algo = AlgorithmConfig(num_envs=4, horizon=5, device="cpu", model_config={"hiddens": [8]}).build(LimitedEnv)
    assert algo.env.num_envs == 4 and algo.env.horizon == 5


def test_limits_apply_to_env_classes_that_do_not_subclass_env() -> None:
    class Foreign:
        max_num_envs = 2

    check_env_limits(Foreign, 2, 100)
    with pytest.raises(ValueError, match="max_num_envs=2"):
        check_env_limits(Foreign, 3, None)


def test_algo_env_is_the_env_instance() -> None:
    algo = _build(ConfigurableEnv)
    assert isinstance(algo.env, ConfigurableEnv) and algo.env.num_envs == 4


class Rl8StyleEnv:
    """Written for rl8's protocol: no rlx base class, obs and rewards only."""

    max_num_envs = 1024
    max_horizon = 64

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        self.num_envs, self.horizon, self.device = num_envs, horizon, device
        self.observation_spec = Unbounded(1, device=device)
        self.action_spec = Categorical(2, shape=torch.Size([1]), device=device)

    def reset(self, *, config: dict | None = None) -> torch.Tensor:
        self.state = torch.empty(self.num_envs, 1, device=self.device).uniform_(-10, 10)
        return self.state

    def step(self, action: torch.Tensor) -> TensorDict:
        self.state = self.state + 2 * action - 1
        return TensorDict({"obs": self.state, "rewards": -self.state.abs()}, batch_size=self.num_envs)


def test_rl8_style_env_builds_and_learns_unchanged() -> None:
    algo = AlgorithmConfig(
        num_envs=64, horizon=16, device="cpu", seed=0, model_config={"hiddens": [32]},
        optimizer_config={"lr": 3e-3}, normalize_obs=True,
    ).build(Rl8StyleEnv)
    first = algo.collect()["rewards/mean"]
    for _ in range(30):
        algo.step()
        last = algo.collect()["rewards/mean"]
    assert last > first + 1.0


def test_only_envs_that_declare_graph_safe_true_are_captured_in_cuda_graphs() -> None:
    import rlx.envs
    from rlx.env import env_is_graph_safe

    builtin = ["CartPole", "CartPoleNoVelocity", "Acrobot", "Pendulum", "MountainCarContinuous", "PointMass",
               "CueRecall", "DiscreteDummyEnv", "ContinuousDummyEnv"]
    for name in builtin:
        env_cls = getattr(rlx.envs, name)
        assert env_is_graph_safe(env_cls) and env_is_graph_safe(env_cls(2)), name
    # The default, an Env subclass that says nothing, a duck-typed rl8-style env, adapters
    # around host simulators, and a truthy non-bool are all eager.
    assert Env.graph_safe is False and not env_is_graph_safe(ConfigurableEnv)
    assert not env_is_graph_safe(type("Rl8Style", (), {})) and not env_is_graph_safe(rlx.envs.GymnasiumEnv)
    assert not env_is_graph_safe(type("Truthy", (), {"graph_safe": "yes"}))
    algo = AlgorithmConfig(num_envs=4, horizon=4, device="cpu").build(rlx.envs.CartPole)
    assert not algo.rollout.graphed  # cudagraphs is off (and CUDA only)


def test_auto_device_picks_cuda_only_when_present_and_explicit_devices_are_honoured() -> None:
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
