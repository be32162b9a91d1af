"""The member axis: S members trained as one batch, S = 1 included.

An algorithm owns one :class:`Members` and asks it every question whose answer depends
on how many members train together: how a loss term is averaged, how advantages are
normalized, how an epoch is shuffled and cut into minibatches, how gradients are
clipped and applied, which members still update, and how statistics are named. The
algorithm's own code is the same for every S.

S = 1 is a population of one, and its answers are a single run's: 0-d statistics under
their plain names, state without a member dim (so its checkpoints are a single run's),
torch's own optimizer kernels, and data-parallel reductions of one batch. With S > 1,
rows are seed-major (member ``i`` owns rows ``i*n:(i+1)*n`` of every ``[S * n, ...]``
tensor), per-member values are ``[S]``, and statistics come as ``member{i}/name``
(:func:`member_key`) plus their mean under ``name``. Members share no parameter: nothing
is averaged across them. Runs written before 2026-11-27 named them ``seed{i}/name``;
:func:`member_metric` reads either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from rlx.core import distributed as rdist
from rlx.core.config_fields import ConfigError
from rlx.core.layout import member_lead
from rlx.members.ops import (
    clip_grad_norm_,
    clip_grad_norm_per_seed_,
    grad_norms_per_seed,
    normalize_per_seed,
    per_seed_mean,
    seed_major_permutation,
    seed_minibatch_bounds,
)
from rlx.members.optim import SeedAdam, adam_step_, masked_step_, seed_optimizer, steps_functionally
from rlx.members.stacked import seed_rows, stacked_model_cls

__all__ = ["Members", "MemberStats", "autocasts_bf16", "member_key", "member_metric"]


def member_key(i: int, name: str) -> str:
    """The name of member ``i``'s statistic ``name``: ``member{i}/name``."""
    return f"member{i}/{name}"


def member_metric(metrics: Mapping[str, Any], i: int, name: str, default: Any = None) -> Any:
    """Member ``i``'s ``name`` in a row of statistics: ``member{i}/name``, or in a run
    written before 2026-11-27 (whose ``metrics.jsonl`` says ``seed{i}/name``) that;
    ``default`` where neither is there."""
    key = member_key(i, name)
    if key in metrics:
        return metrics[key]
    return metrics.get(f"seed{i}/{name}", default)


