"""Acrobot with gymnasium Acrobot-v1's dynamics, for a batch of sub-envs on any device."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Categorical

from rlx.envs._episodic import EpisodicEnv

__all__ = ["Acrobot"]


class Acrobot(EpisodicEnv):
    """Swing the tip of a two-link pendulum up to a line above the bar (Sutton, 1996).

    The first link hangs from a fixed joint; only the joint between the two links is
    actuated. Angles are measured from hanging straight down: θ1 of the first link,
    θ2 of the second link relative to the first.

    * Observation ``[B, 6]`` float32: ``cos θ1, sin θ1, cos θ2, sin θ2, θ1', θ2'``
      (rad/s), the speeds within ±4π and ±9π.
    * Action ``[B]`` int64 (``[B, 1]`` is accepted too), ``Categorical(3)``: a torque of
      -1, 0 or +1 on the middle joint.
    * Reward: -1 on every step that does not reach the goal, 0 on the step that does.
    * Terminated: after the step the tip is more than one link length above the fixed
      joint, ``-cos θ1 - cos(θ1 + θ2) > 1``.
    * Truncated: the episode reaches ``max_episode_steps`` (500) steps without
      terminating; never set together with ``terminated``.
    * Reset: θ1, θ2, θ1', θ2' uniform in [-0.1, 0.1] (drawn in float32, as gymnasium).
      A sub-env that ends is reset inside ``step``: its ``obs`` is the first
      observation of the next episode and ``final_obs`` its true last observation.

    The equations of motion are the book's (Sutton and Barto), not the NeurIPS paper's,
    integrated with one classic Runge-Kutta step of 0.2 s under a constant torque and no
    torque noise; then both angles are wrapped into [-π, π] and the speeds clipped, as
    gymnasium does.

    The state is float64 on purpose. The acrobot is chaotic and one 0.2 s RK4 step
    amplifies rounding: in float32 the speeds after one step differ from gymnasium's
    float64 integration by up to about 6e-4, far outside a 1e-5 tolerance. In float64
    the same operations as gymnasium's give the same state, so the parity is exact on
    CPU; observations are rounded to float32 as gymnasium's are. Float64 costs little
    here (a few hundred flops per sub-env and step) but is slow on GPUs without
    float64 throughput.
    """

    max_episode_steps: ClassVar[int] = 500

    #: Integration step, in seconds.
    dt: ClassVar[float] = 0.2
    gravity: ClassVar[float] = 9.8
    #: Length of the first link, in m (the second link's length never enters the dynamics).
    link_length_1: ClassVar[float] = 1.0
    link_mass_1: ClassVar[float] = 1.0
    link_mass_2: ClassVar[float] = 1.0
    #: Distance from each link's joint to its centre of mass, in m.
    link_com_1: ClassVar[float] = 0.5
    link_com_2: ClassVar[float] = 0.5
    #: Moment of inertia of either link.
    link_moi: ClassVar[float] = 1.0
    max_vel_1: ClassVar[float] = 4 * math.pi
    max_vel_2: ClassVar[float] = 9 * math.pi
    #: Half-width of the uniform reset interval of every state variable.
    reset_bound: ClassVar[float] = 0.1
    obs_size: ClassVar[int] = 6
    state_size: ClassVar[int] = 4  # theta1, theta2, theta1_dot, theta2_dot
    state_dtype: ClassVar[torch.dtype] = torch.float64

    def _action_spec(self) -> Categorical:
        return Categorical(3, device=self.device)

    def _initial_states(self) -> torch.Tensor:
        """Draw a fresh state for every sub-env, ``[B, 4]`` float64."""
        draw = self._uniform(-self.reset_bound, self.reset_bound, 4)
        return draw.double()

    def _obs(self, state: torch.Tensor) -> torch.Tensor:
        """Observe ``[B, 4]`` states as ``[B, 6]`` float32 (cos, sin of both angles; speeds)."""
        theta1, theta2, theta1_dot, theta2_dot = state.unbind(-1)
        obs = torch.stack(
            [torch.cos(theta1), torch.sin(theta1), torch.cos(theta2), torch.sin(theta2), theta1_dot, theta2_dot], dim=-1
        )
        return obs.float()

    def _derivatives(self, state: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
        """Time derivative of ``[B, 4]`` states under ``[B]`` torques (the book's equations).

        Returns:
            ``[B, 4]``: θ1', θ2', θ1'', θ2''.
        """
        m1, m2 = self.link_mass_1, self.link_mass_2
        l1, lc1, lc2 = self.link_length_1, self.link_com_1, self.link_com_2
        inertia, g = self.link_moi, self.gravity
        theta1, theta2, theta1_dot, theta2_dot = state.unbind(-1)
        cos2, sin2 = torch.cos(theta2), torch.sin(theta2)
        # Entries of the mass matrix, then the gravity and Coriolis terms.
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos2) + inertia + inertia
        d2 = m2 * (lc2**2 + l1 * lc2 * cos2) + inertia
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * theta2_dot**2 * sin2
            - 2 * m2 * l1 * lc2 * theta2_dot * theta1_dot * sin2
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2)
            + phi2
        )
        # The book's θ2'' keeps the θ1'² term that the NeurIPS paper's version drops.
        theta2_acc = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * theta1_dot**2 * sin2 - phi2) / (
            m2 * lc2**2 + inertia - d2**2 / d1
        )
        theta1_acc = -(d2 * theta2_acc + phi1) / d1
        return torch.stack([theta1_dot, theta2_dot, theta1_acc, theta2_acc], dim=-1)

    def _next_states(self, state: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
        """One RK4 step of ``dt`` from ``[B, 4]`` states, then wrap the angles and clip the speeds."""
        h = self.dt
        k1 = self._derivatives(state, torque)
        k2 = self._derivatives(state + h / 2.0 * k1, torque)
        k3 = self._derivatives(state + h / 2.0 * k2, torque)
        k4 = self._derivatives(state + h * k3, torque)
        new_state = state + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        theta1, theta2, theta1_dot, theta2_dot = new_state.unbind(-1)
        return torch.stack(
            [
                _wrap_angle(theta1),
                _wrap_angle(theta2),
                theta1_dot.clamp(-self.max_vel_1, self.max_vel_1),
                theta2_dot.clamp(-self.max_vel_2, self.max_vel_2),
            ],
            dim=-1,
        )

    def step(self, actions: torch.Tensor) -> TensorDict:
        """Apply a torque at every middle joint, end the episodes that reach the goal or time out.

        Args:
            actions: ``[B]`` or ``[B, 1]`` integer actions: 0, 1, 2 for a torque of -1, 0, +1.

        Returns:
            TensorDict with batch size ``[B]``: ``obs`` ``[B, 6]`` (the next episode's
            first observation where one ended), ``rewards`` ``[B, 1]``, ``terminated`` and
            ``truncated`` ``[B, 1]`` bool, ``final_obs`` ``[B, 6]`` (the observation reached
            by this step, whether or not the episode ended).
        """
        torque = actions.reshape(self.num_envs).to(self.state.dtype) - 1.0
        new_state = self._next_states(self.state, torque)
        theta1, theta2 = new_state[:, 0], new_state[:, 1]
        tip_height = -torch.cos(theta1) - torch.cos(theta2 + theta1)
        terminated = tip_height > 1.0
        rewards = torch.where(terminated, 0.0, -1.0)
        return self._end_step(new_state, rewards, terminated)


def _wrap_angle(angle: torch.Tensor) -> torch.Tensor:
    """Shift angles by whole turns into [-π, π], keeping both ends as they are.

    gymnasium subtracts (or adds) 2π in a loop while the angle is outside; here the
    number of turns is computed at once, with no data-dependent loop. For one turn, the
    usual case, it is the very same subtraction; over several turns the result can
    differ from the loop's in the last bits.
    """
    turns_down = torch.ceil((angle - math.pi) / (2 * math.pi)).clamp(min=0)
    turns_up = torch.ceil((-math.pi - angle) / (2 * math.pi)).clamp(min=0)
    return angle - 2 * math.pi * turns_down + 2 * math.pi * turns_up
