"""PPO's minibatch update as one compiled program.

Eager PPO runs a minibatch update as a few hundred small ops: the forward pass, the
losses, autograd's backward, the gradient norm and clip, and the optimizer step. On a
CPU (and on a GPU without graphs) their dispatch costs more than their arithmetic for
the small networks of on-policy RL. :class:`FusedUpdate` writes the same update as one
function of tensors, the gradient taken by ``torch.func.grad`` and the Adam (or AdamW)
step written out, and compiles it whole with inductor (C++ on a CPU, Triton on CUDA),
as a JAX program is jitted whole. The optimizer's own state tensors (``step``,
``exp_avg``, ``exp_avg_sq``) are the ones it updates, so checkpoints and resume are those
of the eager update.

It is what ``compile=True`` runs where the update allows it (:func:`fused_unsupported`
names what does not: then ``compile=True`` compiles the forward pass and losses only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value

from rlx.algorithms.kl_control import adapt_lr_, close_gate_
from rlx.algorithms.minibatches import passes
from rlx.core.compiling import call_warm
from rlx.core.compiling import compiled as compile_fn
from rlx.env import OBS
from rlx.members.ops import grad_norms_per_seed
from rlx.members.optim import SeedAdam, seed_adam_

if TYPE_CHECKING:
    from rlx.algorithms.minibatches import Batch
    from rlx.algorithms.ppo import PPO

__all__ = ["FusedUpdate", "fused_unsupported"]


def fused_unsupported(algo: PPO) -> str | None:
    """Why ``algo``'s minibatch update cannot be fused (``None``: it can)."""
    cfg, opt = algo.config, algo.optimizer
    group = opt.param_groups[0]
    if type(opt) not in (torch.optim.Adam, torch.optim.AdamW, SeedAdam):
        return f"optimizer_cls {type(opt).__name__} (the fused update writes Adam's and AdamW's step)"
    if len(opt.param_groups) != 1 or group.get("amsgrad") or group.get("maximize") or group.get("differentiable"):
        return "an optimizer with several param groups, amsgrad, maximize or differentiable"
    if group.get("weight_decay") and not _decoupled(opt):
        return "Adam with weight_decay (AdamW's decoupled decay is supported)"
    if algo.grad_scaler.is_enabled():
        return "enable_amp with float16 (its GradScaler; bf16 autocast is fused)"
    if cfg.accumulate_grads:
        return "accumulate_grads"
    if algo.world_size > 1:
        return "torch.distributed"
    if algo.policy.recurrent:
        return "a recurrent policy"
    return None


def _decoupled(opt: torch.optim.Optimizer) -> bool:
    """AdamW's decoupled weight decay (torch's AdamW, or SeedAdam made for it)."""
    if isinstance(opt, SeedAdam):
        return bool(opt.param_groups[0].get("decoupled"))
    return type(opt) is torch.optim.AdamW


class _Losses(nn.Module):
    """``algo.losses`` as a module whose parameters are the policy's, for ``functional_call``."""

    def __init__(self, algo: PPO) -> None:
        super().__init__()
        self.policy = algo.policy
        self._losses = algo.losses

    def forward(self, mb: Batch) -> tuple:
        return self._losses(mb)


