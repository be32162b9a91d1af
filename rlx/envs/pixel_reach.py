"""PixelReach: reach a goal on a small grid seen only as an image, all on the device."""

from __future__ import annotations

from typing import ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Categorical, Composite, Unbounded

from rlx.envs._episodic import EpisodicEnv

__all__ = ["PixelReach"]

#: Moves of the four actions: up, down, left, right (row, column).
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))


class PixelReach(EpisodicEnv):
    """Walk an agent to a goal on a ``G x G`` grid (``G = 7``) that the policy sees only
    as pixels: the task of :class:`~rlx.cnn.CNNActorCritic`.

    * Observation: ``{"pixels": [2, G, G]}`` float32, a one-hot image per channel: the
      agent's cell in channel 0, the goal's in channel 1. No coordinates are given.
    * Action ``[B]`` int64, ``Categorical(4)``: up, down, left, right (a move into a wall
      stays put).
    * Reward: the decrease of the Manhattan distance to the goal (+1, 0 or -1), minus 0.05
      per step, plus 1 on the step that reaches the goal.
    * Terminated: the agent reaches the goal. Truncated: ``4 G = 28`` steps without it.
    * Reset: agent and goal uniform over distinct cells. A sub-env that ends is reset
      inside ``step``; ``final_obs`` is its last image.

    An optimal policy walks the shortest path: it scores ``1 + 0.95 d`` for a start at
    distance ``d`` (about 5.4 on average over starts); a uniform random policy about -0.1.
    """

    max_episode_steps: ClassVar[int] = 28
    grid: ClassVar[int] = 7
    step_cost: ClassVar[float] = 0.05
    goal_bonus: ClassVar[float] = 1.0
    obs_size: ClassVar[int] = 2 * 7 * 7
    state_size: ClassVar[int] = 4  # agent row, agent column, goal row, goal column
    state_dtype: ClassVar[torch.dtype] = torch.int64

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: torch.device | str = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        G = self.grid
        self.observation_spec = Composite({"pixels": Unbounded(shape=(2, G, G), device=self.device)},
                                          device=self.device)
        self._moves = torch.tensor(MOVES, dtype=torch.int64, device=self.device)
        self._cells = torch.arange(G * G, device=self.device)

    def _action_spec(self) -> Categorical:
        return Categorical(4, device=self.device)

    def _initial_states(self) -> torch.Tensor:
        """Agent and goal on distinct cells, uniformly: ``[B, 4]``."""
        cells = self.grid * self.grid
        agent = torch.randint(cells, (self.num_envs,), device=self.device)
        goal = (agent + torch.randint(1, cells, (self.num_envs,), device=self.device)) % cells  # never the agent's
        return torch.stack([agent // self.grid, agent % self.grid, goal // self.grid, goal % self.grid], dim=-1)

    def _obs(self, state: torch.Tensor) -> TensorDict:
        G = self.grid
        cells = state.view(-1, 2, 2)[..., 0] * G + state.view(-1, 2, 2)[..., 1]  # [B, 2]: agent, goal
        # One-hot by comparison: F.one_hot reads its input's range back to the host on a
        # CPU, which a captured T loop cannot do.
        pixels = (cells.unsqueeze(-1) == self._cells).to(torch.float32).view(-1, 2, G, G)
        return TensorDict({"pixels": pixels}, batch_size=[state.shape[0]], device=self.device)

    def step(self, actions: torch.Tensor) -> TensorDict:
        """Move every agent, end the episodes that reach their goal or time out, and reset those."""
        agent, goal = self.state[:, :2], self.state[:, 2:]
        moved = (agent + self._moves[actions.reshape(self.num_envs).long()]).clamp(0, self.grid - 1)
        before = (goal - agent).abs().sum(-1)
        after = (goal - moved).abs().sum(-1)
        terminated = after == 0
        rewards = (before - after).float() - self.step_cost + torch.where(terminated, self.goal_bonus, 0.0)
        return self._end_step(torch.cat([moved, goal], dim=-1), rewards, terminated)
