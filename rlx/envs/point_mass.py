"""PointMass: a 2-D point mass reaching a random goal, all on the device (no gymnasium twin)."""

from __future__ import annotations

from typing import ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Bounded

from rlx.envs._episodic import EpisodicEnv

__all__ = ["PointMass"]


class PointMass(EpisodicEnv):
    """Push a point mass in the square [-1, 1]² to a goal drawn per sub-env at each reset.

    The fast default for continuous-control benchmarks: physics, goals and rewards are a
    handful of elementwise ops on ``[B, 2]`` tensors, on any device, with no host sync
    (CUDA-graph safe). Every sub-env has its own goal, redrawn whenever it resets, so a
    policy has to read the goal from the observation.

    * Observation ``[B, 6]`` float32: position ``p``, velocity ``v``, and ``g - p``, the
      goal relative to the mass.
    * Action ``[B, 2]`` float32: the force ``a``, ``Bounded`` in [-1, 1]² and clipped to
      that box here too.
    * Dynamics, with ``dt = 0.1``: ``v <- clip(0.9 v + dt a, -1, 1)`` (damped: under a
      constant full force the speed settles at 1 per axis, the clip only binds on a
      loaded state), then ``p <- clip(p + dt v, -1, 1)``; the velocity component that
      pushed into a wall is zeroed, the other one kept.
    * Reward: ``-|g - p| - 0.01 |a|²`` with the position after the move and the clipped
      force (about -2.6 to 0 per step), plus a bonus of 10 on the step that reaches the
      goal. The distance term alone would already make ending sooner better; the bonus
      makes reaching the goal worth more than hovering just outside it.
    * Terminated: ``|g - p| < 0.05`` after the move.
    * Truncated: the episode reaches ``max_episode_steps`` (200) steps without
      terminating; never set together with ``terminated``.
    * Reset: ``p`` uniform in [-1, 1]², ``v = 0``, ``g`` uniform in [-0.8, 0.8]². A
      sub-env that ends is reset inside ``step`` (its goal too): its ``obs`` is the first
      observation of the next episode and ``final_obs`` its true last observation.

    A random policy scores about -190 per episode (it almost never reaches the goal);
    a hand-tuned proportional-derivative controller, ``a = clip(10 (g - p) - 3 v)``,
    reaches every goal in about 16 steps and scores about +0.3.
    """

    max_episode_steps: ClassVar[int] = 200

    #: Integration step.
    dt: ClassVar[float] = 0.1
    #: Fraction of the velocity kept from one step to the next.
    damping: ClassVar[float] = 0.9
    max_speed: ClassVar[float] = 1.0
    #: Half-width of the square the goals are drawn from.
    goal_bound: ClassVar[float] = 0.8
    goal_radius: ClassVar[float] = 0.05
    goal_bonus: ClassVar[float] = 10.0
    #: Coefficient of the ``|a|²`` cost.
    action_cost_coeff: ClassVar[float] = 0.01
    obs_size: ClassVar[int] = 6
    # The goal is part of the state, so ``state_dict`` checkpoints it with the rest.
    state_size: ClassVar[int] = 6  # position (2), velocity (2), goal (2)

    def _action_spec(self) -> Bounded:
        return Bounded(-1.0, 1.0, shape=(2,), device=self.device)

    def _initial_states(self) -> torch.Tensor:
        """Draw a fresh state and goal for every sub-env, ``[B, 6]``."""
        position = torch.empty(self.num_envs, 2, device=self.device).uniform_(-1.0, 1.0)
        goal = torch.empty(self.num_envs, 2, device=self.device).uniform_(-self.goal_bound, self.goal_bound)
        return torch.cat([position, torch.zeros_like(position), goal], dim=-1)

    def _obs(self, state: torch.Tensor) -> torch.Tensor:
        """Observe ``[B, 6]`` states (p, v, g) as ``[B, 6]`` (p, v, g - p)."""
        position, velocity, goal = state.split(2, dim=-1)
        return torch.cat([position, velocity, goal - position], dim=-1)

    def step(self, actions: torch.Tensor) -> TensorDict:
        """Push every mass, end the episodes that reach their goal or time out, and reset those.

        Args:
            actions: ``[B, 2]`` forces; values outside [-1, 1] are clipped.

        Returns:
            TensorDict with batch size ``[B]``: ``obs`` ``[B, 6]`` (the next episode's
            first observation where one ended), ``rewards`` ``[B, 1]``, ``terminated`` and
            ``truncated`` ``[B, 1]`` bool, ``final_obs`` ``[B, 6]`` (the observation
            reached by this step, whether or not the episode ended).
        """
        force = actions.reshape(self.num_envs, 2).to(self.state.dtype).clamp(-1.0, 1.0)
        position, velocity, goal = self.state.split(2, dim=-1)
        velocity = (self.damping * velocity + self.dt * force).clamp(-self.max_speed, self.max_speed)
        moved = position + self.dt * velocity
        position = moved.clamp(-1.0, 1.0)
        velocity = torch.where(moved != position, 0.0, velocity)  # the component stopped by a wall
        distance = torch.linalg.vector_norm(goal - position, dim=-1)
        terminated = distance < self.goal_radius
        rewards = (
            -distance
            - self.action_cost_coeff * force.square().sum(-1)
            + torch.where(terminated, self.goal_bonus, 0.0)
        )
        return self._end_step(torch.cat([position, velocity, goal], dim=-1), rewards, terminated)
