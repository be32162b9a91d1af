"""PointMass: a 2-D point mass reaching a random goal, all on the device (no gymnasium twin)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Unbounded

from rlx.envs._episodic import EpisodicEnv

__all__ = ["PointMass"]


class PointMass(EpisodicEnv):
    """Push a point mass in the square [-1, 1]² to a goal drawn per sub-env at each reset.

    The fast default for continuous-control benchmarks: per-env physics, goals and
    rewards are a handful of tensor ops over ``[B, 2]``, on any device, CUDA-graph safe.

    * Observation ``[B, 6]`` float32: position ``p``, velocity ``v``, and ``g - p`` (the
      goal relative to the mass).
    * Action ``[B, 2]`` float32: force, ``Bounded`` in [-1, 1]² (clipped again here).
    * Dynamics (dt = 0.1): ``v <- 0.9 v + dt * a``, speed capped at 1 per axis;
      ``p <- clip(p + dt * v, -1, 1)``, with the velocity component into a wall zeroed.
    * Reward: ``-|g - p| - 0.01 |a|²`` after the move (dense; about -3 to 0 per step),
      plus 10 on the step that reaches the goal.
    * Terminated: ``|g - p| < 0.05`` (the goal is reached).
    * Truncated: after ``max_episode_steps`` (200) steps.
    * Reset: ``p`` uniform in [-1, 1]², ``v = 0``, ``g`` uniform in [-0.8, 0.8]².
    """

    graph_safe: ClassVar[bool] = True
    max_episode_steps: ClassVar[int] = 200
    dt: ClassVar[float] = 0.1
    damping: ClassVar[float] = 0.9
    goal_radius: ClassVar[float] = 0.05
    goal_bonus: ClassVar[float] = 10.0

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(6,), device=self.device)
        self.action_spec = Bounded(-1.0, 1.0, shape=(2,), device=self.device)
        #: ``[B, 6]`` float32: position (2), velocity (2), goal (2).
        self._allocate_state(6)

    def _initial_states(self) -> torch.Tensor:
        position = torch.empty(self.num_envs, 2, device=self.device).uniform_(-1.0, 1.0)
        goal = torch.empty(self.num_envs, 2, device=self.device).uniform_(-0.8, 0.8)
        return torch.cat([position, torch.zeros_like(position), goal], -1)

    def _obs(self, state: torch.Tensor) -> torch.Tensor:
        p, v, g = state.split(2, dim=-1)
        return torch.cat([p, v, g - p], -1)

    def step(self, actions: torch.Tensor) -> TensorDict:
        force = actions.reshape(self.num_envs, 2).to(self.state.dtype).clamp(-1.0, 1.0)
        p, v, g = self.state.split(2, dim=-1)
        v = (self.damping * v + self.dt * force).clamp(-1.0, 1.0)
        moved = p + self.dt * v
        p = moved.clamp(-1.0, 1.0)
        v = torch.where(moved != p, 0.0, v)  # the component pressed into a wall stops
        distance = (g - p).norm(dim=-1)
        terminated = distance < self.goal_radius
        rewards = -distance - 0.01 * force.square().sum(-1) + self.goal_bonus * terminated.float()
        return self._end_step(torch.cat([p, v, g], -1), rewards, terminated)
