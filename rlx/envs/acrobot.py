"""Acrobot with gymnasium Acrobot-v1's dynamics, for a batch of sub-envs on any device."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Categorical, Unbounded

from rlx.envs._episodic import EpisodicEnv

__all__ = ["Acrobot"]


def _wrap(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Shift ``x`` by whole turns into ``[low, high]`` (``high`` itself is kept, as gymnasium)."""
    span = high - low
    above = torch.ceil((x - high) / span).clamp(min=0)
    below = torch.ceil((low - x) / span).clamp(min=0)
    return x - span * above + span * below


class Acrobot(EpisodicEnv):
    """Swing the tip of a two-link pendulum above the bar (Sutton and Barto's acrobot).

    * Observation ``[B, 6]`` float32: ``cos θ1, sin θ1, cos θ2, sin θ2, θ1', θ2'``.
    * Action ``[B]`` int64 (``[B, 1]`` accepted): torque -1, 0 or +1 on the middle joint.
    * Reward: -1 per step, 0 on the step that reaches the goal.
    * Terminated: ``-cos θ1 - cos(θ1 + θ2) > 1`` (the tip is one link length above the bar).
    * Truncated: after ``max_episode_steps`` (500) steps without terminating.
    * Reset: all four state variables uniform in [-0.1, 0.1]; finished sub-envs are reset
      inside ``step``, with ``final_obs`` their true last observation.

    Dynamics as gymnasium's "book" variant: one RK4 step of 0.2 s, angles wrapped to
    [-π, π], velocities bounded by 4π and 9π, no torque noise. The state is kept in
    float64 (as gymnasium's integrator) so that the parity holds to 1e-5 over long
    rollouts; observations are float32.
    """

    graph_safe: ClassVar[bool] = True
    max_episode_steps: ClassVar[int] = 500
    dt: ClassVar[float] = 0.2
    max_vel_1: ClassVar[float] = 4 * math.pi
    max_vel_2: ClassVar[float] = 9 * math.pi

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(6,), device=self.device)
        self.action_spec = Categorical(3, device=self.device)
        #: ``[B, 4]`` float64: θ1, θ2, θ1', θ2'.
        self._allocate_state(4, torch.float64)

    def _initial_states(self) -> torch.Tensor:
        return torch.empty(self.num_envs, 4, dtype=torch.float64, device=self.device).uniform_(-0.1, 0.1)

    def _obs(self, s: torch.Tensor) -> torch.Tensor:
        return torch.stack(
            [torch.cos(s[:, 0]), torch.sin(s[:, 0]), torch.cos(s[:, 1]), torch.sin(s[:, 1]), s[:, 2], s[:, 3]], -1
        ).float()

    @staticmethod
    def _derivs(s: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
        m1 = m2 = l1 = 1.0
        lc1 = lc2 = 0.5
        i1 = i2 = 1.0
        g = 9.8
        theta1, theta2, dtheta1, dtheta2 = s.unbind(-1)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta2)) + i1 + i2
        d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta2)) + i2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * torch.sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * torch.sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2)
            + phi2
        )
        ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * torch.sin(theta2) - phi2) / (
            m2 * lc2**2 + i2 - d2**2 / d1
        )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack([dtheta1, dtheta2, ddtheta1, ddtheta2], -1)

    def step(self, actions: torch.Tensor) -> TensorDict:
        torque = actions.reshape(self.num_envs).to(torch.float64) - 1.0  # {0, 1, 2} -> {-1, 0, +1}
        s, h = self.state, self.dt
        k1 = self._derivs(s, torque)
        k2 = self._derivs(s + h / 2 * k1, torque)
        k3 = self._derivs(s + h / 2 * k2, torque)
        k4 = self._derivs(s + h * k3, torque)
        ns = s + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        ns = torch.stack(
            [
                _wrap(ns[:, 0], -math.pi, math.pi),
                _wrap(ns[:, 1], -math.pi, math.pi),
                ns[:, 2].clamp(-self.max_vel_1, self.max_vel_1),
                ns[:, 3].clamp(-self.max_vel_2, self.max_vel_2),
            ],
            -1,
        )
        terminated = -torch.cos(ns[:, 0]) - torch.cos(ns[:, 1] + ns[:, 0]) > 1.0
        return self._end_step(ns, torch.where(terminated, 0.0, -1.0), terminated)
