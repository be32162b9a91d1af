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
import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.optim.optimizer as _optim_base
from torch import Tensor

__all__ = ["DENSE_COEFFICIENTS", "SeedAdam", "adam_state", "adam_step_", "dense_coefficients", "load_optimizer_state",
           "masked_step_", "scale_steps_per_seed_", "seed_adam_", "seed_optimizer", "steps_functionally",
           "takes_dense"]

#: Optimizer flags that choose a kernel, not the update (SeedAdam has one kernel).
KERNEL_FLAGS = ("fused", "foreach", "capturable", "differentiable")


def _seed_view(x: Tensor, like: Tensor) -> Tensor:
    """``[S]`` as ``[S, 1, ...]`` against a stacked tensor ``like`` (a 0-d ``x``, a single
    run's, as it is)."""
    if x.dim() == 0:
        return x
    return x.view(x.shape[0], *([1] * (like.dim() - 1)))


#: Device types where :func:`seed_adam_` and :func:`rlx.members.ops.clip_grad_norm_per_seed_`,
#: run eagerly, give torch's multi-tensor ops their per-tensor (and per-member)
#: coefficients as tensors shaped like the parameters (:func:`dense_coefficients`): CUDA's
#: multi-tensor kernels take lists of equally shaped tensors in one launch and run a list
#: of broadcast coefficients a kernel per tensor (24 launches of a single run's minibatch
#: update at vs_jax.py's setting, 58 of S members'; ``benchmarks/experiments/cuda_launches.py
#: --mode eager``). A CPU runs every multi-tensor
#: op a tensor at a time, and a compiled program fuses either form; the values are the
#: same, element for element.
DENSE_COEFFICIENTS = ("cuda",)

def takes_dense(like: Tensor) -> bool:
    """Whether an eager step on ``like``'s device gives its multi-tensor ops
    :func:`dense_coefficients` (:data:`DENSE_COEFFICIENTS`; never inside a compiled program,
    which fuses the broadcast form)."""
    return not torch.compiler.is_compiling() and like.device.type in DENSE_COEFFICIENTS


#: :func:`dense_coefficients`' gather index by (device, S, the tensors' shapes).
_dense_index: dict[tuple, Tensor] = {}


def dense_coefficients(values: Tensor, like: Sequence[Tensor]) -> list[Tensor]:
    """``values[k]`` (``[P]``: one per tensor; ``[P, S]``: one per member, along each
    stacked tensor's leading dim) as contiguous tensors shaped like ``like[k]``: views of
    one buffer that one gather fills (its index made on the device at a layout's first
    call, outside any capture: the eager warm-ups before one)."""
    S = values.shape[1] if values.dim() == 2 else 1
    key = (values.device, S, tuple(t.shape for t in like))
    index = _dense_index.get(key)
    if index is None:
        index = _dense_index[key] = torch.cat([
            torch.arange(k * S, (k + 1) * S, device=values.device).repeat_interleave(t.numel() // S)
            for k, t in enumerate(like)])
    flat = values.reshape(-1)[index]
    return [chunk.view(t.shape) for chunk, t in zip(flat.split([t.numel() for t in like]), like)]


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
                   factor=factor)

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


def _power(beta: float | Tensor, t: Tensor) -> Tensor:
    """``beta ** t`` for step counts ``t >= 1`` (see :func:`seed_adam_`)."""
    if isinstance(beta, Tensor) or beta <= 0:
        return beta**t
    return torch.exp(t * math.log(beta))


