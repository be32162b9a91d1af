"""Pendulum with gymnasium Pendulum-v1's dynamics, for a batch of sub-envs on any device."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Bounded

from rlx.envs._episodic import EpisodicEnv

__all__ = ["Pendulum"]


class Pendulum(EpisodicEnv):
    """Swing a pendulum up and hold it upright with a limited torque (Pendulum-v1 physics).

    * Observation ``[B, 3]`` float32: ``cos(theta)``, ``sin(theta)``, angular velocity
      ``theta_dot`` (rad/s); theta = 0 is upright.
    * Action ``[B, 1]`` float32: the torque, ``Bounded`` in [-2, 2] and clipped to that
      range here too.
    * Reward: ``-(angle² + 0.1 theta_dot² + 0.001 torque²)`` of the state BEFORE the
      step, with the angle wrapped to [-π, π) and the clipped torque; in about
      [-16.27, 0].
    * Terminated: never (returned, all False).
    * Truncated: after ``max_episode_steps`` (200) steps.
    * Reset: theta uniform in [-π, π], theta_dot uniform in [-1, 1]. A sub-env that ends
      is reset inside ``step``: its ``obs`` is the first observation of the next episode
      and ``final_obs`` its true last observation.

    Semi-implicit Euler with a 0.05 s step and the speed clipped to ±8 rad/s, as
    gymnasium; computed in float32 on the env's device.
    """

    max_episode_steps: ClassVar[int] = 200

    max_speed: ClassVar[float] = 8.0
    max_torque: ClassVar[float] = 2.0
    #: Integration step, in seconds.
    dt: ClassVar[float] = 0.05
    gravity: ClassVar[float] = 10.0
    mass: ClassVar[float] = 1.0
    length: ClassVar[float] = 1.0
    obs_size: ClassVar[int] = 3
    state_size: ClassVar[int] = 2  # theta, theta_dot

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(num_envs, horizon, device=device)
        # Made once: building it from Python numbers inside ``step`` would be a
        # host-to-device copy on every step.
        self._reset_high = torch.tensor([math.pi, 1.0], device=self.device)

    def _action_spec(self) -> Bounded:
        return Bounded(-self.max_torque, self.max_torque, shape=(1,), device=self.device)

    def _initial_states(self) -> torch.Tensor:
        """Draw a fresh state for every sub-env, ``[B, 2]``."""
        return self._uniform(-1.0, 1.0, 2) * self._reset_high

    def _obs(self, state: torch.Tensor) -> torch.Tensor:
        """Observe ``[B, 2]`` states as ``[B, 3]`` (cos theta, sin theta, theta_dot)."""
        theta, theta_dot = state.unbind(-1)
        return torch.stack([torch.cos(theta), torch.sin(theta), theta_dot], dim=-1)

    def step(self, actions: torch.Tensor) -> TensorDict:
        """Apply a torque to every pendulum, and reset those that reach the time limit.

        Args:
            actions: ``[B, 1]`` torques; values outside [-2, 2] are clipped.

        Returns:
            TensorDict with batch size ``[B]``: ``obs`` ``[B, 3]`` (the next episode's
            first observation where one ended), ``rewards`` ``[B, 1]``, ``terminated``
            (all False) and ``truncated`` ``[B, 1]`` bool, ``final_obs`` ``[B, 3]`` (the
            observation reached by this step, whether or not the episode ended).
        """
        theta, theta_dot = self.state.unbind(-1)
        torque = actions.reshape(self.num_envs).to(self.state.dtype).clamp(-self.max_torque, self.max_torque)
        # Wrapped to [-π, π) so that a pendulum that has turned over is not penalised for
        # the full turns; ``remainder`` takes the divisor's sign, like Python's ``%``.
        angle = torch.remainder(theta + math.pi, 2 * math.pi) - math.pi
        costs = angle.square() + 0.1 * theta_dot.square() + 0.001 * torque.square()
        angular_acc = 3 * self.gravity / (2 * self.length) * torch.sin(theta) + 3.0 / (
            self.mass * self.length**2
        ) * torque
        new_theta_dot = (theta_dot + angular_acc * self.dt).clamp(-self.max_speed, self.max_speed)
        # Semi-implicit: the angle advances with the NEW (clipped) speed.
        new_state = torch.stack([theta + new_theta_dot * self.dt, new_theta_dot], dim=-1)
        return self._end_step(new_state, -costs, torch.zeros_like(torque, dtype=torch.bool))
