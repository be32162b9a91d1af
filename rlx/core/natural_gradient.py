"""Natural-gradient building blocks: Fisher-vector products and conjugate gradient.

Pure functions of tensors and callables (a leaf module: nothing else from rlx), used by
:mod:`rlx.algorithms.npg`. Nothing here reads a tensor's value on the host: conjugate
gradient runs a fixed number of iterations and freezes on the device once converged, so
a natural step never waits on a sync.

References: Kakade, "A Natural Policy Gradient" (2001); Schulman et al., "Trust Region
Policy Optimization" (2015), https://arxiv.org/abs/1502.05477; Martens, "New insights
and perspectives on the natural gradient method" (2020) for the Gauss-Newton form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor
from torch.func import grad, jvp, vjp

__all__ = ["CGResult", "conjugate_gradient", "row_dot", "gauss_newton_fvp", "kl_hessian_fvp"]

Vector = Tensor  # a flat parameter-space vector, [P] (or S of them, [S, P])


def row_dot(a: Vector, b: Vector) -> Tensor:
    """``a · b`` of ``[P]`` vectors (0-d), or of each row of ``[S, P]`` ones (``[S, 1]``)."""
    return a.dot(b) if a.dim() == 1 else (a * b).sum(dim=-1, keepdim=True)


class CGResult(NamedTuple):
    """The outcome of :func:`conjugate_gradient`."""

    x: Tensor  #: ``[P]`` (``[S, P]``) approximate solution of ``A x = b``
    residual_norm: Tensor  #: 0-d (``[S]``) ``‖b - A x‖₂`` as tracked by the recursion


def conjugate_gradient(
    matvec: Callable[[Vector], Vector],
    b: Vector,
    *,
    iters: int,
    residual_tol: float = 1e-10,
    callback: Callable[[int, Vector], None] | None = None,
) -> CGResult:
    """Solve ``A x = b`` for a symmetric positive-definite ``A`` given as ``matvec``.

    Runs exactly ``iters`` iterations (a fixed count keeps the host out of the loop);
    once the squared residual falls below ``residual_tol`` every further update is
    multiplied by zero through ``torch.where``, so ``x`` stays where it converged.
    Starting from ``x = 0``, each iterate decreases ``½ xᵀAx - bᵀx``, and after ``P``
    iterations (``P = len(b)``) the solution is exact up to rounding.

    A ``[S, P]`` ``b`` holds S independent systems (S seeds' natural steps, whose Fisher
    is block-diagonal): every dot product, step length and convergence test is per row,
    so row i's iterates are those of a solve of row i alone.

    Args:
        matvec: ``v -> A v`` for ``[P]`` (``[S, P]``) vectors.
        b: ``[P]`` (``[S, P]``) right-hand side.
        iters: Number of iterations (and ``matvec`` calls).
        residual_tol: Freeze once ``‖r‖² < residual_tol``.
        callback: Called as ``callback(i, x)`` after iteration ``i`` (for tests and
            diagnostics; it must not sync if the caller cares).
    """
    x = torch.zeros_like(b)
    r = b.clone()
    p = b.clone()
    rr = row_dot(r, r)
    zero = torch.zeros((), dtype=b.dtype, device=b.device)
    for i in range(iters):
        Ap = matvec(p)
        pAp = row_dot(p, Ap)
        active = (rr >= residual_tol) & (pAp > 0)
        alpha = torch.where(active, rr / torch.where(pAp > 0, pAp, 1.0), zero)
        x = x + alpha * p
        r = r - alpha * Ap
        rr_new = row_dot(r, r)
        beta = torch.where(active, rr_new / torch.where(rr > 0, rr, 1.0), zero)
        p = torch.where(active, r + beta * p, p)
        rr = torch.where(active, rr_new, rr)
        if callback is not None:
            callback(i, x)
    return CGResult(x, rr.sqrt() if b.dim() == 1 else rr.sqrt().squeeze(-1))


def gauss_newton_fvp(
    params_fn: Callable[[Vector], Tensor],
    theta: Vector,
    fisher_product: Callable[[Tensor], Tensor],
    *,
    damping: float = 0.0,
) -> Callable[[Vector], Vector]:
    """Fisher-vector products in the Gauss-Newton form ``(Jᵀ M J / n + damping I) v``.

    ``J`` is the Jacobian of the ``[n, K]`` distribution parameters in the ``[P]``
    weights ``theta`` and ``M`` the per-sample Fisher of the distribution in its
    parameters. ``J v`` comes from forward-mode AD (``torch.func.jvp``), ``Jᵀ u`` from
    one reverse-mode graph built here and reused by every call. ``M`` is positive
    semi-definite and never built from a live graph, so ``vᵀ F v >= 0`` always.

    Args:
        params_fn: ``theta -> [n, K]`` distribution parameters.
        theta: ``[P]`` weights at which ``F`` is taken (the old policy).
        fisher_product: ``u -> M u`` for ``[n, K]`` ``u`` at the old distribution.
        damping: Added multiple of the identity.
    """
    theta = theta.detach()
    dist_params, vjp_fn = vjp(params_fn, theta)
    n = dist_params.shape[0]

    def fvp(v: Vector) -> Vector:
        _, jv = jvp(params_fn, (theta,), (v,))  # [n, K]
        (jtmjv,) = vjp_fn(fisher_product(jv.detach()))
        return jtmjv / n + damping * v

    return fvp


def kl_hessian_fvp(
    kl_fn: Callable[[Vector], Tensor], theta: Vector, *, damping: float = 0.0
) -> Callable[[Vector], Vector]:
    """Fisher-vector products as Hessian-vector products of the mean KL (the fallback).

    ``kl_fn(theta)`` is ``mean KL(π_old || π_theta)`` with ``π_old`` fixed (detached);
    its Hessian at ``theta = θ_old`` is the Fisher. Computed forward-over-reverse:
    ``jvp(grad(kl_fn))``. Slower than :func:`gauss_newton_fvp` but needs only ``kl``.
    """
    theta = theta.detach()
    grad_fn = grad(kl_fn)

    def fvp(v: Vector) -> Vector:
        _, hv = jvp(grad_fn, (theta,), (v,))
        return hv + damping * v

    return fvp