def _clear_grads(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.zero_grad(set_to_none=True)``, written so that a compiled update traces it."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = None


class MemberStats:
    """Adds per-member statistics to a :class:`~rlx.core.stats.Stats`: with S > 1 an ``[S]``
    value becomes ``member{i}/name`` for each member and, under ``name``, their mean (their
    max for a ``"max"`` statistic, their sum for a ``"sum"`` one); with S = 1 a 0-d value
    goes in under ``name``."""

    def __init__(self, stats: Any, size: int) -> None:
        self.stats, self.size = stats, size

    def add(self, name: str, value: Tensor, op: str = "mean") -> None:
        if self.size == 1:
            self.stats.add(name, value, op)
            return
        for i in range(self.size):
            self.stats.add(member_key(i, name), value[i], op)
        across = {"max": value.max(), "min": value.min(), "sum": value.sum()}.get(op, value.mean())
        self.stats.add(name, across, op)


class Members:
    """The member axis of one algorithm (see the module docstring).

    ``active()`` is 1 for a member whose updates apply and 0 for one that diverged (a
    non-finite gradient or rollout: frozen where it was, for good) or that a stop
    condition marked done (:meth:`mark_done`). A single run (S = 1) is never frozen: its
    divergence is an error (``FloatingPointError`` from ``step()``).

    Args:
        size: ``S``, the number of members.
        device: Where the masks live.
    """

    def __init__(self, size: int, device: torch.device) -> None:
        self.size = size
        self.device = device
        #: ``[S]`` bool: members whose updates and rollouts stayed finite.
        self.alive = torch.ones(size, dtype=torch.bool, device=device)
        #: ``[S]`` bool: members a stop condition marked done.
        self.done = torch.zeros(size, dtype=torch.bool, device=device)
        self._done_host = [False] * size  # a host mirror: the trainer asks every iteration
        #: ``[S]`` each member's LR over the optimizer's (the KL-adaptive LR moves it per member).
        self.lr_factor = torch.ones(size, device=device)
        self._lr_factor_host = [1.0] * size
        self._one = torch.ones((), device=device)
        #: The hyperparameters that differ between members (:mod:`rlx.members.hparams`),
        #: set by the algorithm; ``None`` or empty when all are shared.
        self.hparams: Any = None

    # -- layout ----------------------------------------------------------------------------

    @property
    def lead(self) -> tuple[int, ...]:
        """The leading shape of a per-member value: ``()`` for one member, ``(S,)`` else."""
        return member_lead(self.size)

    @property
    def prefixes(self) -> list[str]:
        """The name prefix of each member's statistics: ``member{i}/`` with S > 1; none for
        a single run, whose statistics carry their plain names."""
        return [] if self.size == 1 else [member_key(i, "") for i in range(self.size)]

    @property
    def compile_dynamic(self) -> bool | None:
        """``torch.compile``'s ``dynamic`` for the loss: static shapes with S > 1 (a
        minibatch has at most two sizes, and inductor in torch 2.13 fails on the
        per-member means under dynamic shapes); torch's choice for a single run."""
        return None if self.size == 1 else False

    @property
    def gates_lr(self) -> bool:
        """Whether a KL early stop gates the optimizer's (tensor) learning rate: a single
        run's; S members gate each member's step factor instead, leaving the shared LR."""
        return self.size == 1

    def mean_each(self, x: Tensor) -> Tensor:
        """``[S]``: each member's mean over its rows, ``[1]`` for a single run (for the
        code that keeps a member dim throughout, such as NPG's ``[S, P]`` vectors)."""
        return per_seed_mean(x, self.size)

    def sum(self, x: Tensor) -> Tensor:
        """The sum over rows: 0-d, or ``[S]`` each member's."""
        return x.sum() if self.size == 1 else seed_rows(x, self.size).flatten(1).sum(dim=1)

    def rows_of(self, x: Tensor) -> Tensor:
        """``[S * n, ...]`` -> ``[S, n, ...]``: each member's rows (S = 1: ``[1, n, ...]``)."""
        return seed_rows(x, self.size)

    def normalize(self, advantages: Tensor) -> Tensor:
        """``(A - mean) / (std + 1e-8)`` with each member's mean and population std over
        its rows of every rank."""
        if self.size > 1:
            return normalize_per_seed(advantages, self.size, across_ranks=rdist.world_size() > 1)
        if rdist.world_size() == 1:
            std, mean = torch.std_mean(advantages, correction=0)
        else:
            a = advantages.double()
            moments = rdist.all_reduce_(torch.stack([a.mean(), a.square().mean()]), "mean")
            mean = moments[0]
            std = (moments[1] - mean.square()).clamp(min=0).sqrt()
        return ((advantages - mean) / (std + 1e-8)).to(advantages.dtype)

    # -- epochs and minibatches ------------------------------------------------------------

    def minibatch_bounds(self, units: int, minibatch_units: int) -> list[tuple[int, int]]:
        """``(first unit, units)`` of each minibatch of an epoch over ``units`` units per
        member, ``minibatch_units`` of every member each (the last gets the rest)."""
        return seed_minibatch_bounds(self.size, units, min(minibatch_units, units))

    def epoch_order(self, units: int, minibatch_units: int, *, shuffle: bool) -> Tensor | None:
        """``[S * units]`` this epoch's order of the batch (``epoch = x[index]``), each
        minibatch taking the same number of every member's units; ``None`` when the
        batch's own order serves.

        Drawn on the device, in a way a CUDA graph can hold: on CUDA by sorting uniform
        draws (``randperm`` on CUDA draws orders of fewer than 30,000 from the CPU
        generator and copies them over, which no graph can replay); on a CPU by
        ``randperm``, ten times faster there than the sort."""
        if self.size == 1:
            if not shuffle:
                return None
            if self.device.type == "cuda":
                return torch.rand(units, device=self.device).argsort()
            return torch.randperm(units, device=self.device)
        index, _ = seed_major_permutation(self.size, units, min(minibatch_units, units), device=self.device,
                                          shuffle=shuffle)
        return index

    def subsample(self, rows: int, n: int) -> Tensor:
        """``n`` random rows of every member (of ``rows`` per member), seed-major; drawn as
        :meth:`epoch_order` draws, in a way a CUDA graph can hold."""
        if self.size == 1:
            return self.epoch_order(rows, rows, shuffle=True)[:n]
        order = torch.rand(self.size, rows, device=self.device).argsort(dim=1)[:, :n]
        return (order + torch.arange(self.size, device=self.device).unsqueeze(1) * rows).reshape(-1)

    # -- which members update ------------------------------------------------------------

    def active(self) -> Tensor:
        """1.0 where a member's updates apply (0-d for one member, else ``[S]``)."""
        if self.size == 1:
            return self._one
        return (self.alive & ~self.done).float()

    def freeze_nonfinite_(self, *rollout: Tensor) -> None:
        """Freeze, before any update, each member whose rollout entries (``[S * n, ...]``
        each) hold NaN or inf; on every rank alike. A single run is left to fail."""
        if self.size == 1:
            return
        finite = torch.stack([self.rows_of(torch.isfinite(x)).flatten(1).all(dim=1) for x in rollout]).all(dim=0)
        self.alive &= rdist.all_reduce_(finite.float(), "min") > 0

    def keep_finite_(self, before: Tensor, after: Tensor) -> tuple[Tensor, Tensor]:
        """A natural step's ``[S, P]`` parameters ``after`` where a member is active and its
        step finite, ``before`` elsewhere (a non-finite step freezes the member for good),
        and the ``[S]`` 1/0 mask of the members that moved."""
        if self.size > 1:
            self.alive &= torch.isfinite(after).all(dim=1)
        keep = self.active().reshape(-1) > 0
        return torch.where(keep.unsqueeze(1), after, before), keep

    def mark_done(self, members: Sequence[int]) -> None:
        """Stop updating ``members`` (their stop condition was met); the others go on."""
        for i in members:
            if not self._done_host[i]:
                self._done_host[i] = True
                self.done[i] = True

    def all_done(self) -> bool:
        """Whether every member met its stop condition (read on the host, no sync)."""
        return all(self._done_host)

    def lr_factors(self) -> list[float]:
        """Each member's LR over the optimizer's (host mirror)."""
        return list(self._lr_factor_host)

    def set_lr_factors(self, factors: Sequence[float]) -> None:
        """Set each member's LR factor (a fill per changed member: no host sync)."""
        for i, f in enumerate(factors):
            if f != self._lr_factor_host[i]:
                self._lr_factor_host[i] = float(f)
                self.lr_factor[i].fill_(float(f))

    def mirror_lr_factors(self, factors: Sequence[float]) -> None:
        """Set the host mirror of factors the device already holds (adapted there)."""
        self._lr_factor_host = [float(f) for f in factors]

    def learning_rates(self, base: float) -> list[float]:
        """Each member's learning rate: ``base`` times its factor (host values, no sync)."""
        return [base * f for f in self._lr_factor_host]

    def set_learning_rates(self, base: float, lrs: Sequence[float]) -> float:
        """Give each member its learning rate; returns the base LR the optimizer should
        hold (a single run's own; with S members the base stays and each member's factor
        moves)."""
        if self.size == 1:
            return float(lrs[0])
        self.set_lr_factors([lr / base for lr in lrs])
        return base

    # -- model and optimizer -----------------------------------------------------------------

    def model_cls_and_config(self, model_cls: type[nn.Module] | None, model_config: dict[str, Any] | None,
                             default_cls: type[nn.Module], seed: int | None) -> tuple[Any, dict[str, Any] | None]:
        """The model class and its config: S members stack the default model (member
        ``i`` starting where a single run with ``seed + i`` starts)."""
        if self.size == 1:
            return model_cls, model_config
        return (model_cls or stacked_model_cls(default_cls),
                {**(model_config or {}), "num_seeds": self.size, "seed": seed})

    def optimizer(self, optimizer_cls: type[torch.optim.Optimizer], params: list[nn.Parameter],
                  kwargs: dict[str, Any]) -> torch.optim.Optimizer:
        """The optimizer over ``params``; with S members each member's state advances on
        its own steps only (:mod:`rlx.members.optim`).

        Raises:
            ValueError: an optimizer option that S members cannot keep apart.
        """
        if self.size == 1:
            return optimizer_cls(params, **kwargs)
        return seed_optimizer(optimizer_cls, params, self.size, kwargs)

    def amp_dtype(self, device: torch.device, enabled: bool = False) -> torch.dtype:
        """``enable_amp``'s dtype: bf16 for one member and for many, wherever the device
        computes it (every CPU; CUDA GPUs from Ampere on), which needs no loss scale, so
        the update steps as it does without AMP (compiled whole, Adam on the device). fp16
        with a loss scale only on an older GPU, for one member (a shared loss scale would
        let one member's overflow skip or rescale every member's step).

        Raises:
            ConfigError: ``enabled`` with S members on a GPU without bf16.
        """
        if autocasts_bf16(device):
            return torch.bfloat16
        if enabled and self.size > 1:
            raise ConfigError(f"enable_amp: num_seeds={self.size} needs bf16 autocast, which this GPU "
                              f"({torch.cuda.get_device_name(device)}) does not compute (fp16's loss scale would be "
                              "shared by the members); set enable_amp=False or num_seeds=1")
        return torch.float16

    def optimizer_step(
        self,
        optimizer: torch.optim.Optimizer,
        params: list[Tensor],
        *,
        max_grad_norm: float | None,
        grad_scaler: torch.amp.GradScaler,
        gate: Tensor | None = None,
        running: Tensor | None = None,
        lr: tuple[Tensor, Tensor] | None = None,
        clip_groups: Sequence[Sequence[Tensor]] | None = None,
    ) -> None:
        """Average gradients over ranks, clip each member's, step, clear the gradients.

        Args:
            gate: A KL early stop's open mask (0-d or ``[S]``): a closed member's
                parameters do not move.
            running: Members still open when the epoch began (0-d for a single run):
                only their optimizer state advances, so the epochs after a KL early stop
                change nothing, whether the loop ends at the stop or runs them.
            lr: ``(base, applied)`` tensor learning rates of a single run: the step
                applies ``base * gate`` (what a captured update reads).
            clip_groups: Parameter groups clipped to ``max_grad_norm`` each (the actor's
                and the critic's); ``None``: ``params`` as one.
        """
        rdist.all_reduce_grads_(params)  # data parallel: the gradient of the global batch
        functional = steps_functionally(optimizer, grad_scaler)
        if functional:  # as torch's step: a parameter without a gradient is not stepped
            params = [p for p in params if p.grad is not None]
        if self.size == 1:
            if gate is not None and lr is not None:
                torch.mul(lr[0], gate, out=lr[1])
            if not functional:  # any other optimizer, or a float16 loss scale: torch's step
                if max_grad_norm is not None:
                    grad_scaler.unscale_(optimizer)
                    for group in clip_groups or (params,):
                        torch.nn.utils.clip_grad_norm_(group, max_grad_norm, foreach=True)
                grad_scaler.step(optimizer)
                grad_scaler.update()
                optimizer.zero_grad(set_to_none=True)
                return
            if max_grad_norm is not None:
                for group in clip_groups or (params,):
                    clip_grad_norm_(group, max_grad_norm)
            adam_step_(optimizer, params, [p.grad for p in params], update=running > 0 if running is not None else None)
            _clear_grads(optimizer)
            return
        if max_grad_norm is not None:
            norms = torch.stack([clip_grad_norm_per_seed_(group, max_grad_norm, self.size)
                                 for group in clip_groups or (params,)]).sum(0)
        else:
            norms = grad_norms_per_seed([p.grad for p in params if p.grad is not None], self.size)
        self.alive.copy_(self.alive & torch.isfinite(norms))
        active = self.active()
        factor = active * self.lr_factor
        if gate is not None:
            factor = factor * gate
        update = active * running if running is not None else active
        if functional:
            adam_step_(optimizer, params, [p.grad for p in params], update=update > 0, factor=factor)
            _clear_grads(optimizer)
        else:
            if isinstance(optimizer, SeedAdam):  # its own step() (the functional one's reference in the tests)
                optimizer.step(update=update, factor=factor)
            else:
                masked_step_(optimizer, params, update, factor)
            optimizer.zero_grad(set_to_none=True)

    # -- statistics and state ----------------------------------------------------------------

    def stats(self, stats: Any) -> Callable[..., None]:
        """``add(name, value, op="mean")`` for per-member values (:class:`MemberStats`)."""
        return MemberStats(stats, self.size).add

    def host_values(self, host: dict[str, float], name: str) -> list[float]:
        """Each member's value of the statistic ``name`` in a transferred stats dict."""
        if self.size == 1:
            return [host[name]]
        return [host[member_key(i, name)] for i in range(self.size)]

    def host_dict(self, name: str, values: Sequence[float]) -> dict[str, float]:
        """``{"member{i}/name": value}`` for S members; nothing for a single run (whose
        caller reports the plain name)."""
        if self.size == 1:
            return {}
        return {member_key(i, name): v for i, v in enumerate(values)}

    def add_activity(self, stats: Any) -> None:
        """With S > 1: ``member{i}/active`` (1 while member i updates, 0 once it diverged or
        is done) and ``members/active``, their count."""
        if self.size == 1:
            return
        active = self.active()
        for i in range(self.size):
            stats.add(member_key(i, "active"), active[i], "min")
        stats.add("members/active", active.sum(), "sum")

    def state_dict(self) -> dict[str, Any]:
        """Checkpoint entries: ``{"seeds": masks and LR factors}`` with S > 1, none for a
        single run (whose checkpoints stay a single run's)."""
        if self.size == 1:
            return {}
        state = {"alive": self.alive.clone(), "done": self.done.clone(), "lr_factor": self.lr_factor.clone()}
        if self.hparams is not None and self.hparams.names:
            state["hparams"] = self.hparams.state_dict()
        return {"seeds": state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s entries from a checkpoint's algorithm state."""
        if self.size == 1:
            return
        members = state["seeds"]
        self.alive.copy_(members["alive"])
        self.done.copy_(members["done"])
        self._done_host = [bool(d) for d in members["done"].tolist()]  # SYNC: at load, the host mirrors
        self.lr_factor.copy_(members["lr_factor"])
        self._lr_factor_host = [float(f) for f in members["lr_factor"].tolist()]  # SYNC: at load
        if "hparams" in members and self.hparams is not None:
            self.hparams.load_state_dict(members["hparams"])


def autocasts_bf16(device: torch.device) -> bool:
    """Whether ``enable_amp`` autocasts to bf16 on ``device``: every CPU, CUDA GPUs that
    compute it natively (Ampere on); older GPUs autocast to float16 with a loss scale."""
    return device.type != "cuda" or torch.cuda.is_bf16_supported(including_emulation=False)
