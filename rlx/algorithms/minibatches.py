"""Where an update's minibatches come from: single samples, or whole sequences.

A first-order update (PPO) shuffles and slices *units* of the rollout: samples for a
stateless policy (:class:`Samples`), sequences of ``L`` steps started from their stored
state for a recurrent one (:class:`Sequences`). Each source turns the buffer into a
training batch of ``[units, ...]`` entries and evaluates the policy on a slice of it;
the update loop itself is the same for both.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Protocol

import torch
from tensordict import TensorDict
from torch import Tensor

from rlx.collect.buffer import ACTIONS, ADVANTAGES, HIDDEN, LOGP, RESETS, RETURNS, VALUES
from rlx.core.layout import cat_passes, pass_rows, passes
from rlx.members.stacked import StackedLinear, StackedRNNCell
from rlx.env import OBS
from rlx.policy import EvalOutput, Obs, Policy, RecurrentPolicy, flatten_time

__all__ = ["MinibatchSource", "Samples", "Sequences", "CPU_MICRO_BATCH_SIZE", "CPU_WIDE_MICRO_BATCH_SIZE",
           "default_cpu_micro_batch_size", "micro_batch_rows", "passes", "pass_rows", "cat_passes"]

Batch = dict[str, Obs]
Normalizer = Callable[[Tensor], Tensor]
#: Rollout entries every update reads: ``[units, ...]`` in the batch.
ROLLOUT_KEYS = (OBS, ACTIONS, LOGP, VALUES, ADVANTAGES, RETURNS)

#: Default ``micro_batch_size`` on a CPU for models up to 128 wide; wider ones get
#: :data:`CPU_WIDE_MICRO_BATCH_SIZE`. Whole-buffer passes spill out of cache, and small
#: passes repeat the dispatch of a hundred-odd ops per pass: the fastest size per width
#: comes from ``python benchmarks/cpu_rows.py``'s ``step()`` table (its rows are in
#: ``benchmarks/results/cpu_rows.jsonl``; rerun it on a new CPU).
CPU_MICRO_BATCH_SIZE = 4096
#: Default ``micro_batch_size`` on a CPU for models wider than 128 (more activation
#: bytes per row), from the same table.
CPU_WIDE_MICRO_BATCH_SIZE = 2048


def default_cpu_micro_batch_size(model: torch.nn.Module) -> int:
    """``micro_batch_size`` on a CPU for ``model``: by its widest ``Linear`` output (or
    recurrent cell), :data:`CPU_MICRO_BATCH_SIZE` up to 128 wide, else
    :data:`CPU_WIDE_MICRO_BATCH_SIZE` (also for a model with neither)."""
    widths = [m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear)]
    widths += [m.hidden_size for m in model.modules() if isinstance(m, torch.nn.RNNCellBase)]
    widths += [m.weight.shape[-1] for m in model.modules() if isinstance(m, StackedLinear)]  # members' [S, in, out]
    widths += [m.weight_hh.shape[1] for m in model.modules() if isinstance(m, StackedRNNCell)]
    return CPU_MICRO_BATCH_SIZE if widths and max(widths) <= 128 else CPU_WIDE_MICRO_BATCH_SIZE


def micro_batch_rows(micro_batch_size: int | None, model: torch.nn.Module, device: torch.device) -> int:
    """Each member's rows per forward/backward pass of an update (a config's
    ``micro_batch_size``: ``None`` gives :func:`default_cpu_micro_batch_size` on a CPU,
    each member's as one run's, and no cut on CUDA; 0 no cut); ``sys.maxsize`` where
    passes are not cut."""
    if micro_batch_size is None:
        micro_batch_size = default_cpu_micro_batch_size(model) if device.type == "cpu" else 0
    return micro_batch_size or sys.maxsize


class MinibatchSource(Protocol):
    """What an update needs from a kind of unit (a sample or a sequence)."""

    #: Samples per unit.
    unit_samples: int

    def num_units(self, num_envs: int, horizon: int) -> int:
        """Units in a ``[B, T]`` rollout."""

    def batch(self, buffer: TensorDict, horizon: int, normalize: Normalizer | None) -> Batch:
        """The rollout as ``[units, ...]`` entries, advantages normalized by ``normalize``."""

    def evaluate(self, policy: Policy | RecurrentPolicy, mb: Batch) -> tuple[EvalOutput, Batch]:
        """The policy's outputs on a minibatch and the rollout entries they pair with,
        both with ``[M, ...]`` samples."""

    def log_prob(self, policy: Policy | RecurrentPolicy, mb: Batch) -> tuple[Tensor, Tensor]:
        """``[M, 1]`` log-probabilities of the minibatch's actions under the policy now and
        at collection (no grad)."""


class Samples:
    """Units are single samples: the rollout flattened to ``[N = B * T, ...]``."""

    unit_samples = 1

    def num_units(self, num_envs: int, horizon: int) -> int:
        return num_envs * horizon

    def batch(self, buffer: TensorDict, horizon: int, normalize: Normalizer | None) -> Batch:
        batch = {key: flatten_time(buffer.get(key)[:, :horizon]) for key in ROLLOUT_KEYS}  # [B, T, ...] -> [N, ...]
        if normalize is not None:
            batch[ADVANTAGES] = normalize(batch[ADVANTAGES])
        return batch

    def evaluate(self, policy: Policy, mb: Batch) -> tuple[EvalOutput, Batch]:
        return policy.evaluate(mb[OBS], mb[ACTIONS]), mb

    @torch.no_grad()
    def log_prob(self, policy: Policy, mb: Batch) -> tuple[Tensor, Tensor]:
        return policy.log_prob(mb[OBS], mb[ACTIONS]), mb[LOGP]


# Entries of a sequence batch used only with burn-in.
_BURN_OBS, _BURN_RESETS, _BURN_HIDDEN, _BURN_VALID = "burn_obs", "burn_resets", "burn_hidden", "burn_valid"


def _sequences(x: Obs, num_sequences: int, length: int) -> Obs:
    """``[B, K * L, ...]`` -> ``[B * K, L, ...]`` (a tensor, or a TensorDict's batch dims)."""
    return x.reshape(num_sequences, length, *x.shape[2:])


class Sequences:
    """Units are sequences of ``L`` steps cut from the ``[B, T]`` rollout (``T / L`` per
    env), each started from the state stored when it was collected, with the resets
    inside a sequence applied as in collect (truncated backprop through time).

    With ``burn_in = W``, a sequence that has ``W`` collected steps before it first runs
    them without gradient under the current parameters, refreshing its stale stored
    state (Kapturowski et al., 2019, R2D2); the first sequences of the rollout have none
    and keep the stored state.

    Args:
        length: ``L``, which divides ``T``.
        burn_in: ``W`` in ``[0, T - L]``.
    """

    def __init__(self, length: int, burn_in: int = 0) -> None:
        self.unit_samples = self.length = length
        self.burn_in = burn_in

    def num_units(self, num_envs: int, horizon: int) -> int:
        return num_envs * (horizon // self.length)

    def batch(self, buffer: TensorDict, horizon: int, normalize: Normalizer | None) -> Batch:
        T, L, W = horizon, self.length, self.burn_in
        B, K = buffer.batch_size[0], T // L
        S = B * K
        device = buffer.device
        batch: Batch = {key: _sequences(buffer.get(key)[:, :T], S, L) for key in ROLLOUT_KEYS}  # [B, T, ...] -> [B*K, L, ...]
        batch[RESETS] = _sequences(buffer.get(RESETS)[:, :T], S, L).squeeze(-1)  # [B*K, L]
        hidden = buffer.get(HIDDEN)
        batch[HIDDEN] = hidden[:, 0:T:L].reshape(S, *hidden.shape[2:])  # the state before each sequence
        if normalize is not None:
            batch[ADVANTAGES] = normalize(batch[ADVANTAGES])
        if W:
            starts = torch.arange(K, device=device) * L  # [K]
            first = (starts - W).clamp(min=0)  # [K]
            window = first.unsqueeze(1) + torch.arange(W, device=device)  # [K, W], all < T
            burn_obs = buffer.get(OBS)[:, window]  # [B, K, W, *obs]
            batch[_BURN_OBS] = burn_obs.reshape(S, W, *burn_obs.shape[3:])  # [B*K, W, *obs]
            batch[_BURN_RESETS] = buffer.get(RESETS)[:, window].reshape(S, W)  # [B, K, W, 1] -> [B*K, W]
            batch[_BURN_HIDDEN] = hidden[:, first].reshape(S, *hidden.shape[2:])
            batch[_BURN_VALID] = (starts >= W).expand(B, K).reshape(S)  # sequences with W steps before them
        return batch

    def evaluate(self, policy: RecurrentPolicy, mb: Batch) -> tuple[EvalOutput, Batch]:
        state = mb[HIDDEN]
        if self.burn_in:
            with torch.no_grad():
                _, _, burned = policy.sequence_forward(mb[_BURN_OBS], mb[_BURN_HIDDEN], mb[_BURN_RESETS])
            valid = mb[_BURN_VALID].view(-1, *([1] * (state.dim() - 1)))
            state = torch.where(valid, burned.to(state.dtype), state)
        out = policy.evaluate_sequences(mb[OBS], mb[ACTIONS], state, mb[RESETS])
        rollout = {key: mb[key].reshape(-1, 1) for key in (LOGP, VALUES, ADVANTAGES, RETURNS)}  # [S, L, 1] -> [S*L, 1]
        return out, rollout

    @torch.no_grad()
    def log_prob(self, policy: RecurrentPolicy, mb: Batch) -> tuple[Tensor, Tensor]:
        out, rollout = self.evaluate(policy, mb)
        return out.logp, rollout[LOGP]
