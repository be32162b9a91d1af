"""Pure functions over a rollout's tensors: episode statistics and the truncation gather.

Leaves: tensors in, tensors out, no state and no host sync.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from tensordict import TensorDictBase
from torch import Tensor

from rlx.env import FINAL_OBS, OBS, TRUNCATED

__all__ = ["EpisodeStats", "carry_episodes", "episode_statistics", "float_leaves", "truncated_slots"]


def float_leaves(x: Tensor | TensorDictBase) -> list[tuple[str, Tensor]]:
    """``[(name, tensor)]`` for every floating entry of an observation (``obs`` or
    ``obs.<key>``): what a NaN check looks at."""
    if isinstance(x, Tensor):
        return [(OBS, x)] if x.is_floating_point() else []
    return [
        (f"{OBS}.{'.'.join(k) if isinstance(k, tuple) else k}", v)
        for k, v in x.items(include_nested=True, leaves_only=True)
        if v.is_floating_point()
    ]


class EpisodeStats(NamedTuple):
    """Episodes that ended in one rollout, and the ones it leaves unfinished."""

    count: Tensor  #: ``[]`` (``[G]`` by group) float64, episodes that ended
    return_sum: Tensor  #: ``[]`` (``[G]``) float64, the sum of their returns
    length_sum: Tensor  #: ``[]`` (``[G]``) float64, the sum of their lengths
    next_return: Tensor  #: ``[B]`` float64, each env's unfinished return after the rollout
    next_length: Tensor  #: ``[B]`` float64, each env's unfinished length after the rollout


def episode_statistics(
    rewards: Tensor, dones: Tensor, carried_return: Tensor, carried_length: Tensor, time_index: Tensor, groups: int = 1
) -> EpisodeStats:
    """Returns and lengths of the episodes that ended in a rollout, with no loop over T.

    With ``S`` the running sum of rewards (starting from the return carried in from earlier
    rollouts), an episode ending at ``t`` whose previous end in this rollout was at ``p``
    has return ``S_t - S_p`` (``S_t`` when there was none) and length ``t - p`` (``t + 1``
    plus the carried length when there was none).

    Args:
        rewards: ``[B, T]`` float64.
        dones: ``[B, T]`` bool, the step ended an episode.
        carried_return, carried_length: ``[B]`` float64, each env's unfinished episode.
        time_index: ``[T]``, ``arange(T)`` on the device.
        groups: ``G`` equal blocks of envs (seeds, rows ``i*B/G:(i+1)*B/G``): ``count``,
            ``return_sum`` and ``length_sum`` are then ``[G]``, one per block.
    """
    B, T = rewards.shape
    running = carried_return.unsqueeze(1) + torch.cumsum(rewards, dim=1)  # [B, T]
    last_end = torch.cummax(torch.where(dones, time_index, -1), dim=1).values  # last end <= t
    prev_end = torch.cat([last_end.new_full((B, 1), -1), last_end[:, :-1]], dim=1)  # last end < t
    has_prev = prev_end >= 0
    prev_running = torch.where(has_prev, running.gather(1, prev_end.clamp(min=0)), 0.0)
    episode_return = running - prev_running  # [B, T], meaningful where dones
    episode_length = torch.where(has_prev, time_index - prev_end, time_index + 1 + carried_length.unsqueeze(1))
    d = dones.double()
    # What stays unfinished: the part after each env's last end (all of it without one).
    final_end = last_end[:, -1]
    ended = final_end >= 0
    end_running = running.gather(1, final_end.clamp(min=0).unsqueeze(1)).squeeze(1)
    next_return = torch.where(ended, running[:, -1] - end_running, running[:, -1])
    next_length = torch.where(ended, (T - 1 - final_end).double(), carried_length + T)
    def total(x: Tensor) -> Tensor:
        return x.sum() if groups == 1 else x.view(groups, -1).sum(dim=1)

    return EpisodeStats(total(d), total(episode_return * d), total(episode_length * d), next_return, next_length)


def rollout_statistics(rewards: Tensor, dones: Tensor, carried_return: Tensor, carried_length: Tensor,
                       time_index: Tensor, groups: int, leaves: list[Tensor]) -> dict[str, Tensor]:
    """A rollout's statistic tensors, by name, on plain tensors (part of collect's tail
    program with ``compile``); carries the unfinished episodes into ``carried_return`` and
    ``carried_length`` in place.

    Args:
        rewards: ``[B, T, 1]``; dones: ``[B, T, 1]`` bool; ``carried_*``, ``time_index``
            and ``groups``: :func:`episode_statistics`'s.
        leaves: Tensors whose finiteness ``rollout/finite`` reports, with the rewards'.
    """
    r = rewards.squeeze(-1).double()  # [B, T]
    episodes = episode_statistics(r, dones.squeeze(-1), carried_return, carried_length, time_index, groups=groups)
    carry_episodes(episodes, carried_return, carried_length)
    horizon = r.sum(dim=1)  # [B]
    out = {"returns/min": horizon.min(), "returns/max": horizon.max(), "rewards/min": r.min(), "rewards/max": r.max(),
           "episodes/count": episodes.count, "episodes/return_sum": episodes.return_sum,
           "episodes/length_sum": episodes.length_sum}
    out["returns/std"], out["returns/mean"] = torch.std_mean(horizon, correction=0)
    out["rewards/std"], out["rewards/mean"] = torch.std_mean(r, correction=0)
    finite = torch.isfinite(rewards).all()
    for leaf in leaves:
        finite = finite & torch.isfinite(leaf).all()
    out["rollout/finite"] = finite
    return out


def truncated_final_obs_leaves(buffer: TensorDictBase, horizon: int) -> list[tuple[str, Tensor]]:
    """A rollout buffer's ``final_obs`` float leaves ``[B, T, ...]``, zeroed where the step
    did not truncate: only truncated steps' final observations are valued (the bootstrap)."""
    truncated = buffer.get(TRUNCATED)[:, :horizon]  # [B, T, 1]
    B, T = truncated.shape[:2]
    leaves = []
    for name, leaf in float_leaves(buffer.get(FINAL_OBS)[:, :horizon]):
        mask = truncated.view(B, T, *([1] * (leaf.dim() - 2)))
        leaves.append((FINAL_OBS + name[len(OBS) :], leaf.masked_fill(~mask, 0.0)))
    return leaves


