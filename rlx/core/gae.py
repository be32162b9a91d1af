"""Generalized advantage estimation over a batch of trajectories with episode ends.

Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage
Estimation" (2016), https://arxiv.org/abs/1506.02438.

Two flags end an episode inside the horizon and they are not the same thing:

- ``terminated``: the episode reached a terminal state, whose value is zero by
  definition, so the target does not bootstrap.
- ``truncated``: the episode was cut (a time limit) in a state that still has a future;
  the target bootstraps from ``final_values``, the critic's value of the true last
  observation (the env has already replaced it with the first observation of the next
  episode, whose value ``values[:, t + 1]`` belongs to another episode).

Either flag cuts the advantage trace, so no credit flows across an episode boundary.

For ``t < T``::

    next_value_t = 0                   if terminated_t
                 = final_values_t      if truncated_t (and not terminated_t)
                 = values_{t+1}        otherwise
    delta_t      = rewards_t + gamma * next_value_t - values_t
    A_t          = delta_t + gamma * gae_lambda * (1 - done_t) * A_{t+1},   A_T = 0
    returns_t    = A_t + values_t

A step with both flags set is treated as terminated: a true terminal state has value zero
whatever the time limit says.

The functions never touch a tensor's value from the host (no ``.item()``, no Python
branch on data), so they run inside a CUDA-graph-captured or sync-checked step.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["generalized_advantage_estimate", "generalized_advantage_estimate_"]


def generalized_advantage_estimate(
    rewards: Tensor, values: Tensor, terminated: Tensor, truncated: Tensor, final_values: Tensor,
    *, gamma: float | Tensor, gae_lambda: float | Tensor,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Advantages and value targets of a batch of trajectories, in new tensors.

    Args:
        rewards: ``[B, T, 1]`` reward of each transition.
        values: ``[B, T+1, 1]`` critic values of the observations; column ``T`` is the
            value of the observation after the last step (the bootstrap).
        terminated: bool, shaped like ``rewards``: the transition ended the episode in a
            terminal state (no bootstrap).
        truncated: bool, shaped like ``rewards``: the transition cut the episode short
            (bootstrap from ``final_values``).
        final_values: shaped like ``rewards``: the critic value of the true last
            observation where ``truncated``; read nowhere else.
        gamma: Discount factor in ``[0, 1]``.
        gae_lambda: GAE trace decay in ``[0, 1]``; 0 gives one-step TD errors, 1 gives
            Monte Carlo returns minus the value baseline.

    Returns:
        ``(advantages, returns)``, each ``[B, T, 1]`` and in the compute
        dtype: float64 if any floating input is float64, float32 otherwise (half
        precision inputs are upcast so the reverse recursion does not lose precision).

    Raises:
        ValueError: An input has the wrong shape; the message names it, the shape it got
            and the shape expected.
        TypeError: ``terminated`` or ``truncated`` is not bool.
    """
    _, dtype = _check_inputs(rewards, values, terminated, truncated, final_values)
    advantages = torch.empty(rewards.shape, dtype=dtype, device=values.device)
    returns = torch.empty(rewards.shape, dtype=dtype, device=values.device)
    inputs = (rewards, values, terminated, truncated, final_values)
    generalized_advantage_estimate_(*inputs, gamma=gamma, gae_lambda=gae_lambda, advantages=advantages, returns=returns)
    return advantages, returns


