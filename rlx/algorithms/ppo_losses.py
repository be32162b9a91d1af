"""PPO's clipped objective as a pure function of a minibatch's tensors (Schulman et al.,
2017, https://arxiv.org/abs/1707.06347), each term a member's mean with S members."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from rlx.members.ops import member_rows, seed_means

__all__ = ["PPOLosses", "kl_terms", "ppo_losses"]

#: Below this ``|log r|`` :func:`kl_terms` sums its series rather than subtracting.
_SERIES_BELOW = 0.25


def kl_terms(log_ratio: Tensor) -> Tensor:
    """``(r - 1) - log r`` of each sample, ``r = exp(log_ratio)``: the terms of the KL
    estimator ``E[(r - 1) - log r]`` (never negative), accurate to a few units of
    ``log_ratio``'s precision, relative, eager and compiled alike.

    Written as ``expm1(x) - x`` it is not, compiled: inductor's vectorized CPU code
    computes ``expm1(x)`` as ``exp(x) - 1`` (torch 2.13), which cancels near ``x = 0``:
    float32 log-ratios of 3e-8 gave a mean of -9e-9 where the exact one is +5e-16, so the
    first minibatch's KL (0 up to rounding) came out negative or positive by the mode
    (and decided ``kl_adaptive_lr_per_minibatch``'s first step). For ``|x| < 0.25`` the
    series ``x² (1/2 + x/6 + ... + x⁵/5040)`` (truncated: at most 1.4e-8 of the value
    there, ``2 |x|⁶ / 8!`` over the first term's lower bound), else ``expm1(x) - x``,
    whose value there (at least 0.028) dwarfs ``exp``'s rounding."""
    x = log_ratio
    series = x.square() * (0.5 + x * (1 / 6 + x * (1 / 24 + x * (1 / 120 + x * (1 / 720 + x * (1 / 5040))))))
    return torch.where(x.abs() < _SERIES_BELOW, series, torch.expm1(x) - x)


class PPOLosses(NamedTuple):
    """PPO loss terms for one minibatch (0-d tensors; only ``total`` carries grad)."""

    total: Tensor
    policy: Tensor
    vf: Tensor
    entropy: Tensor  #: minus the mean entropy: the term ``entropy_coeff`` multiplies
    kl: Tensor  #: approximate KL(old || new), ``E[(r - 1) - log r]``
    clip_fraction: Tensor  #: share of samples whose ratio lies outside [1 - ε, 1 + ε]


def ppo_losses(
    logp: Tensor,
    entropy: Tensor,
    values: Tensor,
    old_logp: Tensor,
    old_values: Tensor,
    advantages: Tensor,
    returns: Tensor,
    *,
    clip_param: float | Tensor,
    dual_clip_param: float | None,
    vf_clip_param: float | Tensor | None,
    vf_coeff: float | Tensor,
    entropy_coeff: float | Tensor,
    num_seeds: int = 1,
) -> PPOLosses:
    """The clipped PPO objective, as a loss to minimise.

    With ratio ``r = exp(logp - old_logp)`` and advantage ``A``:

    * policy: ``-mean(min(r A, clip(r, 1-ε, 1+ε) A))``; with dual clip ``c``, samples
      with ``A < 0`` use ``max(min(...), c A)`` instead, bounding the loss of a huge ratio;
    * value (PPO2 clipping): ``0.5 mean(max((V - R)², (V_clip - R)²))`` with
      ``V_clip = V_old + clip(V - V_old, -vf_clip, vf_clip)``; gradients flow through
      whichever error is larger, unlike a clamp of the loss itself;
    * entropy: ``-mean(H)``;
    * total: ``policy + vf_coeff * value + entropy_coeff * entropy``.

    Args:
        logp, entropy, values: ``[M, 1]`` from the current policy (with grad).
        old_logp, old_values, advantages, returns: ``[M, 1]`` from the rollout.
        num_seeds: ``S > 1``: the rows are S equal seed-major blocks and every term is
            ``[S]``, each seed's mean (the gradient of ``total.sum()`` is then each seed's own).
        clip_param, vf_clip_param, vf_coeff, entropy_coeff: a float, or with ``S > 1``
            each member's, ``[S]`` (members that differ in them; float64 gives
            ``1 ± clip_param`` as a float's would be).
    """
    mean = seed_means(num_seeds)
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    surrogate = ratio * advantages
    if isinstance(clip_param, Tensor):  # each member's, for its rows
        low, high = member_rows(1.0 - clip_param, num_seeds, ratio), member_rows(1.0 + clip_param, num_seeds, ratio)
        clip_param = member_rows(clip_param, num_seeds, ratio)
    else:
        low, high = 1.0 - clip_param, 1.0 + clip_param
    clipped = torch.clamp(ratio, low, high) * advantages
    objective = torch.min(surrogate, clipped)
    if dual_clip_param is not None:
        objective = torch.where(advantages < 0, torch.max(objective, dual_clip_param * advantages), objective)
    policy_loss = -mean(objective)
    squared_error = (values - returns).square()
    if vf_clip_param is not None:
        vf_low, vf_high = -vf_clip_param, vf_clip_param
        if isinstance(vf_clip_param, Tensor):
            vf_low, vf_high = member_rows(vf_low, num_seeds, values), member_rows(vf_high, num_seeds, values)
        values_clipped = old_values + torch.clamp(values - old_values, vf_low, vf_high)
        squared_error = torch.max(squared_error, (values_clipped - returns).square())
    vf_loss = 0.5 * mean(squared_error)
    entropy_loss = -mean(entropy)
    if isinstance(vf_coeff, Tensor):
        vf_coeff = vf_coeff.to(vf_loss.dtype)
    total = policy_loss + vf_coeff * vf_loss + entropy_coeff * entropy_loss
    with torch.no_grad():
        log_ratio = log_ratio.detach().float()
        kl = mean(kl_terms(log_ratio))
        clip_fraction = mean(((ratio.detach() - 1.0).abs() > clip_param).float())
    return PPOLosses(total, policy_loss.detach(), vf_loss.detach(), entropy_loss.detach(), kl, clip_fraction)
