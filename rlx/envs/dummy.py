"""rl8's dummy environments: a position on a line that the agent should keep near zero.

Both are infinite-horizon envs in rl8's protocol: ``step`` returns only ``obs`` and
``rewards``, never ``terminated`` or ``truncated``, so they also exercise rlx's support
for envs without episode ends. They differ only in their actions; otherwise:

* Observation ``[B, 1]`` float32: the position.
* Reward: ``-|position|`` after the move, ``[B, 1]``.
* Terminated / truncated: never (infinite horizon; neither key is returned).
* Reset: position uniform in ``[-bounds, bounds]``, ``bounds`` 100 unless
  ``reset(config={"bounds": x})`` sets another value, kept for later resets.

Both take the env constructor's arguments: ``num_envs`` (``B``), ``horizon`` (unused) and
``device`` (of the state and of every returned tensor).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Categorical, TensorSpec, Unbounded

from rlx.env import Env, load_state_tensors

__all__ = ["DiscreteDummyEnv", "ContinuousDummyEnv"]


class _DummyEnv(Env):
    """State, reset and checkpointing shared by the two dummy envs.

    Subclasses implement :meth:`_action_spec` and turn actions into a displacement in
    ``step``.
    """

    graph_safe: ClassVar[bool] = True
    #: Half-width of the reset interval until ``reset(config={"bounds": x})`` changes it.
    default_bounds: ClassVar[float] = 100.0

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(1,), device=self.device)
        self.action_spec = self._action_spec()
        # A Python float, not a tensor: ``uniform_`` takes it without a device read.
        self.bounds = self.default_bounds
        # Updated in place so that its address never changes (CUDA-graph replay reads it).
        self.state = torch.zeros(num_envs, 1, device=self.device)

    @abstractmethod
    def _action_spec(self) -> TensorSpec:
        """Spec of one sub-env's action, on the env's device."""

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        """Draw every position uniformly in ``[-bounds, bounds]``.

        Args:
            config: Optional ``{"bounds": x}``; the new bounds also apply to later resets.

        Returns:
            The positions, ``[B, 1]`` float32.
        """
        if config is not None and "bounds" in config:
            self.bounds = float(config["bounds"])
        self.state.uniform_(-self.bounds, self.bounds)
        return self.state.clone()

    def _move(self, displacement: torch.Tensor) -> TensorDict:
        """Shift every position by ``displacement`` ``[B, 1]`` and score the new position."""
        self.state.add_(displacement)
        return TensorDict(
            {"obs": self.state.clone(), "rewards": -self.state.abs()},
            batch_size=[self.num_envs],
            device=self.device,
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Return the positions ``[B, 1]`` and the reset bounds (a 0-d tensor), cloned."""
        return {"state": self.state.clone(), "bounds": torch.tensor(self.bounds, dtype=torch.float64)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore what :meth:`state_dict` returned (from an env with the same ``num_envs``)."""
        load_state_tensors(self, state, ("state",))
        self.bounds = float(state["bounds"])


class DiscreteDummyEnv(_DummyEnv):
    """Step one unit left or right along a line; rl8's ``DiscreteDummyEnv``.

    * Action ``[B, 1]`` int64, ``Categorical(2)``: 0 moves by -1, 1 moves by +1
      (``position += 2 * action - 1``).

    Observation, reward, reset and constructor: see the module docstring.
    """

    def _action_spec(self) -> Categorical:
        return Categorical(2, shape=torch.Size([1]), device=self.device)

    def step(self, actions: torch.Tensor) -> TensorDict:
        """Move every sub-env; ``actions`` is ``[B, 1]`` (or ``[B]``) with values in {0, 1}."""
        actions = actions.reshape(self.num_envs, 1).to(self.state.dtype)
        return self._move(2.0 * actions - 1.0)


class ContinuousDummyEnv(_DummyEnv):
    """Move any distance along a line; rl8's ``ContinuousDummyEnv``.

    * Action ``[B, 1]`` float, ``Unbounded``: the displacement (``position += action``).

    Observation, reward, reset and constructor: see the module docstring.
    """

    def _action_spec(self) -> Unbounded:
        return Unbounded(shape=(1,), device=self.device)

    def step(self, actions: torch.Tensor) -> TensorDict:
        """Move every sub-env by its action, ``[B, 1]``."""
        return self._move(actions.reshape(self.num_envs, 1).to(self.state.dtype))
