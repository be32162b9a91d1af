"""The optimizer step of S stacked seeds, each seed's state advancing only when its own does.

A seed's optimizer state must follow its own run. A stacked ``torch.optim.Adam`` cannot:
it keeps one step count per stacked tensor, and every ``step()`` moves every seed's
moments. With the KL early stop that couples seeds: in a single-seed run the update ends
after the epoch in which the KL stop fired, but in an S-seed run a stopped seed rides
along through the epochs the other seeds still run, and a plain Adam would keep feeding
it gradients and counting its steps (16 Adam steps against its single-seed run's 12 in
``test_a_kl_stopped_seeds_adam_state_is_its_single_seed_runs``, run on the code before
this module).

Each optimizer step therefore takes two ``[S]`` masks:

* ``update``: the seeds whose optimizer state advances (moments, step count): active
  seeds, and under a KL early stop those still open when the epoch began (a single-seed
  run passes the zero-LR steps of its stopping epoch through the optimizer too);
* ``factor``: each seed's learning-rate factor (its KL-adaptive LR over the base LR,
  times 0 once its KL stop fired or when it is frozen).

:class:`SeedAdam` is Adam and AdamW with both built in (a ``[S]`` step count per stacked
tensor, per-seed bias corrections and learning rates) and is what ``num_seeds > 1``
uses for ``optimizer_cls`` ``Adam`` or ``AdamW``. Any other optimizer steps as usual and
:func:`masked_step_` puts back the parameters and the parameter-shaped state of the seeds
the masks hold still (a scalar state such as a step count stays shared).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["SeedAdam", "masked_step_", "scale_steps_per_seed_", "seed_adam_", "seed_optimizer"]

#: Optimizer flags that choose a kernel, not the update (SeedAdam has one kernel).
KERNEL_FLAGS = ("fused", "foreach", "capturable", "differentiable")


def _seed_view(x: Tensor, like: Tensor) -> Tensor:
    """``[S]`` as ``[S, 1, ...]`` against a stacked tensor ``like``."""
    return x.view(x.shape[0], *([1] * (like.dim() - 1)))


class SeedAdam(torch.optim.Optimizer):
    """Adam (``decoupled=False``) or AdamW (``decoupled=True``) over stacked parameters
    whose leading dim is the seed: S independent Adams, each with its own step count.

    ``step(update=..., factor=...)`` takes the ``[S]`` masks of the module docstring
    (both all ones when omitted). Seed i's moments and step count change only where
    ``update[i] > 0`` (its gradient is then read; elsewhere it is ignored, so a NaN
    gradient of a frozen seed never reaches its state), and its parameters move by
    ``lr * factor[i]`` times Adam's step. Everything is tensor arithmetic on the device:
    no host sync, and a CUDA graph can capture the step (``lr`` may be a tensor).

    Args:
        params: Stacked parameters, leading dim ``num_seeds``.
        num_seeds: ``S``.
        lr, betas, eps, weight_decay, amsgrad: As ``torch.optim.Adam``/``AdamW``.
        decoupled: AdamW's decoupled weight decay (else Adam's L2 on the gradient).
    """

    def __init__(self, params: Iterable[Tensor], num_seeds: int, lr: float | Tensor = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False, *, decoupled: bool = False) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        decoupled=decoupled)
        super().__init__(params, defaults)
        self.num_seeds = num_seeds
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() == 0 or p.shape[0] != num_seeds:
                    raise ValueError(f"SeedAdam: a parameter of shape {tuple(p.shape)} has no leading seed dim {num_seeds}")

    def _init_state(self, p: Tensor, amsgrad: bool) -> dict[str, Tensor]:
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros(self.num_seeds, dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if amsgrad:
                state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(self, closure=None, *, update: Tensor | None = None, factor: Tensor | None = None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._step_group(group, params, update, factor)
        return loss

    def _step_group(self, group: dict[str, Any], params: list[Tensor], update: Tensor | None,
                    factor: Tensor | None) -> None:
        states = [self._init_state(p, group["amsgrad"]) for p in params]
        steps = [state["step"] for state in states]
        seed_adam_(params, [p.grad for p in params], steps, [state["exp_avg"] for state in states],
                   [state["exp_avg_sq"] for state in states],
                   [state["max_exp_avg_sq"] for state in states] if group["amsgrad"] else None,
                   lr=group["lr"], betas=group["betas"], eps=group["eps"], weight_decay=group["weight_decay"],
                   decoupled=group["decoupled"],
                   update=update > 0 if update is not None else torch.ones_like(steps[0], dtype=torch.bool),
                   factor=factor if factor is not None else torch.ones_like(steps[0]))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        defaults = {k: self.defaults[k] for k in ("decoupled", "amsgrad", "weight_decay")}
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            for key, value in defaults.items():  # a stacked torch.optim.Adam's checkpoint lacks them
                group.setdefault(key, value)
            for p in group["params"]:
                state = self.state.get(p)
                if state and "step" in state:  # a [S] count on the parameters' device
                    step = torch.as_tensor(state["step"], dtype=torch.float32).to(p.device)
                    state["step"] = step.expand(self.num_seeds).clone() if step.numel() == 1 else step



def seed_adam_(params: list[Tensor], grads: list[Tensor], steps: list[Tensor], exp_avgs: list[Tensor],
               exp_avg_sqs: list[Tensor], max_exp_avg_sqs: list[Tensor] | None, *, lr: float | Tensor,
               betas: tuple[float, float], eps: float, weight_decay: float, decoupled: bool, update: Tensor,
               factor: Tensor) -> None:
    """:class:`SeedAdam`'s step on stacked ``[S, ...]`` parameters, in place: seed i's step
    count, moments and parameters advance where ``update[i]`` (bool ``[S]``), and it moves
    at ``lr * factor[i]``; a seed's gradient is read only where it updates. Tensor
    arithmetic only (no host sync): what the eager optimizer and the fused update
    (:mod:`rlx.algorithms.fused`) both run."""
    beta1, beta2 = betas
    increment = update.to(steps[0].dtype)
    torch._foreach_add_(steps, [increment] * len(steps))
    # The per-seed scalars of every parameter at once, in float64 (as torch's Adam
    # takes them on the host): [P, S].
    t = torch.stack(steps).double()
    counted = t > 0
    bc2_sqrt = torch.where(counted, torch.sqrt(1 - beta2**t), 1.0)
    seed_lr = torch.where(counted, lr * factor.double(), 0.0)  # a seed never stepped does not move
    step_size = seed_lr / torch.where(counted, 1 - beta1**t, 1.0)
    dtype = params[0].dtype
    # Per-seed coefficients from the float64 mask (no host-to-device copy): 1 - beta1
    # and beta2 where the seed updates, 0 and 1 (no change) elsewhere.
    mask = update.double()
    weight1 = (mask * (1 - beta1)).to(dtype)
    decay2 = torch.where(update, (mask * beta2).to(dtype), 1.0)
    step_size, bc2_sqrt = step_size.to(dtype), bc2_sqrt.to(dtype)
    read = []
    for k, (p, g) in enumerate(zip(params, grads)):
        rows = _seed_view(update, p)
        grad = torch.where(rows, g, 0)  # a held seed's gradient (NaN or not) is not read
        if weight_decay and decoupled:
            p.mul_(_seed_view(1 - seed_lr[k] * weight_decay, p).to(p.dtype))
        elif weight_decay:
            grad = torch.where(rows, grad.add(p, alpha=weight_decay), 0)
        read.append(grad)
    torch._foreach_lerp_(exp_avgs, read, [_seed_view(weight1, p) for p in params])
    torch._foreach_mul_(exp_avg_sqs, [_seed_view(decay2, p) for p in params])
    torch._foreach_addcmul_(exp_avg_sqs, read, read, value=1 - beta2)
    second = exp_avg_sqs
    if max_exp_avg_sqs is not None:
        second = max_exp_avg_sqs
        torch._foreach_maximum_(second, exp_avg_sqs)
    denom = torch._foreach_sqrt(second)
    torch._foreach_div_(denom, [_seed_view(bc2_sqrt[k], p) for k, p in enumerate(params)])
    torch._foreach_add_(denom, eps)
    steps_taken = torch._foreach_div(exp_avgs, denom)
    torch._foreach_mul_(steps_taken, [_seed_view(step_size[k], p) for k, p in enumerate(params)])
    torch._foreach_sub_(params, steps_taken)


def seed_optimizer(optimizer_cls: type[torch.optim.Optimizer], params: Sequence[Tensor], num_seeds: int,
                   kwargs: dict[str, Any]) -> torch.optim.Optimizer:
    """The optimizer of S stacked seeds: :class:`SeedAdam` for ``Adam`` and ``AdamW``
    (their defaults, kernel flags dropped), else ``optimizer_cls(params, **kwargs)``
    (stepped through :func:`masked_step_`).

    Raises:
        ValueError: an Adam option SeedAdam does not implement (``maximize``).
    """
    if optimizer_cls not in (torch.optim.Adam, torch.optim.AdamW):
        return optimizer_cls(params, **kwargs)
    if kwargs.get("maximize"):
        raise ValueError(f"{optimizer_cls.__name__}(maximize=True) is not supported with num_seeds={num_seeds}")
    signature = inspect.signature(optimizer_cls).parameters
    options = {k: kwargs.get(k, signature[k].default) for k in ("lr", "betas", "eps", "weight_decay", "amsgrad")}
    unknown = set(kwargs) - set(options) - set(KERNEL_FLAGS) - {"maximize"}
    if unknown:
        raise ValueError(f"{optimizer_cls.__name__} options {sorted(unknown)} are not supported with num_seeds={num_seeds}")
    return SeedAdam(params, num_seeds, **options, decoupled=optimizer_cls is torch.optim.AdamW)


def scale_steps_per_seed_(params: Sequence[Tensor], before: Sequence[Tensor], factor: Tensor) -> None:
    """``p = before + factor_i * (p - before)`` for seed i's slice of each stacked
    parameter: a per-seed learning rate (``factor_i = lr_i / lr``) or gate
    (``factor_i = 0`` leaves seed i exactly where it was, even when its step is NaN: a
    diverged seed is frozen without touching the others) applied after one optimizer
    step. Exact for Adam, AdamW and SGD, whose step is linear in the learning rate."""
    for p, old in zip(params, before):
        f = _seed_view(factor, p).to(p.dtype)
        p.data.copy_(torch.where(f == 0, old, torch.lerp(old, p.data, f)))


def masked_step_(optimizer: torch.optim.Optimizer, params: Sequence[Tensor], update: Tensor, factor: Tensor) -> None:
    """One step of any optimizer over stacked ``params``, seed by seed: ``p = before +
    factor_i * (p - before)`` for seed i's slice (a per-seed LR, exact for an optimizer
    whose step is linear in its LR; ``factor_i = 0`` leaves seed i exactly where it was,
    even when its step is NaN), and each parameter-shaped state tensor (momentum,
    moments) put back where ``update_i = 0``."""
    before = [p.detach().clone() for p in params]
    kept = []
    for p in params:
        for key, value in optimizer.state.get(p, {}).items():
            if isinstance(value, Tensor) and value.shape == p.shape:
                kept.append((optimizer.state[p], key, value.clone()))
    optimizer.step()
    scale_steps_per_seed_(params, before, factor)
    for state, key, old in kept:
        new = state[key]
        new.copy_(torch.where(_seed_view(update, new) > 0, new, old))
