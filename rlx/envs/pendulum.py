"""Pendulum with gymnasium Pendulum-v1's dynamics, for a batch of sub-envs on any device."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Unbounded

from rlx.env import Env

__all__ = ["Pendulum"]


class Pendulum(Env):
    """Swing a pendulum up and keep it upright with a limited torque (Pendulum-v1 physics).

    * Observation ``[B, 3]`` float32: ``cos(theta)``, ``sin(theta)``, angular velocity
      (theta = 0 is upright).
    * Action ``[B, 1]`` float32: torque, ``Bounded`` in [-2, 2] (clipped again here).
    * Reward: ``-(angle² + 0.1 velocity² + 0.001 torque²)`` with the angle normalized to
      [-π, π), before the step; between about -16.3 and 0.
    * Terminated: never.
    * Truncated: after ``max_episode_steps`` (200) steps.
    * Reset: angle uniform in [-π, π], velocity uniform in [-1, 1]; sub-envs that end are
      reset inside ``step``, with ``final_obs`` their true last observation.
    """

    graph_safe: ClassVar[bool] = True
    max_episode_steps: ClassVar[int] = 200

    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    gravity = 10.0
    mass = 1.0
    length = 1.0

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(3,), device=self.device)
        self.action_spec = Bounded(-self.max_torque, self.max_torque, shape=(1,), device=self.device)
        self.state = torch.zeros(num_envs, 2, device=self.device)  # [theta, theta_dot]
        self.steps = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        # Made once: a host-to-device tensor per step would sync.
        self._reset_high = torch.tensor([math.pi, 1.0], device=self.device)

    def _initial_states(self) -> torch.Tensor:
        return (2.0 * torch.rand(self.num_envs, 2, device=self.device) - 1.0) * self._reset_high

    @staticmethod
    def _obs(state: torch.Tensor) -> torch.Tensor:
        theta, theta_dot = state.unbind(-1)
        return torch.stack([torch.cos(theta), torch.sin(theta), theta_dot], dim=-1)

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        self.state = self._initial_states()
        self.steps.zero_()
        return self._obs(self.state)

    def step(self, actions: torch.Tensor) -> TensorDict:
        theta, theta_dot = self.state.unbind(-1)
        u = actions.reshape(-1).to(self.state.dtype).clamp(-self.max_torque, self.max_torque)
        angle = torch.remainder(theta + math.pi, 2 * math.pi) - math.pi
        costs = angle.square() + 0.1 * theta_dot.square() + 0.001 * u.square()
        new_theta_dot = theta_dot + (
            3 * self.gravity / (2 * self.length) * torch.sin(theta) + 3.0 / (self.mass * self.length**2) * u
        ) * self.dt
        new_theta_dot = new_theta_dot.clamp(-self.max_speed, self.max_speed)
        new_state = torch.stack([theta + new_theta_dot * self.dt, new_theta_dot], dim=-1)
        self.steps += 1
        truncated = self.steps >= self.max_episode_steps
        self.state = torch.where(truncated.unsqueeze(-1), self._initial_states(), new_state)
        self.steps = torch.where(truncated, 0, self.steps)
        return TensorDict(
            {
                "obs": self._obs(self.state),
                "rewards": (-costs).unsqueeze(-1),
                "terminated": torch.zeros(self.num_envs, 1, dtype=torch.bool, device=self.device),
                "truncated": truncated.unsqueeze(-1),
                "final_obs": self._obs(new_state),
            },
            batch_size=[self.num_envs],
            device=self.device,
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"state": self.state.clone(), "steps": self.steps.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.state = state["state"].clone().to(self.device)
        self.steps = state["steps"].clone().to(self.device)
