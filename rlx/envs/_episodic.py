"""The shared machinery of the built-in episodic envs: time limit, auto-reset, state."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import TensorSpec, Unbounded

from rlx.env import Env, load_state_tensors

__all__ = ["FUSED_DRAWS", "EpisodicEnv"]

#: Device types whose compiled programs draw fresh states as ``low + (high - low) * rand``
#: (:meth:`EpisodicEnv._uniform`), which inductor fuses into the env step's kernel where
#: it runs ``uniform_`` as a kernel of its own: on CUDA a launch an env step (a compiled
#: collect at vs_jax.py's B = 4096: 444 launches against 476, counted with
#: ``benchmarks/experiments/cuda_launches.py``). Not a CPU's: inductor's C++ draws each
#: number alone, and a compiled collect of CartPole at B = 1024 ran 1.2x slower with them
#: (2026-11-29, interleaved in one process).
FUSED_DRAWS = ("cuda",)


class EpisodicEnv(Env):
    """A batch of sub-envs with a ``[B, S]`` state, a step counter and a time limit.

    Subclasses set :attr:`max_episode_steps`, :attr:`obs_size`, :attr:`state_size` (and
    :attr:`state_dtype`), and implement :meth:`_action_spec`, :meth:`_initial_states`
    (fresh ``[B, S]`` states) and ``step``, which computes the next states, rewards and
    terminal flags and returns :meth:`_end_step`. That handles the time limit
    (``truncated`` never set together with ``terminated``), the auto-reset and the
    output TensorDict. Every sub-env draws a reset state on every step, used or not, so
    a step has the same shapes and RNG consumption whatever ends: no data-dependent
    control flow, and the buffers are updated in place, so a captured CUDA graph keeps
    reading the live state.

    Args:
        num_envs: Number of sub-envs ``B``.
        horizon: Unused; part of the env constructor protocol.
        device: Device of the state and of every returned tensor.
    """

    graph_safe: ClassVar[bool] = True
    #: Time limit of an episode, in steps.
    max_episode_steps: ClassVar[int]
    #: ``D``: one sub-env's observation is ``[D]`` float32 (``observation_spec``).
    obs_size: ClassVar[int]
    #: ``S``: one sub-env's state is ``[S]`` of :attr:`state_dtype`.
    state_size: ClassVar[int]
    state_dtype: ClassVar[torch.dtype] = torch.float32

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(self.obs_size,), device=self.device)
        self.action_spec = self._action_spec()
        #: ``[B, S]`` simulator state.
        self.state = torch.zeros(self.num_envs, self.state_size, dtype=self.state_dtype, device=self.device)
        #: ``[B]`` int64: steps taken in each sub-env's current episode.
        self.steps = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)

    @abstractmethod
    def _action_spec(self) -> TensorSpec:
        """Spec of one sub-env's action, on the env's device."""

    @abstractmethod
    def _initial_states(self) -> torch.Tensor:
        """Fresh states for every sub-env, ``[B, S]``."""

    def _uniform(self, low: float, high: float, *shape: int) -> torch.Tensor:
        """``[B, *shape]`` float32 draws from ``U(low, high)`` for fresh states: ``uniform_``
        (torch's generator), or in a compiled program on a device of :data:`FUSED_DRAWS`
        (``compile``'s T loop on CUDA, whose actions come from inductor's generator
        anyway) ``low + (high - low) * rand``, fused into the step's kernel."""
        size = (self.num_envs, *shape)
        if torch.compiler.is_compiling() and self.device.type in FUSED_DRAWS:
            draws = torch.rand(size, device=self.device)
            return torch.full(size, low, device=self.device).add_(draws, alpha=high - low)
        return torch.empty(size, device=self.device).uniform_(low, high)

    def _obs(self, state: torch.Tensor) -> torch.Tensor:
        """Observations of ``[B, S]`` states (default: the state itself, as float32)."""
        return state.float().clone()

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        """Start a new episode in every sub-env; ``config`` is accepted and unused."""
        self.state.copy_(self._initial_states())
        self.steps.zero_()
        return self._obs(self.state)

    def _end_step(self, new_state: torch.Tensor, rewards: torch.Tensor, terminated: torch.Tensor) -> TensorDict:
        """Apply the time limit and auto-reset, and build ``step``'s output.

        Args:
            new_state: ``[B, S]`` states reached by this step.
            rewards: ``[B]`` rewards of this step.
            terminated: ``[B]`` bool, the new state is terminal.
        """
        steps = self.steps.add_(1)  # in place, as the state below: a graph reads the live buffers
        truncated = (steps >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        final_obs = self._obs(new_state)
        torch.where(done.unsqueeze(-1), self._initial_states(), new_state, out=self.state)
        steps.masked_fill_(done, 0)
        return TensorDict(
            {
                "obs": self._obs(self.state),
                "rewards": rewards.float().unsqueeze(-1),
                "terminated": terminated.unsqueeze(-1),
                "truncated": truncated.unsqueeze(-1),
                "final_obs": final_obs,
            },
            batch_size=[self.num_envs],
            device=self.device,
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The simulator state: ``state`` ``[B, S]`` and ``steps`` ``[B]``, cloned."""
        return {"state": self.state.clone(), "steps": self.steps.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore what :meth:`state_dict` returned (from an env with the same ``num_envs``)."""
        cast = {k: v.to(getattr(self, k).dtype) for k, v in state.items() if k in ("state", "steps")}
        load_state_tensors(self, cast, ("state", "steps"))
