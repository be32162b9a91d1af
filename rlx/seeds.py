"""S independent agents as one batch: the seed-stacked model and the per-seed update pieces.

Issue #20's layout: the env holds ``S * B`` sub-envs and rows ``i*B:(i+1)*B`` belong to
seed ``i``; every tensor the update sees keeps that *seed-major* order with the same
number of rows per seed. Then

* the networks of the S agents run as one batched matmul per layer
  (:mod:`rlx.stacked`: :class:`StackedMLPActorCritic` and
  :class:`StackedRecurrentActorCritic`, weights ``[S, in, out]``, ``torch.baddbmm`` over
  ``[S, rows, in]``), which ``benchmarks/seed_stacking.py`` measured faster than a loop
  over S modules and as fast as ``torch.func.vmap`` over stacked parameters;
* a loss that is the *sum over seeds* of each seed's mean (:func:`per_seed_mean`) gives
  each seed's parameters exactly the gradient of its own loss, since the seeds share no
  parameter;
* gradient clipping, which couples a model's elements, is done per seed
  (:func:`clip_grad_norm_per_seed_`), and the optimizer keeps each seed's state apart
  (:mod:`rlx.seed_optim`: Adam and AdamW with a step count, LR and freeze per seed;
  any other optimizer steps as usual, then the seeds held still are put back);
* advantages are normalized per seed (:func:`normalize_per_seed`), and an epoch's
  shuffle permutes within each seed and deals every minibatch the same number of rows
  of each seed (:func:`seed_major_permutation`).

Each piece is tested against S separate single-seed computations in float64
(``tests/test_seeds.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from rlx import distributed as rdist
from rlx.seed_optim import SeedAdam, masked_step_, scale_steps_per_seed_
from rlx.stacked import (  # the seed-stacked models, re-exported
    StackedLinear,
    StackedMLPActorCritic,
    StackedRecurrentActorCritic,
    StackedRNNCell,
    seed_rows,
)

__all__ = [
    "StackedLinear",
    "StackedMLPActorCritic",
    "StackedRNNCell",
    "StackedRecurrentActorCritic",
    "seed_rows",
    "per_seed_mean",
    "seed_means",
    "normalize_per_seed",
    "clip_grad_norm_per_seed_",
    "scale_steps_per_seed_",
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
    return torch.stack([g.square().sum(dim=1) for g in wide]).sum(dim=0).sqrt()


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



class SeedGroup:
    """The per-seed state and steps of an algorithm with ``num_seeds = S > 1``.

    ``active`` is ``[S]`` float: 1 for a seed whose updates apply, 0 for one that
    diverged (a non-finite gradient norm: frozen where it was, for good) or that a stop
    condition marked done (:meth:`mark_done`).

    Args:
        num_seeds: ``S``.
        device: Where the masks live.
    """

    def __init__(self, num_seeds: int, device: torch.device) -> None:
        self.num_seeds = num_seeds
        self.alive = torch.ones(num_seeds, dtype=torch.bool, device=device)
        self.done = torch.zeros(num_seeds, dtype=torch.bool, device=device)
        self._done_host = [False] * num_seeds  # a host mirror: the trainer asks every iteration
        #: ``[S]`` each seed's LR over the optimizer's (the KL-adaptive LR moves it per seed).
        self.lr_factor = torch.ones(num_seeds, device=device)
        self._lr_factor_host = [1.0] * num_seeds

    def active(self) -> Tensor:
        """``[S]`` float: 1 where a seed's updates apply."""
        return (self.alive & ~self.done).float()

    def mark_done(self, seeds: Sequence[int]) -> None:
        """Stop updating ``seeds`` (their stop condition was met); the others go on."""
        for i in seeds:
            if not self._done_host[i]:
                self._done_host[i] = True
                self.done[i] = True

    def lr_factors(self) -> list[float]:
        """Each seed's LR over the optimizer's (host mirror)."""
        return list(self._lr_factor_host)

    def set_lr_factors(self, factors: Sequence[float]) -> None:
        """Set each seed's LR factor (a fill per changed seed: no host sync)."""
        for i, f in enumerate(factors):
            if f != self._lr_factor_host[i]:
                self._lr_factor_host[i] = float(f)
                self.lr_factor[i].fill_(float(f))

    def all_done(self) -> bool:
        """Whether every seed met its stop condition (read on the host, no sync)."""
        return all(self._done_host)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, params: list[Tensor], max_grad_norm: float | None,
                       gate: Tensor | None = None, running: Tensor | None = None) -> None:
        """Clip each seed's gradient, then step the optimizer once for all seeds, each
        seed's parameters moving only where it is active, its gradient finite and its
        ``gate`` (a KL early stop's ``[S]`` open mask) open, at its own LR factor; and
        its optimizer state advancing only where it is active and ``running`` (open when
        the epoch began: see :mod:`rlx.seed_optim`). A non-finite gradient marks the
        seed diverged. Under torch.distributed the gradients are first averaged over
        ranks, so every rank clips, gates and freezes alike."""
        rdist.all_reduce_grads_(params)
        if max_grad_norm is not None:
            norms = clip_grad_norm_per_seed_(params, max_grad_norm, self.num_seeds)
        else:
            norms = grad_norms_per_seed([p.grad for p in params if p.grad is not None], self.num_seeds)
        self.alive &= torch.isfinite(norms)
        active = self.active()
        factor = active * self.lr_factor
        if gate is not None:
            factor = factor * gate
        update = active * running if running is not None else active
        if isinstance(optimizer, SeedAdam):
            optimizer.step(update=update, factor=factor)
        else:
            masked_step_(optimizer, params, update, factor)
        optimizer.zero_grad(set_to_none=True)

    def add_activity(self, stats) -> None:
        """``seed{i}/active`` (1 while seed i updates, 0 once it diverged or is done) and
        ``seeds/active``, their count, into a :class:`~rlx.stats.Stats`."""
        active = self.active()
        for i in range(self.num_seeds):
            stats.add(f"seed{i}/active", active[i], "min")
        stats.add("seeds/active", active.sum(), "sum")

    def state_dict(self) -> dict[str, Tensor]:
        return {"alive": self.alive.clone(), "done": self.done.clone(), "lr_factor": self.lr_factor.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.alive.copy_(state["alive"])
        self.done.copy_(state["done"])
        self._done_host = [bool(d) for d in state["done"].tolist()]  # SYNC: at load, the host mirrors
        self.lr_factor.copy_(state["lr_factor"])
        self._lr_factor_host = [float(f) for f in state["lr_factor"].tolist()]  # SYNC: at load


class SeedStats:
    """Adds ``[S]`` statistics to a :class:`~rlx.stats.Stats`: ``seed{i}/name`` for each
    seed and, under ``name``, their mean (their max for a ``"max"`` statistic, their sum
    for a ``"sum"`` one)."""

    def __init__(self, stats, num_seeds: int) -> None:
        self.stats, self.num_seeds = stats, num_seeds

    def add(self, name: str, value: Tensor, op: str = "mean") -> None:
        for i in range(self.num_seeds):
            self.stats.add(f"seed{i}/{name}", value[i], op)
        across = {"max": value.max(), "min": value.min(), "sum": value.sum()}.get(op, value.mean())
        self.stats.add(name, across, op)
