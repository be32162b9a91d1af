"""The per-member pieces of an update over S members in seed-major rows.

The env holds ``S * B`` sub-envs and rows ``i*B:(i+1)*B`` belong to member ``i``; every
tensor an update sees keeps that *seed-major* order with the same number of rows per
member. Then

* a loss that is the *sum over members* of each member's mean (:func:`per_seed_mean`)
  gives each member's parameters exactly the gradient of its own loss, since members
  share no parameter;
* gradient clipping, which couples a model's elements, is done per member
  (:func:`clip_grad_norm_per_seed_`);
* advantages are normalized per member (:func:`normalize_per_seed`), and an epoch's
  shuffle permutes within each member and deals every minibatch the same number of rows
  of each member (:func:`seed_major_permutation`).

Each piece is tested against S separate single-member computations in float64
(``tests/members/test_seeds.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from rlx.core import distributed as rdist
from rlx.core.layout import by_member, from_by_member, member_lead, member_rows  # noqa: F401 (re-exported)
from rlx.members import optim
from rlx.members.stacked import seed_rows

__all__ = [
    "member_lead",
    "by_member",
    "from_by_member",
    "member_rows",
    "per_seed_mean",
    "seed_means",
    "normalize_per_seed",
    "clip_grad_norm_per_seed_",
    "seed_major_permutation",
    "seed_minibatch_bounds",
    "grad_norms_per_seed",
]


def per_seed_mean(x: Tensor, num_seeds: int) -> Tensor:
    """``[S]``: the mean of each seed's rows of ``x`` (``[S * n, ...]``, seed-major)."""
    return seed_rows(x, num_seeds).flatten(1).mean(dim=1)


def seed_means(num_seeds: int):
    """The reduction of a loss term: the mean over rows (0-d), or with ``num_seeds = S > 1``
    (S equal seed-major blocks) each seed's mean, ``[S]``."""
    if num_seeds > 1:
        return lambda x: per_seed_mean(x, num_seeds)
    return lambda x: x.mean()


def normalize_per_seed(advantages: Tensor, num_seeds: int, eps: float = 1e-8, *, across_ranks: bool = False) -> Tensor:
    """``(A - mean_i) / (std_i + eps)`` with each seed's own mean and (population) std,
    as a single-seed run normalizes its whole batch; ``across_ranks``: over seed i's rows
    of every rank (torch.distributed, equal rows per rank)."""
    a = seed_rows(advantages, num_seeds)
    flat = a.flatten(1)
    if across_ranks:
        wide = flat.double()
        moments = rdist.all_reduce_(torch.stack([wide.mean(dim=1), wide.square().mean(dim=1)]), "mean")  # [2, S]
        mean, std = moments[0], (moments[1] - moments[0].square()).clamp(min=0).sqrt()
    else:
        std, mean = torch.std_mean(flat, dim=1, correction=0)
    shape = (num_seeds,) + (1,) * (a.dim() - 1)
    return ((a - mean.view(shape)) / (std.view(shape) + eps)).view_as(advantages).to(advantages.dtype)


def grad_norms_per_seed(grads: Sequence[Tensor], num_seeds: int) -> Tensor:
    """``[S]``: each seed's gradient norm over slice ``i`` of every stacked gradient (at
    least float32)."""
    for g in grads:
        if g.shape[0] != num_seeds:
            raise ValueError(f"grad_norms_per_seed: a gradient of shape {tuple(g.shape)} has no leading seed dim {num_seeds}")
    wide = [g.flatten(1) if g.dtype in (torch.float32, torch.float64) else g.flatten(1).float() for g in grads]
    # Eagerly the squares as one multi-tensor product (x * x, as square computes them: the
    # same bits), one kernel on CUDA where a square each ran; a compiled program fuses each
    # square into its sum.
    squares = [g.square() for g in wide] if torch.compiler.is_compiling() else torch._foreach_mul(wide, wide)
    return torch.stack([sq.sum(dim=1) for sq in squares]).sum(dim=0).sqrt()


