"""The layout of a member axis over seed-major rows, shared by every layer.

S members' rows are seed-major: rows ``i*n:(i+1)*n`` belong to member ``i``. A single
run (S = 1) keeps the layout it always had, with no member dim: these functions are the
one place that difference is decided (for normalizer statistics, reward scales and
:class:`rlx.members.Members`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["member_lead", "by_member", "from_by_member", "member_rows", "passes", "pass_rows", "cat_passes"]


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


# -- passes: cache-sized micro-batches that cut every member alike ----------------------------


def passes(rows: int, micro: int, num_members: int = 1) -> list[tuple[int, int]]:
    """``(first row, rows)``, counted within each member, of each pass over ``rows``
    seed-major rows (``rows / S`` per member) taking at most ``micro`` of every member's
    rows (one pass when ``micro`` covers a member). Each pass's share of a mean is its
    rows over a member's rows; :func:`pass_rows` takes a pass's rows of a batch."""
    per = rows // num_members
    if per * num_members != rows:
        raise ValueError(f"passes: {rows} rows do not split evenly into {num_members} members")
    m = max(1, min(micro, per))
    return [(lo, min(m, per - lo)) for lo in range(0, per, m)]


def pass_rows(x: Any, lo: int, n: int, num_members: int = 1) -> Any:
    """Rows ``lo:lo + n`` of every member of seed-major ``x`` (a tensor or a TensorDict
    with one batch dim, ``[S * m, ...]``), seed-major ``[S * n, ...]``: every member keeps
    the same number of rows, as the stacked model and the per-member means need."""
    if num_members == 1:
        return x[lo : lo + n]
    S, m = num_members, x.shape[0] // num_members
    if n == m:
        return x
    rest = tuple(x.shape[1:])
    return x.reshape(S, m, *rest)[:, lo : lo + n].reshape(S * n, *rest)


def cat_passes(parts: Sequence[Tensor], num_members: int = 1) -> Tensor:
    """The inverse of cutting by :func:`pass_rows`: the passes' seed-major outputs, in
    order, back into one seed-major ``[S * m, ...]`` tensor."""
    if len(parts) == 1:
        return parts[0]
    if num_members == 1:
        return torch.cat(list(parts))
    S = num_members
    rest = tuple(parts[0].shape[1:])
    return torch.cat([p.reshape(S, -1, *rest) for p in parts], dim=1).reshape(-1, *rest)