class FusedUpdate:
    """``update(mb) -> stacked loss terms``: forward, losses, gradient, clip and the Adam or
    AdamW step of PPO's minibatch update, compiled as one program.

    The same arithmetic as the eager update up to float rounding: the gradient of
    ``losses.total``, the gradient norm clipped to ``max_grad_norm`` (torch's
    ``clip_grad_norm_`` rule, over all parameters or, with ``clip_grad_per_network``,
    over the actor's and the critic's apart), and torch's Adam/AdamW step on the
    optimizer's state tensors, with the learning rate the param group holds (a float or
    a device tensor).

    With S members (stacked parameters, :class:`~rlx.members.optim.SeedAdam`) it is
    the eager S-member update (:meth:`rlx.members.Members.optimizer_step`): the gradient
    of the members' summed losses, each member's norm clipped to its own
    ``max_grad_norm``, a member whose gradient is not finite frozen (``alive``), and
    SeedAdam's step with each active member's step count, bias corrections and LR
    factor (a frozen or done member's state and parameters do not move).
    """

    def __init__(self, algo: PPO, compiled: bool = True) -> None:
        self.optimizer = algo.optimizer
        self.algo = algo
        self.members, self.hparams = algo.members, algo.hparams
        self.S = algo.members.size
        self.params = [p for p in algo.policy.model.parameters() if p.requires_grad]
        names = {id(p): n for n, p in algo.policy.model.named_parameters()}
        self.names = [f"policy.model.{names[id(p)]}" for p in self.params]
        self.module = _Losses(algo)
        group = self.optimizer.param_groups[0]
        self.beta1, self.beta2 = (float(b) for b in group["betas"])
        self.eps = float(group["eps"])
        self.decay = float(group["weight_decay"]) if _decoupled(self.optimizer) else 0.0
        self.max_grad_norm = algo.config.max_grad_norm
        cfg = algo.config
        # rsl_rl's adaptive rule before every step (kl_adaptive_lr_per_minibatch): the
        # program adapts the base LR tensor in place from the minibatch's KL and steps with it.
        self.per_minibatch = bool(getattr(cfg, "kl_adaptive_lr_per_minibatch", False))
        if self.per_minibatch:
            self.kl_index, self.target_kl = algo._kl_index, float(cfg.target_kl_div)
            self.lr_bounds = tuple(float(b) for b in cfg.kl_adaptive_lr_bounds)
            self.lr_base, self.lr_applied = algo._lr_tensor, algo._lr_applied
        # The KL early stop (rlx.algorithms.kl_control): the program judges each step on
        # its minibatch's KL, as KLEarlyStop.gate does, and applies the gate to a single
        # run's LR (base times gate) or to each member's step factor.
        self.kl_stop = algo.kl_stop
        if self.kl_stop is not None:
            self.kl_index = algo._kl_index
            if self.S == 1:
                self.lr_base, self.lr_applied = algo._lr_tensor, algo._lr_applied
        # Indices of the parameters clipped together: all, or the actor's and the critic's.
        index = {id(p): i for i, p in enumerate(self.params)}
        groups = algo.clip_groups or [self.params]
        self.clip_groups = [[index[id(p)] for p in group] for group in groups]
        device = self.params[0].device
        # float64, as torch's Adam and SeedAdam take a float LR into float64 step sizes (a
        # float32 LR would move every step by up to 6e-8 of itself, and AdamW's decay by
        # 6e-8 of the parameter).
        self.lr = torch.zeros((), device=device, dtype=torch.float64)
        self._state()  # the optimizer's state, made now if the optimizer has not stepped yet
        self.compiled = compiled
        self.fn = compile_fn(self._update, device=algo.device) if compiled else self._update
        # A minibatch larger than the micro-batch (``micro_batch_size``; on a CPU, 4096 rows
        # by default) runs as the eager update does: its micro-batches' gradients
        # accumulate, each weighted by its share, and the last one's program clips and
        # steps. Activations of a whole 32768-row minibatch spill out of a CPU's cache:
        # 56 ms per update at B = 4096 against 40 ms in 4096-row passes.
        self.micro_units = algo._micro_units
        self.accumulate_fn = compile_fn(self._accumulate, device=algo.device) if compiled else self._accumulate
        self._carry: tuple[list[Tensor], Tensor] | None = None  # the accumulated gradients and terms
        self._shares: dict[int, list[Tensor]] = {}  # a minibatch's rows -> each micro-batch's share
        self._warm: set[tuple] = set()  # the (function, minibatch layout) pairs compiled so far

    def _state(self) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        """The optimizer's ``step``, ``exp_avg`` and ``exp_avg_sq`` of each parameter,
        created as torch's Adam creates them (float32 step counts on the device)."""
        state = self.optimizer.state
        for p in self.params:
            if not state[p]:
                state[p] = {
                    "step": torch.zeros(() if self.S == 1 else (self.S,), dtype=torch.float32, device=p.device),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }
        return ([state[p]["step"] for p in self.params], [state[p]["exp_avg"] for p in self.params],
                [state[p]["exp_avg_sq"] for p in self.params])

    def __call__(self, mb: Batch) -> Tensor:
        algo = self.algo
        if algo.config.symmetry_augment:  # the twins (the user's mirror, eager), then the program on both
            mb = algo.symmetry.augment(mb, self.S)
        terms = self._program(mb)
        if algo.rnd is not None:  # RND's predictor takes its own step on the minibatch, as in the eager update
            algo._rnd_loss += algo.rnd.train_step(mb[OBS])
            algo._rnd_steps += 1
        return terms

    def _program(self, mb: Batch) -> Tensor:
        size = next(iter(mb.values())).shape[0]
        bounds = passes(size, self.micro_units)
        if len(bounds) == 1:
            return self._call(self.fn, mb, *self._step_args(), mb, None, None)
        # Micro-batches: all but the last accumulate (weighted by their shares) into the
        # carry, which the last one's program adds to its own before the clip and step.
        parts = [{key: x[lo : lo + n] for key, x in mb.items()} for lo, n in bounds]
        shares = self._shares.get(size)
        if shares is None:
            device = self.params[0].device
            shares = self._shares[size] = [torch.tensor(n / size, device=device) for _, n in bounds]
        if self._carry is None:
            rows = len(self.algo.loss_fields._fields)
            self._carry = ([torch.zeros_like(p) for p in self.params],
                           torch.zeros(rows, *self.members.lead, device=self.params[0].device))
        grads, terms = self._carry
        torch._foreach_zero_(grads)
        terms.zero_()
        for part, share in zip(parts[:-1], shares[:-1]):
            self._call(self.accumulate_fn, part, self.params, part, grads, terms, share)
        return self._call(self.fn, parts[-1], *self._step_args(), parts[-1], self._carry, shares[-1])

    def _call(self, fn: Callable[..., Any], mb: Batch, *args: Any) -> Any:
        """``fn(*args)``, one of whose arguments is the minibatch ``mb`` (or a part of one).

        Once a minibatch layout (its keys, shapes, dtypes, and the grad mode) has been
        compiled, every later call with it passes the same guards: the parameters and
        the optimizer state keep their shapes, the LR is the one device tensor. The
        per-call guard checks over the program's ~60 tensors (90 us at B = 64, 250 us at
        B = 1024 on one CPU core) are skipped; a new layout (the last, smaller minibatch)
        is checked, and compiled once, as before."""
        if not self.compiled:
            return fn(*args)
        layout = (fn is self.fn, args[-1] is None, torch.is_grad_enabled(),
                  *((k, x.shape, x.dtype) for k, x in mb.items()))
        out = call_warm(fn, *args, warm=layout in self._warm)
        self._warm.add(layout)
        return out

    def _step_args(self) -> tuple:
        """The update program's arguments before the minibatch: the parameters, the
        optimizer's state, the LR and the members' flags."""
        lr = self.optimizer.param_groups[0]["lr"]
        stop = self.kl_stop
        if self.per_minibatch or (stop is not None and self.S == 1):
            lr, applied = self.lr_base, self.lr_applied
        else:
            if isinstance(lr, Tensor):
                self.lr.copy_(lr)
            else:
                self.lr.fill_(lr)
            lr, applied = self.lr, None
        steps, exp_avgs, exp_avg_sqs = self._state()
        members = self.members
        gate = None if stop is None else (stop.open, stop.applied, stop.running, stop.limit)
        return (self.params, steps, exp_avgs, exp_avg_sqs, lr, applied, members.alive, members.done, members.lr_factor,
                gate)

    def _gradient(self, params: list[Tensor], mb: Batch) -> tuple[list[Tensor], Tensor]:
        """The gradient of the summed ``losses.total`` on ``mb`` and the stacked loss terms."""
        def loss(values: list[Tensor]) -> tuple[Tensor, Tensor]:
            losses = functional_call(self.module, dict(zip(self.names, values)), (mb,))
            return losses.total.sum(), torch.stack([losses.total.detach(), *losses[1:]])

        grads, (_, terms) = grad_and_value(loss, has_aux=True)([p.detach() for p in params])
        return list(grads), terms

    def _accumulate(self, params: list[Tensor], mb: Batch, grads: list[Tensor], terms: Tensor, share: Tensor) -> None:
        """Add ``share`` times a micro-batch's gradient and loss terms to the carry."""
        part_grads, part_terms = self._gradient(params, mb)
        with torch.no_grad():
            for g, part in zip(grads, part_grads):
                g.add_(share * part)
            terms.add_(share * part_terms)

    def _update(self, params: list[Tensor], steps: list[Tensor], exp_avgs: list[Tensor],
                exp_avg_sqs: list[Tensor], lr: Tensor, lr_applied: Tensor | None, alive: Tensor, done: Tensor,
                lr_factor: Tensor, kl_gate: tuple | None, mb: Batch, carry: tuple[list[Tensor], Tensor] | None,
                share: Tensor | None) -> Tensor:
        grads, terms = self._gradient(params, mb)
        if carry is not None:  # the last micro-batch: the earlier ones' share is in the carry
            assert share is not None
            grads = [g + share * part for g, part in zip(carry[0], grads)]
            terms = carry[1] + share * terms
        gate = running = None
        if kl_gate is not None:  # KLEarlyStop.gate on this minibatch's KL, before its step
            is_open, applied, running, limit = kl_gate
            with torch.no_grad():
                active = (alive & ~done).float() if self.S > 1 else 1.0  # Members.active(), before this step's freeze
                gate = close_gate_(is_open, applied, terms[self.kl_index], limit, active)
        if lr_applied is not None:
            with torch.no_grad():
                if gate is not None:  # a single run's gated LR: base times gate
                    torch.mul(lr, gate, out=lr_applied)
                else:  # the per-minibatch adaptive rule, before this step
                    adapt_lr_(lr, terms[self.kl_index], self.target_kl, self.lr_bounds)
                    lr_applied.copy_(lr)
                lr = lr_applied
        if self.S > 1:
            self._members_step(params, grads, steps, exp_avgs, exp_avg_sqs, lr, alive, done, lr_factor, gate, running)
            return terms
        if self.max_grad_norm is not None:
            for group in self.clip_groups:  # torch's clip_grad_norm_ rule, per group
                norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(grads[i]) for i in group]))
                coef = torch.clamp(self.max_grad_norm / (norm + 1e-6), max=1.0)
                for i in group:
                    grads[i] = grads[i] * coef
        b1, b2 = self.beta1, self.beta2
        with torch.no_grad():
            for p, g, step, m, v in zip(params, grads, steps, exp_avgs, exp_avg_sqs):
                step.add_(1)
                if self.decay:
                    p.mul_(1 - lr * self.decay)
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                # The bias corrections in float64, as torch's Adam takes them (1 - 0.999 in
                # float32 is 1.3e-5 off): then cast to the parameters' dtype.
                t = step.double()
                step_size = (lr.double() / (1 - torch.pow(b1, t))).to(p.dtype)
                bias2_sqrt = torch.sqrt(1 - torch.pow(b2, t)).to(p.dtype)
                p.sub_(step_size * m / (v.sqrt() / bias2_sqrt + self.eps))
        return terms

    def _members_step(self, params: list[Tensor], grads: list[Tensor], steps: list[Tensor], exp_avgs: list[Tensor],
                      exp_avg_sqs: list[Tensor], lr: Tensor, alive: Tensor, done: Tensor, lr_factor: Tensor,
                      gate: Tensor | None = None, running: Tensor | None = None) -> None:
        """Each member's clip, its freeze on a non-finite gradient and SeedAdam's step
        (``Members.optimizer_step``), on stacked ``[S, ...]`` tensors; with the KL early
        stop, a closed member (``gate``) does not move, and one not ``running`` since its
        epoch began keeps its optimizer state too."""
        S = self.S
        max_norm = self.hparams.get("max_grad_norm")
        if max_norm is not None:
            norms = []
            for group in self.clip_groups:  # clip_grad_norm_per_seed_'s rule, on the program's gradients
                norm = grad_norms_per_seed([grads[i] for i in group], S)
                coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
                for i in group:
                    grads[i] = grads[i] * coef.view(S, *([1] * (grads[i].dim() - 1))).to(grads[i].dtype)
                norms.append(norm)
            norm = torch.stack(norms).sum(dim=0)
        else:
            norm = grad_norms_per_seed(grads, S)
        alive.copy_(alive & torch.isfinite(norm))  # a member whose gradient is not finite freezes
        active = (alive & ~done).float()
        factor = active * lr_factor if gate is None else active * lr_factor * gate
        update = active if running is None else active * running
        with torch.no_grad():
            seed_adam_(params, grads, steps, exp_avgs, exp_avg_sqs, None, lr=lr, betas=(self.beta1, self.beta2),
                       eps=self.eps, weight_decay=self.decay, decoupled=True, update=update > 0, factor=factor)
