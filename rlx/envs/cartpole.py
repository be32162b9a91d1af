"""CartPole with gymnasium CartPole-v1's dynamics, for a batch of sub-envs on any device."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Categorical, Unbounded

from rlx.env import Env

__all__ = ["CartPole"]


class CartPole(Env):
    """Balance a pole on a cart (Barto, Sutton and Anderson, 1983), CartPole-v1 physics.

    * Observation ``[B, 4]`` float32: cart position, cart velocity, pole angle (rad),
      pole angular velocity.
    * Action ``[B]`` int64 (``[B, 1]`` is accepted too): 0 pushes the cart left, 1 right,
      with a force of 10 N.
    * Reward: 1.0 for every step, the last one included.
    * Terminated: the cart leaves ``[-2.4, 2.4]`` or the pole tilts beyond 12 degrees.
    * Truncated: the episode reaches ``max_episode_steps`` (500) without terminating.
    * Reset: every state variable uniform in ``[-0.05, 0.05]``. Sub-envs that end are
      reset inside ``step``; ``final_obs`` holds their true last observation.

    Euler integration with a 0.02 s step, as gymnasium's default ``"euler"`` mode.
    """

    graph_safe: ClassVar[bool] = True
    max_episode_steps: ClassVar[int] = 500

    gravity = 9.8
    cart_mass = 1.0
    pole_mass = 0.1
    pole_half_length = 0.5
    force_mag = 10.0
    tau = 0.02
    x_threshold = 2.4
    theta_threshold = 12 * 2 * math.pi / 360

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(4,), device=self.device)
        self.action_spec = Categorical(2, device=self.device)
        self.state = torch.zeros(num_envs, 4, device=self.device)
        self.steps = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    def _initial_states(self) -> torch.Tensor:
        return torch.empty(self.num_envs, 4, device=self.device).uniform_(-0.05, 0.05)

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        self.state = self._initial_states()
        self.steps.zero_()
        return self.state.clone()

    def step(self, actions: torch.Tensor) -> TensorDict:
        x, x_dot, theta, theta_dot = self.state.unbind(-1)
        force = torch.where(actions.reshape(-1) == 1, self.force_mag, -self.force_mag)
        total_mass = self.cart_mass + self.pole_mass
        pole_mass_length = self.pole_mass * self.pole_half_length
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + pole_mass_length * theta_dot.square() * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.pole_half_length * (4.0 / 3.0 - self.pole_mass * cos.square() / total_mass)
        )
        x_acc = temp - pole_mass_length * theta_acc * cos / total_mass
        final_obs = torch.stack(
            [
                x + self.tau * x_dot,
                x_dot + self.tau * x_acc,
                theta + self.tau * theta_dot,
                theta_dot + self.tau * theta_acc,
            ],
            dim=-1,
        )
        self.steps += 1
        terminated = (final_obs[:, 0].abs() > self.x_threshold) | (final_obs[:, 2].abs() > self.theta_threshold)
        truncated = (self.steps >= self.max_episode_steps) & ~terminated
        done = (terminated | truncated).unsqueeze(-1)
        self.state = torch.where(done, self._initial_states(), final_obs)
        self.steps = torch.where(done.squeeze(-1), 0, self.steps)
        return TensorDict(
            {
                "obs": self.state.clone(),
                "rewards": torch.ones(self.num_envs, 1, device=self.device),
                "terminated": terminated.unsqueeze(-1),
                "truncated": truncated.unsqueeze(-1),
                "final_obs": final_obs,
            },
            batch_size=[self.num_envs],
            device=self.device,
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"state": self.state.clone(), "steps": self.steps.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.state = state["state"].clone().to(self.device)
        self.steps = state["steps"].clone().to(self.device)
