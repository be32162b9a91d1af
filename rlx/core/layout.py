"""The layout of a member axis over seed-major rows, shared by every layer.

S members' rows are seed-major: rows ``i*n:(i+1)*n`` belong to member ``i``. A single
run (S = 1) keeps the layout it always had, with no member dim: these functions are the
one place that difference is decided (for normalizer statistics, reward scales and
:class:`rlx.members.Members`).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["member_lead", "by_member", "from_by_member", "member_rows"]


def member_lead(num_members: int) -> tuple[int, ...]:
    """The leading shape of a per-member value: ``()`` for one member (a single run's
    state keeps the layout it always had), ``(S,)`` else."""
    return () if num_members == 1 else (num_members,)


def by_member(x: Tensor, num_members: int, event_dims: int) -> Tensor:
    """``[S * n, ..., *event]`` -> ``[m, S, *event]`` (``event_dims = len(event)``; more
    leading dims, such as a sequence's ``L``, folded into ``m``): each member's rows
    against per-member statistics of :func:`member_lead` shape. One member: ``x``."""
    if num_members == 1:
        return x
    return x.reshape(num_members, -1, *x.shape[x.dim() - event_dims :]).transpose(0, 1)


def from_by_member(y: Tensor, num_members: int, shape: torch.Size) -> Tensor:
    """The inverse of :func:`by_member`, back to ``shape``."""
    if num_members == 1:
        return y
    return y.transpose(0, 1).reshape(shape)


def member_rows(values: Tensor, num_members: int, like: Tensor) -> Tensor:
    """A per-member value (``[S]``, or 0-d for one member) for each seed-major row of
    ``like``: ``[rows, 1, ...]`` in ``like``'s dtype; for one member the 0-d value itself,
    which broadcasts without promoting ``like``'s dtype."""
    if num_members == 1:
        return values
    rows = values.repeat_interleave(like.shape[0] // num_members)
    return rows.view(-1, *([1] * (like.dim() - 1))).to(like.dtype)
