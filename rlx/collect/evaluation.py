"""Evaluating a policy on a separate env: complete episodes, deterministic by default."""

from __future__ import annotations

import math
from typing import Any
import torch

from rlx.core._sync import allowed_sync
from rlx.env import OBS, REWARDS, TERMINATED, TRUNCATED
from rlx.members.axis import member_key
from rlx.policy import PolicyBase

__all__ = ["evaluate_policy"]


@torch.no_grad()
def evaluate_policy(policy: PolicyBase, env: Any, *, episodes: int, max_steps: int, deterministic: bool = True,
                    groups: int = 1) -> dict[str, float]:
    """Run the policy on ``env`` until ``episodes`` episodes have ended, in all sub-envs.

    Sub-env ``i`` contributes its first ``(episodes + i) // B`` episodes, so exactly
    ``episodes`` are counted and which ones does not depend on how fast they end:
    counting whichever episodes end first would favour short ones (on a task where
    falling ends an episode, the failures), biasing the mean down. With ``episodes ==
    B`` every sub-env plays exactly one episode. Episodes cut by ``max_steps`` are not
    counted. Uses a fork of torch's RNG, so training continues with the same random
    numbers whether or not it evaluates.

    With ``groups = S > 1`` (a policy of S seeds on ``S * B`` sub-envs, seed-major), each
    seed's B sub-envs play ``episodes`` episodes by the same rule, and each seed's
    statistics come as ``member{i}/eval/...`` beside their mean.

    Returns:
        ``eval/return_mean``, ``eval/length_mean`` (NaN when no episode ended) and
        ``eval/episodes``.
    """
    devices = [env.device] if torch.device(env.device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        obs = env.reset()
        B = env.num_envs
        device = torch.device(env.device)
        ret = torch.zeros(B, dtype=torch.float64, device=device)
        length = torch.zeros(B, dtype=torch.float64, device=device)
        totals = torch.zeros(groups, 3, dtype=torch.float64, device=device)  # count, return sum, length sum
        # Sub-env i's share of the episodes (Stable-Baselines3's split): they sum to `episodes`
        # (in each group of B / groups sub-envs).
        per_group = B // groups
        quota = torch.div(torch.arange(B, device=device) % per_group + episodes, per_group, rounding_mode="floor")
        counted = torch.zeros(B, dtype=torch.long, device=device)
        # Every sub-env starts from the policy's initial state (empty for a feedforward
        # policy) and restarts from it at each episode end.
        state = policy.initial_state(B)
        resets = torch.ones(B, 1, dtype=torch.bool, device=device)
        for t in range(max_steps):
            step = policy.act_step(obs, state, resets, deterministic=deterministic)
            state = step.state
            out = env.step(step.env_actions)
            ret += out.get(REWARDS).squeeze(-1).double()
            length += 1
            done = torch.zeros(B, dtype=torch.bool, device=device)
            for key in (TERMINATED, TRUNCATED):
                if key in out.keys():
                    done |= out.get(key).squeeze(-1)
            resets = done.unsqueeze(-1)
            counts = done & (counted < quota)
            counted += counts.long()
            d = counts.double().view(groups, -1)
            totals += torch.stack([d.sum(1), (ret.view(groups, -1) * d).sum(1), (length.view(groups, -1) * d).sum(1)], dim=1)
            ended = done.double()
            ret *= 1 - ended
            length *= 1 - ended
            obs = out.get(OBS)
            if t % 32 == 31:
                with allowed_sync():
                    if bool((counted >= quota).all()):  # SYNC: evaluation only, every 32 steps
                        break
        with allowed_sync():
            rows = totals.tolist()  # SYNC: evaluation result
    count, return_sum, length_sum = (sum(r[k] for r in rows) for k in range(3))
    out = {
        "eval/return_mean": return_sum / count if count else math.nan,
        "eval/length_mean": length_sum / count if count else math.nan,
        "eval/episodes": count,
    }
    for i, (n, r, l) in enumerate(rows if groups > 1 else []):
        out.update({member_key(i, "eval/return_mean"): r / n if n else math.nan,
                    member_key(i, "eval/length_mean"): l / n if n else math.nan, member_key(i, "eval/episodes"): n})
    return out
