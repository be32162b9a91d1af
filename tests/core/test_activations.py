"""rlx's CPU tanh equals torch's to float rounding, through every transform rlx uses."""

from __future__ import annotations

import torch
from torch.func import grad, jvp, vmap

from rlx.core.activations import FAST_TANH_MIN_NUMEL, Tanh, tanh


def _pair(x: torch.Tensor):
    return (lambda z: (tanh(z) ** 3).sum()), (lambda z: (torch.tanh(z) ** 3).sum())


def test_the_fast_tanh_and_its_derivatives_are_torchs() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(FAST_TANH_MIN_NUMEL // 64, 64, generator=g, dtype=torch.float64) * 3
    ours, torchs = _pair(x)
    torch.testing.assert_close(tanh(x), torch.tanh(x), rtol=0, atol=1e-15)
    torch.testing.assert_close(grad(ours)(x), grad(torchs)(x), rtol=0, atol=1e-14)
    v = torch.randn(x.shape, generator=g, dtype=torch.float64)
    torch.testing.assert_close(jvp(grad(ours), (x,), (v,))[1], jvp(grad(torchs), (x,), (v,))[1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(vmap(grad(ours))(x[:4]), vmap(grad(torchs))(x[:4]))
    xr = x.clone().requires_grad_()
    (g1,) = torch.autograd.grad(ours(xr), xr, create_graph=True)
    (g0,) = torch.autograd.grad(torchs(xr), xr, create_graph=True)
    torch.testing.assert_close(torch.autograd.grad(g1.sum(), xr)[0], torch.autograd.grad(g0.sum(), xr)[0])


def test_float32_error_is_rounding_and_small_or_traced_inputs_take_torchs_op() -> None:
    x = torch.linspace(-12, 12, FAST_TANH_MIN_NUMEL)
    assert (tanh(x) - torch.tanh(x)).abs().max() < 4e-7
    small = torch.linspace(-3, 3, 100)
    assert torch.equal(tanh(small), torch.tanh(small))  # below the threshold: torch's kernel
    traced = torch.jit.trace(Tanh(), (x,))
    assert "tanh" in str(traced.graph) and torch.equal(traced(x), torch.tanh(x))
    assert isinstance(Tanh(), torch.nn.Tanh)
