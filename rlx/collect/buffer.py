"""The rollout buffer: one ``[B, T+1]`` TensorDict, allocated once at build.

Column ``t < T`` holds what the policy saw and did at step ``t`` and what the env
returned; column ``T`` holds the last observation and its value (the bootstrap).

========================== ==================== =========================================
key                        shape                written by
========================== ==================== =========================================
obs                        ``[B, T+1, *obs]``   collect
actions                    ``[B, T+1, *act]``   collect
logp, values               ``[B, T+1, 1]``      collect (values also at column ``T``)
rewards                    ``[B, T+1, 1]``      collect
terminated, truncated      ``[B, T+1, 1]`` bool collect (stay False for envs without them)
final_obs                  ``[B, T+1, *obs]``   collect, only for envs that truncate
final_values               ``[B, T+1, 1]``      collect: V(final_obs) where truncated, else 0
advantages, returns        ``[B, T+1, 1]``      GAE, in place
========================== ==================== =========================================

A policy with a state (:class:`~rlx.policy.RecurrentPolicy`) adds two, written by the
:class:`~rlx.collect.rollout.Rollout`:

========================== ==================== =========================================
hidden                     ``[B, T+1, *state]`` collect: the state BEFORE step ``t``'s
                                                reset; column ``T`` is carried over
resets                     ``[B, T+1, 1]`` bool collect: step ``t`` begins an episode
                                                (the previous step ended one)
========================== ==================== =========================================
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from tensordict import TensorDict
from torch import Tensor
from torchrl.data import TensorSpec

from rlx.env import FINAL_OBS, OBS, REWARDS, TERMINATED, TRUNCATED

__all__ = [
    "StepColumns",
    "ACTIONS",
    "LOGP",
    "VALUES",
    "FINAL_VALUES",
    "ADVANTAGES",
    "RETURNS",
    "HIDDEN",
    "RESETS",
    "make_buffer",
]

ACTIONS = "actions"
LOGP = "logp"
VALUES = "values"
FINAL_VALUES = "final_values"
ADVANTAGES = "advantages"
RETURNS = "returns"
HIDDEN = "hidden"
RESETS = "resets"


def make_buffer(
    observation_spec: TensorSpec,
    action_spec: TensorSpec,
    num_envs: int,
    horizon: int,
    *,
    device: torch.device,
    with_final_obs: bool,
) -> TensorDict:
    """Allocate the zeroed ``[B, T+1]`` rollout buffer (see the module docstring).

    Args:
        observation_spec: Spec of one env's observation.
        action_spec: Spec of one env's action; buffer actions take its shape and dtype.
        num_envs: ``B``.
        horizon: ``T``.
        device: Where every entry lives.
        with_final_obs: Allocate ``final_obs`` (only envs that can truncate need it).
    """
    shape = (num_envs, horizon + 1)

    def scalar(dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(*shape, 1, dtype=dtype, device=device)

    entries = {
        OBS: observation_spec.zero(shape).to(device),
        ACTIONS: action_spec.zero(shape).to(device),
        LOGP: scalar(),
        VALUES: scalar(),
        REWARDS: scalar(),
        TERMINATED: scalar(torch.bool),
        TRUNCATED: scalar(torch.bool),
        FINAL_VALUES: scalar(),
        ADVANTAGES: scalar(),
        RETURNS: scalar(),
    }
    if with_final_obs:
        entries[FINAL_OBS] = observation_spec.zero(shape).to(device)
    return TensorDict(entries, batch_size=shape, device=device)


class StepColumns(NamedTuple):
    """The buffer views one step of the T loop reads and writes (column ``t``, and
    ``t + 1`` for what the step leads to)."""

    obs: Tensor | TensorDict
    state: Tensor
    reset: Tensor
    actions: Tensor
    logp: Tensor
    values: Tensor
    next_state: Tensor
    rewards: Tensor
    terminated: Tensor
    truncated: Tensor
    final_obs: Tensor | TensorDict | None
    next_obs: Tensor | TensorDict
    next_reset: Tensor

    def put(self, name: str, value: Tensor | TensorDict) -> None:
        """Write a step's output into its view (``name`` one of the fields above)."""
        getattr(self, name).copy_(value)