def seed_adam_(params: list[Tensor], grads: list[Tensor], steps: list[Tensor], exp_avgs: list[Tensor],
               exp_avg_sqs: list[Tensor], max_exp_avg_sqs: list[Tensor] | None, *, lr: float | Tensor,
               betas: tuple[float, float], eps: float, weight_decay: float, decoupled: bool,
               update: Tensor | None = None, factor: Tensor | None = None) -> None:
    """:class:`SeedAdam`'s step on stacked ``[S, ...]`` parameters, in place: seed i's step
    count, moments and parameters advance where ``update[i]`` (bool ``[S]``), and it moves
    at ``lr * factor[i]``; a seed's gradient is read only where it updates. With 0-d
    step counts (a single run's parameters, no seed dim) ``update`` and ``factor`` are
    0-d or ``None`` (always, 1): torch's Adam/AdamW step. Tensor arithmetic only (no host
    sync, nothing a CUDA graph cannot capture): what every Adam step in rlx runs
    (:func:`adam_step_`)."""
    beta1, beta2 = betas
    if update is None:
        torch._foreach_add_(steps, 1.0)
    else:
        torch._foreach_add_(steps, [update.to(steps[0].dtype)] * len(steps))
    # The per-seed scalars of every parameter at once, in float64 (as torch's Adam
    # takes them on the host): [P, S].
    t = torch.stack(steps).double()
    # Each seed's LR times its factor, [P, S] (a float LR filled on the device: no copy).
    seed_lr = lr.double().expand_as(t) if isinstance(lr, Tensor) else t.new_full(t.shape, lr)
    if factor is not None:
        seed_lr = seed_lr * factor.double()
    # beta ** t as exp(t log beta): equal within float64's rounding, and a compiled CPU
    # program computes it once (inductor keeps a reused result that holds an exp), where a
    # pow would be recomputed for every vector of every parameter (gcc may not hoist
    # std::pow out of a loop under -fmath-errno): 5% of a compiled update at 64 rows.
    decay1, decay2 = _power(beta1, t), _power(beta2, t)
    if update is None:  # every step counts: no seed is held
        bc2_sqrt = torch.sqrt(1 - decay2)
        step_size = seed_lr / (1 - decay1)
    else:
        counted = t > 0
        bc2_sqrt = torch.where(counted, torch.sqrt(1 - decay2), 1.0)
        seed_lr = torch.where(counted, seed_lr, 0.0)  # a seed never stepped does not move
        step_size = seed_lr / torch.where(counted, 1 - decay1, 1.0)
    dtype = params[0].dtype
    dense = takes_dense(params[0])

    def per_tensor(values: Tensor) -> list[Tensor]:
        """``values`` (``[P, ...]``) against each parameter: dense where
        :data:`DENSE_COEFFICIENTS` says, else each row as a broadcast view (one op for all:
        an index per parameter would be 2P ops, 24 of an eager step's 47 for 12 tensors)."""
        if dense:
            return dense_coefficients(values, params)
        return [_seed_view(v, p) for v, p in zip(values.unbind(0), params)]

    P = len(params)
    step_size, bc2_sqrt = per_tensor(step_size.to(dtype)), per_tensor(bc2_sqrt.to(dtype))
    if update is None:
        read = list(grads)
        if weight_decay and decoupled:
            torch._foreach_mul_(params, [_seed_view(1 - seed_lr[k] * weight_decay, p).to(p.dtype) for k, p in enumerate(params)])
        elif weight_decay:
            read = torch._foreach_add(read, params, alpha=weight_decay)
        torch._foreach_lerp_(exp_avgs, read, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
    else:
        # Per-seed coefficients from the float64 mask (no host-to-device copy): 1 - beta1
        # and beta2 where the seed updates, 0 and 1 (no change) elsewhere.
        mask = update.double()
        weight1 = (mask * (1 - beta1)).to(dtype)
        decay2 = torch.where(update, (mask * beta2).to(dtype), 1.0)
        read = []
        for k, (p, g) in enumerate(zip(params, grads)):
            rows = _seed_view(update, p)
            grad = torch.where(rows, g, 0)  # a held seed's gradient (NaN or not) is not read
            if weight_decay and decoupled:
                p.mul_(_seed_view(1 - seed_lr[k] * weight_decay, p).to(p.dtype))
            elif weight_decay:
                grad = torch.where(rows, grad.add(p, alpha=weight_decay), 0)
            read.append(grad)
        torch._foreach_lerp_(exp_avgs, read, per_tensor(weight1.expand(P, *weight1.shape)))
        torch._foreach_mul_(exp_avg_sqs, per_tensor(decay2.expand(P, *decay2.shape)))
    torch._foreach_addcmul_(exp_avg_sqs, read, read, value=1 - beta2)
    second = exp_avg_sqs
    if max_exp_avg_sqs is not None:
        second = max_exp_avg_sqs
        torch._foreach_maximum_(second, exp_avg_sqs)
    denom = torch._foreach_sqrt(second)
    torch._foreach_div_(denom, bc2_sqrt)
    torch._foreach_add_(denom, eps)
    steps_taken = torch._foreach_div(exp_avgs, denom)
    torch._foreach_mul_(steps_taken, step_size)
    torch._foreach_sub_(params, steps_taken)


def steps_functionally(optimizer: torch.optim.Optimizer, grad_scaler: torch.amp.GradScaler | None = None) -> bool:
    """Whether :func:`adam_step_` steps ``optimizer``: torch's Adam or AdamW, or
    :class:`SeedAdam`, with one param group and neither ``maximize`` nor
    ``differentiable``, and no float16 loss scale (its skipped steps are GradScaler's)."""
    if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW, SeedAdam) or len(optimizer.param_groups) != 1:
        return False
    group = optimizer.param_groups[0]
    # GradScaler's flag read directly: a compiled update cannot call into torch.amp.
    scaled = grad_scaler is not None and bool(getattr(grad_scaler, "_enabled", False))
    return not (group.get("maximize") or group.get("differentiable") or scaled)


