"""The values a rollout's T loop leaves out, in batched passes (:class:`RolloutValues`, a
part of :class:`~rlx.collect.rollout.Rollout`): ``V`` of every column where the T loop runs
only the actor, and the truncation bootstrap ``V(final_obs)`` on the truncated steps alone.

Both run inside collect's tail (one compiled program with ``compile``) and never sync with
the host: the truncated steps are gathered up to a fixed capacity, and an overflow is
reported in the collect's one transfer, after which every step is valued.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from rlx.collect.buffer import FINAL_VALUES, VALUES
from rlx.collect.episodes import truncated_slots
from rlx.core.layout import cat_passes, pass_rows, passes
from rlx.env import FINAL_OBS, OBS, TRUNCATED
from rlx.policy import Obs, flatten_time

if TYPE_CHECKING:
    from rlx.collect.rollout import Rollout  # noqa: F401

__all__ = ["RolloutValues", "ValueFn"]

ValueFn = Callable[[Obs, Tensor, Tensor], Tensor]


class RolloutValues:
    """The value passes of :class:`~rlx.collect.rollout.Rollout` (its methods, on its state)."""

    def values_after_steps(self, value_fn: ValueFn) -> Tensor:
        """The values the T loop left out: ``V`` of every column (the bootstrap column T
        only, for a policy that values while acting) and ``V(final_obs)`` on the
        truncated steps, written into the buffer.

        Returns:
            ``[]`` bool, True when more steps truncated than the capacity valued:
            :meth:`finish` then values every step (after the collect's one sync).
        """
        T = self.horizon
        if self.policy.values_while_acting:
            self.values[T].copy_(value_fn(self.obs[T], self.states[T], self.resets[T]))
        else:
            # V of every column, the bootstrap column T included, in batched passes: the
            # T loop ran only the actor.
            buf = self.buffer
            no_resets = self._no_resets[:1].expand(self.num_envs * (T + 1), 1)
            buf.get(VALUES).copy_(self.batched_values(value_fn, buf.get(OBS), self._state_columns, no_resets))
        overflow = torch.zeros((), dtype=torch.bool, device=self.device)
        if self.truncates:
            # V(final_obs) where the episode was truncated, else 0 (the bootstrap of
            # design.md §5): only the truncated rows are valued, up to a fixed capacity.
            final_values, overflow = self.truncated_final_values(value_fn)
            self.buffer.get(FINAL_VALUES)[:, :T] = final_values
        return overflow

    def _value_pass_rows(self) -> int:
        """Rows per batched value pass: the policy's ``max_rows_per_pass``, else 2**20."""
        return self.policy.max_rows_per_pass or 1 << 20

    def batched_values(self, value_fn: ValueFn, obs: Obs, states: Tensor, resets: Tensor) -> Tensor:
        """``value_fn`` over ``[B, C, ...]`` observations and states, giving ``[B, C, 1]``, in
        passes of whole columns of at most :meth:`_value_pass_rows` rows (one pass over
        ``B * C`` rows spills out of a CPU's cache). ``resets`` is ``[n, 1]`` with
        ``n >= B * C`` (its first rows serve every pass)."""
        B, C = obs.shape[:2]
        values = torch.empty(B, C, 1, device=self.device)
        step = max(1, self._value_pass_rows() // B)
        for lo in range(0, C, step):
            hi = min(lo + step, C)
            rows = B * (hi - lo)
            passed = value_fn(flatten_time(obs[:, lo:hi]), flatten_time(states[:, lo:hi]), resets[:rows])
            values[:, lo:hi] = passed.view(B, hi - lo, 1)
        return values

    def _final_value_inputs(self) -> tuple[Obs, Tensor]:
        """``[B, T, ...]`` final observations and the states they continue from: the
        episode that ended at step t would have continued from the state after step t,
        before any reset (column t + 1)."""
        T = self.horizon
        return self.buffer.get(FINAL_OBS)[:, :T], self._state_columns[:, 1 : T + 1]

    def all_final_values(self, value_fn: ValueFn | None = None) -> Tensor:
        """``[B, T, 1]``: ``V(final_obs)`` on every step in batched passes, 0 where the step
        did not truncate (``value_fn``: :attr:`value_fn` by default)."""
        obs, states = self._final_value_inputs()
        truncated = self.buffer.get(TRUNCATED)[:, : self.horizon]
        return self.batched_values(value_fn or self.value_fn, obs, states, self._no_resets).masked_fill(~truncated, 0.0)

    def truncated_final_values(self, value_fn: ValueFn | None = None) -> tuple[Tensor, Tensor]:
        """``V(final_obs)`` on the truncated steps only, without a host sync.

        Truncations are rare (a time limit ends an episode once every few hundred steps),
        so valuing every step's final observation wastes most of a pass over ``B * T``
        rows. Only the first :attr:`truncation_capacity` truncated steps are gathered and
        valued (:func:`~rlx.collect.episodes.truncated_slots`).

        Returns:
            ``[B, T, 1]`` values (0 where the step did not truncate) and a ``[]`` bool,
            True when there were more truncated steps than the capacity: their values are
            then missing, and :meth:`finish` recomputes every row after the sync.
        """
        B, T, K, S = self.num_envs, self.horizon, self.truncation_capacity, self.members.size
        if K >= B * T:
            return self.all_final_values(value_fn), torch.zeros((), dtype=torch.bool, device=self.device)
        truncated = self.buffer.get(TRUNCATED)[:, :T].reshape(B * T)  # [B, T, 1] -> [N], flat order b * T + t
        env_idx, step_idx, slot, overflow = truncated_slots(truncated, self._truncation_ranks, T, S)
        obs, states = self._final_value_inputs()
        parts = []
        for lo, rows in passes(K, self._value_pass_rows() // S, S):  # each member's slots alike
            e, t = pass_rows(env_idx, lo, rows, S), pass_rows(step_idx, lo, rows, S)
            parts.append((value_fn or self.value_fn)(obs[e, t], states[e, t], self._no_resets[: S * rows]).float())
        no_value = torch.zeros(1, 1, device=self.device)  # slot S * K: the 0 of every other step
        slot_values = torch.cat([cat_passes(parts, S), no_value])
        return slot_values.index_select(0, slot).view(B, T, 1), overflow