@torch.no_grad()
def generalized_advantage_estimate_(
    rewards: Tensor,
    values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    final_values: Tensor,
    *,
    gamma: float | Tensor,
    gae_lambda: float | Tensor,
    advantages: Tensor,
    returns: Tensor,
) -> None:
    """Generalized advantage estimation written into preallocated outputs.

    Same inputs and math as :func:`generalized_advantage_estimate`. The outputs are
    ``[B, T, 1]``, for example ``buffer[:, :T]`` (a non-contiguous view); the recursion
    runs in the compute dtype and is cast into them once. Advantages and returns are
    regression targets, so no autograd graph is built.

    Args:
        rewards: ``[B, T, 1]`` reward of each transition.
        values: ``[B, T+1, 1]`` critic values, column ``T`` being the bootstrap value.
        terminated: bool, shaped like ``rewards``.
        truncated: bool, shaped like ``rewards``.
        final_values: shaped like ``rewards``.
        gamma: Discount factor in ``[0, 1]``; or each env's, a ``[B, 1, 1]`` tensor (members
            of a sweep). A float64 tensor computes ``gamma * gae_lambda`` as a float's
            would be, before the cast to the compute dtype.
        gae_lambda: GAE trace decay in ``[0, 1]``; or each env's, as ``gamma``.
        advantages: ``[B, T, 1]`` floating output; must not overlap any input.
        returns: Output shaped like ``advantages``; must not overlap any input or
            ``advantages``.

    Raises:
        ValueError: An input or output has the wrong shape (the message names it).
        TypeError: A flag is not bool or an output is not floating point.
    """
    horizon, dtype = _check_inputs(rewards, values, terminated, truncated, final_values)
    batch = values.shape[0]
    for name, out in (("advantages", advantages), ("returns", returns)):
        if tuple(out.shape) != (batch, horizon, 1):
            raise ValueError(
                f"{name} has shape {tuple(out.shape)}; expected {(batch, horizon, 1)} "
                f"(values has shape {tuple(values.shape)})"
            )
        if not out.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got dtype {out.dtype}")
    if advantages.shape != returns.shape:
        raise ValueError(
            f"returns has shape {tuple(returns.shape)}; expected {tuple(advantages.shape)} "
            "(the shape of advantages)"
        )

    # delta_t for all steps at once, in the compute dtype: ((next_value * gamma) + r) - v.
    next_values = torch.where(truncated, final_values, values[:, 1:]).to(dtype)
    delta = next_values.masked_fill(terminated, 0.0)  # after the truncation fill: terminated wins
    delta = delta.mul(gamma.to(dtype) if isinstance(gamma, Tensor) else gamma).add(rewards).sub(values[:, :horizon])
    # The trace coefficient gamma * gae_lambda * (1 - done_t), each env's product cast once.
    if isinstance(gamma, Tensor) or isinstance(gae_lambda, Tensor):
        coeff = (gamma * gae_lambda).to(dtype).expand_as(delta)
    else:
        coeff = torch.full_like(delta, gamma * gae_lambda)
    coeff = coeff.masked_fill(terminated | truncated, 0.0)

    # A_{T-1} = delta_{T-1} because A_T = 0; each earlier step adds its discounted
    # successor: one [B, 1] op per step (the loop length is a host int), each column a
    # tensor of its own and one stack at the end. (Written into one [B, T] tensor column
    # by column, a compiled program re-derives the whole tensor at every step: compile's
    # GAE-and-batch program took 4x as long at B = 1024, T = 32; docs/performance.md.)
    column = delta[:, horizon - 1]
    columns = [column]
    for t in range(horizon - 2, -1, -1):
        column = torch.addcmul(delta[:, t], coeff[:, t], column)
        columns.append(column)
    adv = torch.stack(columns[::-1], dim=1)
    # (copied in, not written with ``out=``: the buffer's [:, :T] views are not contiguous,
    # and a compiled program cannot take a non-contiguous ``out=``)
    returns.copy_(adv + values[:, :horizon])
    advantages.copy_(adv)


def _check_inputs(
    rewards: Tensor,
    values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    final_values: Tensor,
) -> tuple[int, torch.dtype]:
    """Validate the input shapes (host metadata only); return the horizon and compute dtype."""
    if values.ndim != 3 or values.shape[1] < 2 or values.shape[2] != 1:
        raise ValueError(
            f"values has shape {tuple(values.shape)}; expected [B, T+1, 1] with T >= 1"
        )
    batch, horizon = values.shape[0], values.shape[1] - 1
    if tuple(rewards.shape) != (batch, horizon, 1):
        raise ValueError(
            f"rewards has shape {tuple(rewards.shape)}; expected {(batch, horizon, 1)} "
            f"(values has shape {tuple(values.shape)})"
        )
    for name, tensor in (
        ("terminated", terminated),
        ("truncated", truncated),
        ("final_values", final_values),
    ):
        if tensor.shape != rewards.shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)}; expected {tuple(rewards.shape)} "
                "(the shape of rewards)"
            )
    for name, flags in (("terminated", terminated), ("truncated", truncated)):
        if flags.dtype != torch.bool:
            raise TypeError(f"{name} must be a bool tensor, got dtype {flags.dtype}")
    dtype = torch.promote_types(
        torch.promote_types(rewards.dtype, values.dtype),
        torch.promote_types(final_values.dtype, torch.float32),
    )
    return horizon, dtype