def adam_state(optimizer: torch.optim.Optimizer, params: Sequence[Tensor]) -> tuple[list[Tensor], ...]:
    """Each parameter's ``step``, ``exp_avg``, ``exp_avg_sq`` (and ``max_exp_avg_sq``
    with amsgrad) in ``optimizer.state``, made where missing as torch's Adam makes them
    (float32 step counts on the parameter's device, ``[S]`` for :class:`SeedAdam`): the
    state a checkpoint holds, so torch's Adam and rlx's step resume each other."""
    state, group = optimizer.state, optimizer.param_groups[0]
    seeds = optimizer.num_seeds if isinstance(optimizer, SeedAdam) else None
    amsgrad = bool(group.get("amsgrad"))
    for p in params:
        s = state[p]
        if "step" not in s:
            s["step"] = torch.zeros(() if seeds is None else (seeds,), dtype=torch.float32, device=p.device)
            s["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            s["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if amsgrad and "max_exp_avg_sq" not in s:
            s["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    keys = ("step", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())
    return tuple([state[p][key] for p in params] for key in keys)


def adam_step_(optimizer: torch.optim.Optimizer, params: list[Tensor], grads: list[Tensor], *,
               update: Tensor | None = None, factor: Tensor | None = None) -> None:
    """The step of ``optimizer`` (one :func:`steps_functionally` accepts) on ``params``
    with ``grads``, through :func:`seed_adam_` on the optimizer's own state and with its
    param group's LR (a float or a device tensor): the same function eagerly, compiled
    and in a CUDA graph, where ``optimizer.step()`` would break a compiled program.

    Eagerly, the optimizer's step hooks run as ``optimizer.step()`` runs them (the global
    and the optimizer's own pre- and post-hooks, with no arguments); a compiled program
    does not call them."""
    hooks = not torch.compiler.is_compiling()
    if hooks:
        for hook in (*_optim_base._global_optimizer_pre_hooks.values(),
                     *optimizer._optimizer_step_pre_hooks.values()):
            hook(optimizer, (), {})
    group = optimizer.param_groups[0]
    state = adam_state(optimizer, params)
    decoupled = group.get("decoupled", group.get("decoupled_weight_decay", type(optimizer) is torch.optim.AdamW))
    with torch.no_grad():
        seed_adam_(params, grads, *state[:3], state[3] if len(state) > 3 else None, lr=group["lr"],
                   betas=tuple(float(b) for b in group["betas"]), eps=float(group["eps"]),
                   weight_decay=float(group["weight_decay"]), decoupled=bool(decoupled), update=update, factor=factor)
    if hooks:
        for hook in (*optimizer._optimizer_step_post_hooks.values(),
                     *_optim_base._global_optimizer_post_hooks.values()):
            hook(optimizer, (), {})


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


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load an optimizer's moments, steps and LR from a checkpoint, keeping the kernel
    ``optimizer`` was built with (fused, capturable, ...): a checkpoint of an eager run
    resumes under ``cudagraphs``, and one of a graphed run eagerly."""
    # The param-group flags that choose the kernel: the optimizer's own win on resume.
    kept = [{k: g[k] for k in KERNEL_FLAGS if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    if isinstance(optimizer, SeedAdam):  # one kernel; its [S] step counts stay on the device
        return
    for group, flags in zip(optimizer.param_groups, kept):
        group.update(flags)
        # rlx's Adam step and torch's fused and capturable kernels count steps on the parameters' device;
        # the others read the count on the host (on a GPU that would sync every step).
        on_device = steps_functionally(optimizer) or bool(group.get("fused") or group.get("capturable"))
        for p in group["params"]:
            step = optimizer.state.get(p, {}).get("step")
            if isinstance(step, Tensor):
                device = p.device if on_device else torch.device("cpu")
                optimizer.state[p]["step"] = step.to(device=device, dtype=torch.float32)
