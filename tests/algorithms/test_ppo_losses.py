"""PPO loss terms against cases derived by hand at the clip boundaries."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from rlx.algorithms.ppo import ppo_losses
from rlx.algorithms.ppo_losses import kl_terms
from rlx.core.compiling import compiled


def _losses(ratio, adv, *, values=None, old_values=None, returns=None, clip=0.2, dual=None, vf_clip=None):
    ratio = torch.tensor(ratio, dtype=torch.float64).view(-1, 1)
    logp = ratio.log().clone().requires_grad_(True)
    old_logp = torch.zeros_like(logp)
    adv = torch.tensor(adv, dtype=torch.float64).view(-1, 1)
    m = ratio.shape[0]
    values = torch.zeros(m, 1, dtype=torch.float64) if values is None else torch.tensor(values, dtype=torch.float64).view(-1, 1)
    values.requires_grad_(True)
    old_values = torch.zeros_like(values) if old_values is None else torch.tensor(old_values, dtype=torch.float64).view(-1, 1)
    returns = torch.zeros_like(values) if returns is None else torch.tensor(returns, dtype=torch.float64).view(-1, 1)
    entropy = torch.full((m, 1), 0.7, dtype=torch.float64)
    out = ppo_losses(
        logp, entropy, values, old_logp, old_values, adv, returns,
        clip_param=clip, dual_clip_param=dual, vf_clip_param=vf_clip, vf_coeff=0.5, entropy_coeff=0.01,
    )
    out.total.backward()
    return out, logp.grad.view(-1), values.grad.view(-1)


def test_policy_loss_takes_the_pessimistic_side_of_the_clip() -> None:
    # ε = 0.2. Per sample, objective = min(r A, clip(r, 0.8, 1.2) A):
    #   r=1.5, A=+1: min(1.5, 1.2) = 1.2   clipped: no gradient
    #   r=0.5, A=+1: min(0.5, 0.8) = 0.5   unclipped: d/dlogp = r A = 0.5
    #   r=1.5, A=-1: min(-1.5, -1.2) = -1.5 unclipped: d/dlogp = -1.5
    #   r=0.5, A=-1: min(-0.5, -0.8) = -0.8 clipped: no gradient
    #   r=1.2, A=+2: on the boundary, both 2.4; clamp passes the gradient at the edge
    out, grad_logp, _ = _losses([1.5, 0.5, 1.5, 0.5, 1.2], [1.0, 1.0, -1.0, -1.0, 2.0])
    assert_close(out.policy, torch.tensor(-(1.2 + 0.5 - 1.5 - 0.8 + 2.4) / 5, dtype=torch.float64))
    # loss = -mean(objective): gradient is -(d objective / d logp) / M.
    assert_close(grad_logp[:4], torch.tensor([0.0, -0.5, 1.5, 0.0], dtype=torch.float64) / 5)
    # Ratios 1.5 and 0.5 lie outside [0.8, 1.2]; 1.2 is on the edge, not outside.
    assert_close(out.clip_fraction, torch.tensor(0.8))


def test_dual_clip_bounds_the_loss_of_negative_advantages() -> None:
    # c = 3, A = -1: objective = max(min(r A, clip(r) A), c A) = max(min(-r, -1.2), -3).
    #   r=5: max(-5, -3) = -3 (bounded, no gradient); r=2: max(-2, -3) = -2 (grad -r = -2)
    #   A = +1, r = 5: dual clip ignores positive advantages: min(5, 1.2) = 1.2
    out, grad_logp, _ = _losses([5.0, 2.0, 5.0], [-1.0, -1.0, 1.0], dual=3.0)
    assert_close(out.policy, torch.tensor(-(-3.0 - 2.0 + 1.2) / 3, dtype=torch.float64))
    assert_close(grad_logp, torch.tensor([0.0, 2.0, 0.0], dtype=torch.float64) / 3)


def test_value_clipping_takes_the_larger_error_and_keeps_its_gradient() -> None:
    # old V = 0, clip 1, return R = 3. V_clip = clamp(V, -1, 1).
    #   V=2:  (2-3)^2 = 1 vs (1-3)^2 = 4  -> 4, from the clipped branch: no gradient
    #   V=0.5: 6.25 vs 6.25 -> 6.25, unclipped gradient 2 (V - R) = -5
    #   V=-2: 25 vs (-1-3)^2 = 16 -> 25, unclipped gradient 2 (-2 - 3) = -10
    out, _, grad_v = _losses(
        [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], values=[2.0, 0.5, -2.0], returns=[3.0, 3.0, 3.0], vf_clip=1.0
    )
    assert_close(out.vf, torch.tensor(0.5 * (4.0 + 6.25 + 25.0) / 3, dtype=torch.float64))
    # total = policy + 0.5 vf: d/dV = 0.5 * 0.5 * 2 (V - R) / M on the unclipped branch.
    assert_close(grad_v, 0.5 * 0.5 * torch.tensor([0.0, -5.0, -10.0], dtype=torch.float64) / 3)


def test_without_value_clipping_the_loss_is_half_the_squared_error() -> None:
    out, _, grad_v = _losses([1.0, 1.0], [0.0, 0.0], values=[2.0, 0.0], returns=[3.0, 1.0])
    assert_close(out.vf, torch.tensor(0.5 * (1.0 + 1.0) / 2, dtype=torch.float64))
    assert_close(grad_v, 0.5 * torch.tensor([-1.0, -1.0], dtype=torch.float64) / 2)


def test_total_combines_the_terms_with_their_coefficients() -> None:
    out, _, _ = _losses([1.1, 0.9], [1.0, -0.5], values=[0.3, 0.1], returns=[1.0, 0.0])
    assert_close(out.entropy, torch.tensor(-0.7, dtype=torch.float64))
    assert_close(out.total.detach(), out.policy + 0.5 * out.vf + 0.01 * out.entropy)


def test_approximate_kl_is_the_k3_estimator() -> None:
    ratios = [1.5, 0.5, 1.0]
    out, _, _ = _losses(ratios, [0.0, 0.0, 0.0])
    expected = sum((r - 1) - math.log(r) for r in ratios) / 3
    assert_close(out.kl, torch.tensor(expected, dtype=torch.float32))


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("scale", [3e-8, 1e-4, 0.1, 0.3, 3.0])
def test_the_kl_terms_are_accurate_and_never_negative_eager_and_compiled(mode: str, scale: float) -> None:
    """``kl_terms(x) = e^x - 1 - x`` of float32 log-ratios against float64 (its series to
    x^12/14! below |x| = 0.25, whose truncation is below 1e-17 of the value there, where
    float64's ``expm1(x) - x`` cancels too; ``expm1(x) - x`` above), the input exact in
    both. Below |x| = 0.25 the series: 9 float32 roundings of a sum of
    positive-leaning terms, within 16u of its value (u = 2^-24), plus the truncation's
    1.4e-8 of it, plus float32's subnormal spacing (2^-149) where x² underflows. Above:
    ``exp(x) - 1 - x`` (inductor's CPU ``expm1``), three roundings of terms no larger than
    e^x + 1 + |x|. Never negative: the first minibatch's KL (0 up to rounding) must not
    come out below 0 in one mode and above it in the other."""
    torch.manual_seed(0)
    x = (torch.randn(4096) * scale).float()
    fn = kl_terms if mode == "eager" else compiled(kl_terms, device="cpu")
    out = fn(x).double()
    x64 = x.double()
    series64 = sum(x64**n / math.factorial(n) for n in range(14, 1, -1))
    exact = torch.where(x64.abs() < 0.25, series64, torch.expm1(x64) - x64)
    u = 2.0**-24
    series = x64.abs() < 0.25
    bound = torch.where(series, (16 * u + 1.4e-8) * exact + 2.0**-149, 3 * u * (x64.exp() + 1 + x64.abs()))
    assert ((out - exact).abs() <= bound).all(), ((out - exact).abs() / bound).max()
    assert (out >= 0).all()