def carry_episodes(stats: EpisodeStats, episode_return: Tensor, episode_length: Tensor) -> None:
    """Write the unfinished episodes into the carried ``[B]`` tensors, in place."""
    episode_return.copy_(stats.next_return)
    episode_length.copy_(stats.next_length)


def truncated_slots(truncated: Tensor, ranks: Tensor, horizon: int,
                    num_members: int = 1) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Where the first ``K`` truncated steps of each member's rollout are, found without
    a host sync.

    The ``k``-th truncated step of a member in flat order is found with a
    ``searchsorted`` on the member's running count of truncations.

    Args:
        truncated: ``[N]`` bool in flat order ``b * T + t`` (``S`` members: ``S`` equal
            blocks of sub-envs, seed-major).
        ranks: ``[K]``, ``arange(1, K + 1)``: the truncation counts to look for, in each
            member.
        horizon: ``T``.
        num_members: ``S``.

    Returns:
        ``env_idx [S * K]`` and ``step_idx [S * K]`` of each member's k-th truncated step,
        seed-major (unused slots point at a valid row of the member, whose value is
        dropped), ``slot [N]``: each row's slot in ``0..S*K-1``, or ``S * K`` for rows that
        did not truncate or came after their member's K-th, and ``overflow []`` bool: a
        member had more than ``K`` truncated steps.
    """
    S, K = num_members, ranks.shape[0]
    n = truncated.shape[0] // S
    by_member = truncated.view(S, n)
    count = torch.cumsum(by_member, 1)  # [S, n] truncations up to each row, in its member
    rows = torch.searchsorted(count, ranks.expand(S, K).contiguous()).clamp_(max=n - 1)  # [S, K]
    first_row = torch.arange(0, S * n, n, device=truncated.device).unsqueeze(1)  # [S, 1]
    rows = (rows + first_row).view(S * K)
    first_slot = torch.arange(0, S * K, K, device=truncated.device).unsqueeze(1)
    slot = torch.where(by_member & (count <= K), count - 1 + first_slot, S * K).view(S * n)
    return rows // horizon, rows % horizon, slot, (count[:, -1] > K).any()


def raise_first_nonfinite(checks: list[tuple[str, Tensor]], env_name: str) -> None:
    """Raise naming the first non-finite entry of ``checks`` (``(key, [B, T, ...])``
    pairs), its env and its step (an error path: syncs freely)."""
    for name, x in checks:
        bad = ~torch.isfinite(x)
        if bad.any():
            env_idx, step_idx = (int(i) for i in bad.nonzero()[0][:2])  # SYNC: error path
            value = x[env_idx, step_idx].flatten()[bad[env_idx, step_idx].flatten()][0].item()  # SYNC: error path
            if name.startswith(OBS):  # column t holds the observation after step t-1
                where = "reset observation" if step_idx == 0 else f"step {step_idx - 1}"
            else:
                where = f"step {step_idx}"
            raise ValueError(
                f"non-finite value {value} in '{name}' from {env_name} "
                f"at env {env_idx}, {where} of this collect"
            )
    raise ValueError("non-finite value in the rollout (on another rank)")
