"""Torch-native vector envs in gymnasium's shape (Isaac Lab's direct envs, ManiSkill3):
:class:`TorchVectorEnv`.

Such an env keeps its tensors on its device and speaks gymnasium's vector API:
``reset() -> (obs, info)`` and ``step(actions) -> (obs, rewards, terminated, truncated,
info)``, resetting finished sub-envs in the same step. The adapter passes tensors
through with no numpy round trip and no host sync. The true last observation of an
episode that ended is read from ``info["final_observation"]`` or ``info["final_obs"]``
where the env provides it (a tensor, or a dict of tensors for dict observations, with
rows only meaningful where the episode ended); otherwise a truncated step bootstraps
from V(s_t), the observation the step was taken from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
from tensordict import TensorDict
from torch import Tensor
from torchrl.data import Bounded, Composite, Unbounded

from rlx.env import FINAL_OBS, OBS, REWARDS, TERMINATED, TRUNCATED, Env, bound_env_class, resolve_make_env, select_rows

__all__ = ["TorchVectorEnv"]

#: ``info`` entries that may hold the true last observations of episodes that ended.
FINAL_OBS_INFO_KEYS = ("final_observation", "final_obs")


def _as_obs(obs: Tensor | Mapping[str, Tensor], num_envs: int, device: torch.device) -> Tensor | TensorDict:
    if isinstance(obs, Mapping):
        return TensorDict({k: v.float() for k, v in obs.items()}, batch_size=[num_envs], device=device)
    return obs.float()


class TorchVectorEnv(Env):
    """A torch-native vector env with gymnasium's API as an rlx env (see the module docstring).

    Args:
        num_envs: ``B``; the env must have as many.
        horizon: Unused.
        device: Must be the env's device.
        make_env: ``make_env(num_envs, device)`` returning the env, or its import path.
        action_low, action_high: Bounds of the continuous actions (``None``: unbounded;
            the policy's samples are clipped to them before the env sees them).
    """

    factory_kwargs: ClassVar[dict[str, Any]] = {}

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu",
                 make_env: Callable[[int, torch.device], Any] | str | None = None,
                 action_low: float | None = None, action_high: float | None = None) -> None:
        super().__init__(num_envs, horizon, device=device)
        options = {"make_env": make_env, "action_low": action_low, "action_high": action_high}
        options = {**self.factory_kwargs, **{k: v for k, v in options.items() if v is not None}}
        make_env = resolve_make_env(options.get("make_env"), "TorchVectorEnv")
        self.vector_env = make_env(num_envs, self.device)
        obs, _ = self.vector_env.reset()
        obs = _as_obs(obs, num_envs, self.device)
        if obs.shape[0] != num_envs:
            raise ValueError(f"TorchVectorEnv: reset() returned {obs.shape[0]} observations, expected {num_envs}")
        if isinstance(obs, TensorDict):
            self.observation_spec = Composite(
                {k: Unbounded(shape=obs.get(k).shape[1:], device=self.device) for k in obs.keys()}, device=self.device
            )
        else:
            self.observation_spec = Unbounded(shape=obs.shape[1:], device=self.device)
        num_actions = int(getattr(self.vector_env, "num_actions", 0) or self._single_action_dim())
        low, high = options.get("action_low"), options.get("action_high")
        if low is not None and high is not None:
            self.action_spec = Bounded(low, high, shape=(num_actions,), device=self.device)
        else:
            self.action_spec = Unbounded(shape=(num_actions,), device=self.device)
        self._last_obs = obs

    def _single_action_dim(self) -> int:
        space = getattr(self.vector_env, "single_action_space", None)
        if space is None or not getattr(space, "shape", None):
            raise ValueError("TorchVectorEnv: the env has neither num_actions nor single_action_space.shape")
        return int(torch.tensor(space.shape).prod())

    @classmethod
    def factory(cls, make_env: Callable[[int, torch.device], Any] | str, **options: Any) -> type[TorchVectorEnv]:
        """An env class bound to ``make_env`` (and ``action_low`` / ``action_high``)."""
        return bound_env_class(cls, make_env, {"make_env": make_env, **options})

    def reset(self, *, config: dict[str, Any] | None = None) -> Tensor | TensorDict:
        obs, _ = self.vector_env.reset()
        self._last_obs = _as_obs(obs, self.num_envs, self.device)
        return self._last_obs

    def step(self, actions: Tensor) -> TensorDict:
        obs, rewards, terminated, truncated, info = self.vector_env.step(actions)
        B = self.num_envs
        obs = _as_obs(obs, B, self.device)
        terminated, truncated = terminated.reshape(B).bool(), truncated.reshape(B).bool()
        final = self._last_obs  # V(s_t) where the env gives no final observation
        given = next((info[k] for k in FINAL_OBS_INFO_KEYS if isinstance(info, Mapping) and info.get(k) is not None), None)
        if given is not None:
            given = _as_obs(given, B, self.device)
            final = select_rows(terminated | truncated, given, final)
        self._last_obs = obs
        return TensorDict(
            {OBS: obs, REWARDS: rewards.reshape(B, 1).float(), TERMINATED: terminated.view(B, 1),
             TRUNCATED: (truncated & ~terminated).view(B, 1), FINAL_OBS: final},
            batch_size=[B], device=self.device,
        )

