"""MountainCarContinuous with gymnasium MountainCarContinuous-v0's dynamics, batched on any device."""

from __future__ import annotations

from typing import ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Bounded

from rlx.envs._episodic import EpisodicEnv

__all__ = ["MountainCarContinuous"]


class MountainCarContinuous(EpisodicEnv):
    """Drive an underpowered car up a hill by rocking it (Moore, 1990), continuous force.

    The car moves on the curve ``height = sin(3 x)`` between x = -1.2 and x = 0.6; the
    engine alone cannot climb to the goal at x = 0.45, so the car has to swing back and
    forth to gather speed.

    * Observation ``[B, 2]`` float32: position in [-1.2, 0.6], velocity in [-0.07, 0.07].
    * Action ``[B, 1]`` float32: the force, ``Bounded`` in [-1, 1] and clipped to that
      range here too.
    * Reward: 100 on the step that reaches the goal, minus ``0.1 action²`` on every
      step, of the action as given (before clipping), as gymnasium.
    * Terminated: after the step the position is at least 0.45 and the velocity at
      least 0.
    * Truncated: the episode reaches ``max_episode_steps`` (999) steps without
      terminating; never set together with ``terminated``.
    * Reset: position uniform in [-0.6, -0.4], velocity 0. A sub-env that ends is reset
      inside ``step``: its ``obs`` is the first observation of the next episode and
      ``final_obs`` its true last observation.

    One step: the velocity changes by ``0.0015 force - 0.0025 cos(3 x)`` and is clipped
    to ±0.07; the position moves by the new velocity and is clipped to [-1.2, 0.6]; a
    car stopped by the left wall loses its (leftward) velocity, one at the right end
    keeps it. Computed in float32 on the env's device: gymnasium stores the state as
    float32 after every step too, so the two agree to about one float32 rounding.

    PPO finds the goal only by chance at first: the +100 is sparse and every push
    costs, so a policy that learns to stand still is a common local optimum. A large
    initial action noise and a long discount help (``configs/mountain_car_continuous_ppo.yaml``).
    """

    max_episode_steps: ClassVar[int] = 999

    max_force: ClassVar[float] = 1.0
    #: Velocity change per unit of force and step.
    power: ClassVar[float] = 0.0015
    #: Velocity change per step due to gravity, times ``-cos(3 x)``.
    gravity: ClassVar[float] = 0.0025
    max_speed: ClassVar[float] = 0.07
    min_position: ClassVar[float] = -1.2
    max_position: ClassVar[float] = 0.6
    goal_position: ClassVar[float] = 0.45
    goal_velocity: ClassVar[float] = 0.0
    goal_reward: ClassVar[float] = 100.0
    #: Coefficient of the ``action²`` cost.
    action_cost_coeff: ClassVar[float] = 0.1
    obs_size: ClassVar[int] = 2
    state_size: ClassVar[int] = 2  # position, velocity

    def _action_spec(self) -> Bounded:
        return Bounded(-self.max_force, self.max_force, shape=(1,), device=self.device)

    def _initial_states(self) -> torch.Tensor:
        """Draw a fresh state for every sub-env, ``[B, 2]``."""
        position = self._uniform(-0.6, -0.4)
        return torch.stack([position, torch.zeros_like(position)], dim=-1)

    def step(self, actions: torch.Tensor) -> TensorDict:
        """Push every car, end the episodes that reach the goal or time out, and reset those.

        Args:
            actions: ``[B, 1]`` (or ``[B]``) forces; values outside [-1, 1] are clipped
                for the physics but cost their full square.

        Returns:
            TensorDict with batch size ``[B]``: ``obs`` ``[B, 2]`` (the next episode's
            first observation where one ended), ``rewards`` ``[B, 1]``, ``terminated`` and
            ``truncated`` ``[B, 1]`` bool, ``final_obs`` ``[B, 2]`` (the state reached by
            this step, whether or not the episode ended).
        """
        action = actions.reshape(self.num_envs).to(self.state.dtype)
        force = action.clamp(-self.max_force, self.max_force)
        position, velocity = self.state.unbind(-1)
        # Summed before adding to the velocity, in gymnasium's order, for the same rounding.
        acceleration = force * self.power - self.gravity * torch.cos(3 * position)
        velocity = (velocity + acceleration).clamp(-self.max_speed, self.max_speed)
        position = (position + velocity).clamp(self.min_position, self.max_position)
        # The left wall is inelastic; nothing stops the car at the right end (past the goal).
        velocity = torch.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        rewards = torch.where(terminated, self.goal_reward, 0.0) - self.action_cost_coeff * action.square()
        return self._end_step(torch.stack([position, velocity], dim=-1), rewards, terminated)
