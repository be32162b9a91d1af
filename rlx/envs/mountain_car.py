"""MountainCarContinuous with gymnasium MountainCarContinuous-v0's dynamics, batched on any device."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Unbounded

from rlx.envs._episodic import EpisodicEnv

__all__ = ["MountainCarContinuous"]


class MountainCarContinuous(EpisodicEnv):
    """Drive an underpowered car up a hill by rocking it (Moore, 1990), continuous force.

    * Observation ``[B, 2]`` float32: position in [-1.2, 0.6], velocity in [-0.07, 0.07].
    * Action ``[B, 1]`` float32: force, ``Bounded`` in [-1, 1] (clipped again here).
    * Reward: 100 on reaching the goal, minus ``0.1 * action²`` every step (of the action
      as given, before clipping, as gymnasium).
    * Terminated: position >= 0.45 with velocity >= 0.
    * Truncated: after ``max_episode_steps`` (999) steps without terminating.
    * Reset: position uniform in [-0.6, -0.4], velocity 0; finished sub-envs are reset
      inside ``step``, with ``final_obs`` their true last observation.

    Exploration is the hard part: the goal bonus is only seen by reaching it.
    """

    graph_safe: ClassVar[bool] = True
    max_episode_steps: ClassVar[int] = 999
    power: ClassVar[float] = 0.0015
    max_speed: ClassVar[float] = 0.07
    min_position: ClassVar[float] = -1.2
    max_position: ClassVar[float] = 0.6
    goal_position: ClassVar[float] = 0.45
    goal_velocity: ClassVar[float] = 0.0

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(2,), device=self.device)
        self.action_spec = Bounded(-1.0, 1.0, shape=(1,), device=self.device)
        #: ``[B, 2]`` float32: position, velocity.
        self._allocate_state(2)

    def _initial_states(self) -> torch.Tensor:
        position = torch.empty(self.num_envs, device=self.device).uniform_(-0.6, -0.4)
        return torch.stack([position, torch.zeros_like(position)], -1)

    def step(self, actions: torch.Tensor) -> TensorDict:
        action = actions.reshape(self.num_envs).to(self.state.dtype)
        force = action.clamp(-1.0, 1.0)
        position, velocity = self.state.unbind(-1)
        velocity = (velocity + force * self.power - 0.0025 * torch.cos(3 * position)).clamp(-self.max_speed, self.max_speed)
        position = (position + velocity).clamp(self.min_position, self.max_position)
        velocity = torch.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        rewards = torch.where(terminated, 100.0, 0.0) - 0.1 * action.square()
        return self._end_step(torch.stack([position, velocity], -1), rewards, terminated)
