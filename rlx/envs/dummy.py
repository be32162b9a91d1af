"""rl8's dummy environments: a position on a line, pushed back towards the origin.

Both are infinite-horizon envs in rl8's protocol: ``step`` returns only ``obs`` and
``rewards``, so they also exercise rlx's support for envs without episode ends.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Categorical, Unbounded

from rlx.env import Env

__all__ = ["DiscreteDummyEnv", "ContinuousDummyEnv"]


class _DummyEnv(Env):
    """Shared state and reset of the dummy envs.

    Observation: the position, ``[B, 1]``. Reward: ``-|position|`` after the move.
    Reset: positions uniform in ``[-bounds, bounds]`` (``bounds`` 100, changeable with
    ``reset(config={"bounds": x})``, which also applies to later resets). Never
    terminates or truncates.
    """

    graph_safe: ClassVar[bool] = True

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(1,), device=self.device)
        self.bounds = 100.0
        self.state = torch.zeros(num_envs, 1, device=self.device)

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        self.bounds = float((config or {}).get("bounds", self.bounds))
        self.state = torch.empty(self.num_envs, 1, device=self.device).uniform_(-self.bounds, self.bounds)
        return self.state.clone()

    def _move(self, delta: torch.Tensor) -> TensorDict:
        self.state = self.state + delta
        return TensorDict(
            {"obs": self.state.clone(), "rewards": -self.state.abs()},
            batch_size=[self.num_envs],
            device=self.device,
        )

    def state_dict(self) -> dict[str, Any]:
        return {"state": self.state.clone(), "bounds": self.bounds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = state["state"].clone().to(self.device)
        self.bounds = float(state["bounds"])


class DiscreteDummyEnv(_DummyEnv):
    """Move one unit left (action 0) or right (action 1); actions are ``[B, 1]`` int64."""

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.action_spec = Categorical(2, shape=torch.Size([1]), device=self.device)

    def step(self, actions: torch.Tensor) -> TensorDict:
        return self._move(2.0 * actions.to(self.state.dtype) - 1.0)


class ContinuousDummyEnv(_DummyEnv):
    """Move by any real amount; actions are ``[B, 1]`` float."""

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.action_spec = Unbounded(shape=(1,), device=self.device)

    def step(self, actions: torch.Tensor) -> TensorDict:
        return self._move(actions.to(self.state.dtype))