#: Device types whose compiled programs take each gradient's norm as a reduction of its
#: own in :func:`clip_grad_norm_`: a CPU's, where inductor 2.13's C++ wrapper runs
#: ``_foreach_norm`` through a slow fallback (about 10% of a small update). Elsewhere
#: ``_foreach_norm`` stays one op in the program: on CUDA one multi-tensor kernel (and its
#: cleanup) where the reductions would be a kernel each, 13 launches of a minibatch
#: update's 66 at vs_jax.py's setting (``benchmarks/experiments/cuda_launches.py``).
PER_GRADIENT_NORMS = ("cpu",)


def clip_grad_norm_(params: Sequence[Tensor], max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)``: the same
    formula (``max_norm / (norm + 1e-6)``, at most 1, over every gradient's norm), the
    gradients' norms by ``_foreach_norm`` (eagerly one op; compiled for a CPU, each a
    reduction inductor fuses: :data:`PER_GRADIENT_NORMS`)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    per_gradient = torch.compiler.is_compiling() and grads[0].device.type in PER_GRADIENT_NORMS
    norms = [torch.linalg.vector_norm(g) for g in grads] if per_gradient else torch._foreach_norm(grads)
    total = torch.linalg.vector_norm(torch.stack(norms))
    torch._foreach_mul_(grads, (max_norm / (total + 1e-6)).clamp(max=1.0))


def clip_grad_norm_per_seed_(params: Sequence[Tensor], max_norm: float, num_seeds: int) -> Tensor:
    """Clip each seed's gradient to ``max_norm`` in place, as
    ``torch.nn.utils.clip_grad_norm_`` clips one model's: seed i's norm is taken over
    slice ``i`` of every stacked parameter (leading dim S).

    Returns:
        ``[S]`` each seed's gradient norm before clipping.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(num_seeds, device=params[0].device if params else None)
    norms = grad_norms_per_seed(grads, num_seeds)
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    dtype = grads[0].dtype
    if optim.takes_dense(grads[0]) and all(g.dtype == dtype for g in grads):  # one multi-tensor kernel on CUDA
        torch._foreach_mul_(grads, optim.dense_coefficients(coef.to(dtype).expand(len(grads), num_seeds), grads))
    else:
        for g in grads:
            g.mul_(coef.view(num_seeds, *([1] * (g.dim() - 1))).to(g.dtype))
    return norms


def seed_major_permutation(num_seeds: int, rows_per_seed: int, minibatch_rows: int, *, device: torch.device | str = "cpu",
                           generator: torch.Generator | None = None, shuffle: bool = True,
                           ) -> tuple[Tensor, list[tuple[int, int]]]:
    """An epoch's shuffle of ``S * n`` seed-major rows that permutes within each seed and
    deals each minibatch ``m`` rows of every seed (the last gets ``n mod m`` when ``m``
    does not divide ``n``), seed-major inside the minibatch.

    Args:
        num_seeds: ``S``.
        rows_per_seed: ``n``.
        minibatch_rows: ``m``, rows *per seed* in a minibatch.
        shuffle: ``False`` keeps each seed's rows in order (minibatch k holds rows
            ``k*m:(k+1)*m`` of every seed, as an unshuffled single-seed epoch).

    Returns:
        ``index`` (``[S * n]``; ``epoch = x[index]``) and each minibatch's
        ``(start, rows)`` in the epoch, ``rows = S * m``.
    """
    S, n, m = num_seeds, rows_per_seed, minibatch_rows
    bounds = seed_minibatch_bounds(S, n, m)
    if shuffle:
        order = torch.rand(S, n, device=device, generator=generator).argsort(dim=1)
    else:
        order = torch.arange(n, device=device).expand(S, n)
    perm = order + (torch.arange(S, device=device) * n).unsqueeze(1)  # [S, n], seed i's rows
    return torch.cat([perm[:, lo : min(lo + m, n)].reshape(-1) for lo in range(0, n, m)]), bounds


def seed_minibatch_bounds(num_seeds: int, rows_per_seed: int, minibatch_rows: int) -> list[tuple[int, int]]:
    """``(start, rows)`` of each minibatch of :func:`seed_major_permutation`'s epoch: ``m``
    rows of every seed each (the last ``n mod m``)."""
    S, n, m = num_seeds, rows_per_seed, minibatch_rows
    if not 1 <= m <= n:
        raise ValueError(f"seed minibatches: minibatch_rows (per seed) must be in [1, {n}], got {m}")
    return [(S * lo, S * (min(lo + m, n) - lo)) for lo in range(0, n, m)]
