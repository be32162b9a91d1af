"""CartPole with gymnasium CartPole-v1's dynamics, for a batch of sub-envs on any device."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Categorical

from rlx.envs._episodic import EpisodicEnv

__all__ = ["CartPole", "CartPoleNoVelocity"]


class CartPole(EpisodicEnv):
    """Balance a pole on a cart (Barto, Sutton and Anderson, 1983), CartPole-v1 physics.

    * Observation ``[B, 4]`` float32: cart position (m), cart velocity (m/s), pole angle
      (rad, 0 is upright), pole angular velocity (rad/s).
    * Action ``[B]`` int64 (``[B, 1]`` is accepted too), ``Categorical(2)``: 0 pushes the
      cart left, 1 pushes it right, with a force of 10 N.
    * Reward: 1.0 on every step, the terminating step included (gymnasium's default,
      ``sutton_barto_reward=False``).
    * Terminated: after the step the cart is outside ``[-2.4, 2.4]`` or the pole is
      tilted more than 12 degrees either way.
    * Truncated: the episode reaches ``max_episode_steps`` (500) steps without
      terminating; never set together with ``terminated``.
    * Reset: the four state variables uniform in ``[-0.05, 0.05]``. A sub-env that ends
      is reset inside ``step``: its ``obs`` is the first observation of the next episode
      and ``final_obs`` its true last observation.

    The physics is gymnasium's ``"euler"`` integrator with a 0.02 s step, computed in
    float32 on the env's device, so it matches gymnasium's float64 simulation to about
    1e-6 per step.
    """

    max_episode_steps: ClassVar[int] = 500

    gravity: ClassVar[float] = 9.8
    cart_mass: ClassVar[float] = 1.0
    pole_mass: ClassVar[float] = 0.1
    #: Half the pole's length, as in the original code.
    pole_half_length: ClassVar[float] = 0.5
    force_mag: ClassVar[float] = 10.0
    #: Integration step, in seconds.
    tau: ClassVar[float] = 0.02
    x_threshold: ClassVar[float] = 2.4
    theta_threshold: ClassVar[float] = 12 * 2 * math.pi / 360
    #: Half-width of the uniform reset interval of every state variable.
    reset_bound: ClassVar[float] = 0.05
    obs_size: ClassVar[int] = 4
    state_size: ClassVar[int] = 4  # x, x_dot, theta, theta_dot

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(num_envs, horizon, device=device)
        # Both thresholds round UP to float32 (2.4 becomes 2.4000001), so comparing a float32
        # state with them would call a cart at 2.4000001 inside where gymnasium's float64
        # test calls it outside. Against the largest float32 at or below each threshold,
        # ``v > limit`` holds for a float32 ``v`` exactly when ``v > threshold`` does.
        self._x_limit = _float32_at_or_below(self.x_threshold)
        self._theta_limit = _float32_at_or_below(self.theta_threshold)

    def _action_spec(self) -> Categorical:
        return Categorical(2, device=self.device)

    def _initial_states(self) -> torch.Tensor:
        """Draw a fresh state for every sub-env, ``[B, 4]``."""
        return self._uniform(-self.reset_bound, self.reset_bound, 4)

    def _next_states(self, state: torch.Tensor, push_right: torch.Tensor) -> torch.Tensor:
        """One Euler step of the frictionless cart-pole equations of motion (Florian, 2007).

        Args:
            state: ``[B, 4]`` x, x_dot, theta, theta_dot.
            push_right: ``[B]`` bool, the direction of the force.

        Returns:
            The next states, ``[B, 4]``.
        """
        x, x_dot, theta, theta_dot = state.unbind(-1)
        force = torch.where(push_right, self.force_mag, -self.force_mag).to(state.dtype)
        total_mass = self.cart_mass + self.pole_mass
        pole_moment = self.pole_mass * self.pole_half_length
        cos_theta = torch.cos(theta)
        sin_theta = torch.sin(theta)
        # Force on the cart per unit of total mass, centripetal term of the pole included.
        common = (force + pole_moment * theta_dot.square() * sin_theta) / total_mass
        theta_acc = (self.gravity * sin_theta - cos_theta * common) / (
            self.pole_half_length * (4.0 / 3.0 - self.pole_mass * cos_theta.square() / total_mass)
        )
        x_acc = common - pole_moment * theta_acc * cos_theta / total_mass
        # Explicit Euler: positions advance with the OLD velocities, as gymnasium's default.
        # Each element is ``s + tau * ds`` as four column-wise products and sums would give
        # it, in three kernels rather than nine (an eager step's launches, on CUDA).
        rates = torch.stack([x_dot, x_acc, theta_dot, theta_acc], dim=-1)
        return state + self.tau * rates

    def step(self, actions: torch.Tensor) -> TensorDict:
        """Push every cart, end the episodes that fail or time out, and reset those.

        Args:
            actions: ``[B]`` or ``[B, 1]`` integer actions, 0 (left) or 1 (right).

        Returns:
            TensorDict with batch size ``[B]``: ``obs`` ``[B, 4]`` (the next episode's
            first observation where one ended), ``rewards`` ``[B, 1]``, ``terminated`` and
            ``truncated`` ``[B, 1]`` bool, ``final_obs`` ``[B, 4]`` (the state reached by
            this step, whether or not the episode ended).
        """
        push_right = actions.reshape(self.num_envs) == 1
        final_obs = self._next_states(self.state, push_right)
        x, theta = final_obs[:, 0], final_obs[:, 2]
        # (Compared as one [B, 2] block the two tests launch two kernels fewer eagerly, but
        # cost the compiled T loop 24 launches more a collect at B = 4096.)
        terminated = (x.abs() > self._x_limit) | (theta.abs() > self._theta_limit)
        # gymnasium's TimeLimit would flag both on a failing 500th step; the protocol
        # wants termination alone there (``_end_step``), since nothing should bootstrap
        # from that state.
        return self._end_step(final_obs, torch.ones_like(x), terminated)


class CartPoleNoVelocity(CartPole):
    """CartPole with the velocities hidden: a partially observed task for recurrent policies.

    The dynamics, rewards, episode ends and resets are :class:`CartPole`'s; the
    observation is ``[B, 2]`` float32, cart position and pole angle only. A policy must
    infer the velocities from the history of positions, which a feedforward policy cannot
    do from one observation.
    """

    obs_size: ClassVar[int] = 2

    def _obs(self, state: torch.Tensor) -> torch.Tensor:
        """Cart position and pole angle of ``[B, 4]`` states, ``[B, 2]``."""
        # Columns 0 (x) and 2 (theta), copied: a strided view would alias the live state.
        return state[:, 0::2].to(torch.float32, copy=True)


def _float32_at_or_below(value: float) -> float:
    """Return the largest float32 that is at most ``value``, as a Python float."""
    rounded = torch.tensor(value, dtype=torch.float32)
    if rounded.item() > value:
        rounded = torch.nextafter(rounded, torch.tensor(-math.inf))
    return rounded.item()
