"""CueRecall: a memory task that a feedforward policy cannot solve."""

from __future__ import annotations

from typing import ClassVar

import torch
from tensordict import TensorDict
from torchrl.data import Categorical

from rlx.envs._episodic import EpisodicEnv

__all__ = ["CueRecall"]


class CueRecall(EpisodicEnv):
    """Remember a cue shown at the first step and name it ``delay`` steps later.

    Every episode lasts ``delay + 1`` steps. At step 0 the observation shows a cue, one
    of two, drawn per sub-env at each reset; the steps in between show nothing; the last
    step shows a query flag, and the action taken there is rewarded +1 if it names the
    cue and -1 otherwise. Actions elsewhere are ignored and unrewarded.

    A policy without memory sees the same query observation whatever the cue, so it
    can do no better than chance: an expected return of 0. A policy that remembers the
    cue scores 1.

    * Observation ``[B, 3]`` float32: ``[cue == 0, cue == 1, query]``, all zeros between
      the first and the last step.
    * Action ``[B]`` int64, ``Categorical(2)``: the cue named at the query.
    * Reward: +1 or -1 on the last step, 0 elsewhere.
    * Terminated: after the query step. Never truncated.

    Args:
        num_envs: Number of sub-envs ``B``.
        horizon: Unused; part of the env constructor protocol.
        device: Device of the state and of every returned tensor.
        delay: Steps from the cue to the query (at least 1).
    """

    obs_size: ClassVar[int] = 3
    state_size: ClassVar[int] = 2  # cue (0 or 1), step within the episode

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        device: torch.device | str = "cpu",
        delay: int = 16,
    ) -> None:
        if not isinstance(delay, int) or isinstance(delay, bool) or delay < 1:
            raise ValueError(f"CueRecall: delay must be an int >= 1, got {delay!r}")
        super().__init__(num_envs, horizon, device=device)
        self.delay = delay
        # The query ends every episode first, so the time limit never truncates.
        self.max_episode_steps = delay + 2

    def _action_spec(self) -> Categorical:
        return Categorical(2, device=self.device)

    def _initial_states(self) -> torch.Tensor:
        """A fresh cue per sub-env, at step 0: ``[B, 2]``."""
        cue = torch.randint(0, 2, (self.num_envs,), device=self.device).float()
        return torch.stack([cue, torch.zeros_like(cue)], dim=-1)

    def _obs(self, state: torch.Tensor) -> torch.Tensor:
        """``[B, 3]``: the cue one-hot at step 0, the query flag at step ``delay``."""
        cue, k = state.unbind(-1)
        first = (k == 0).float()
        return torch.stack([first * (cue == 0).float(), first * (cue == 1).float(), (k == self.delay).float()], dim=-1)

    def step(self, actions: torch.Tensor) -> TensorDict:
        """Advance every sub-env one step; reward the query step and reset after it.

        Args:
            actions: ``[B]`` or ``[B, 1]`` integer actions, 0 or 1.

        Returns:
            TensorDict with batch size ``[B]``: ``obs`` ``[B, 3]``, ``rewards`` ``[B, 1]``,
            ``terminated`` and ``truncated`` ``[B, 1]`` bool and ``final_obs`` ``[B, 3]``.
        """
        cue, k = self.state.unbind(-1)
        query = k == self.delay
        correct = actions.reshape(self.num_envs).float() == cue
        rewards = torch.where(query, torch.where(correct, 1.0, -1.0), 0.0)
        new_state = torch.stack([cue, k + 1], dim=-1)
        return self._end_step(new_state, rewards, query)
