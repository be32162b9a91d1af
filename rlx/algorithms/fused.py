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

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value

from rlx.core.compiling import compiled as compile_fn

if TYPE_CHECKING:
    from rlx.algorithms.minibatches import Batch
    from rlx.algorithms.ppo import PPO

__all__ = ["FusedUpdate", "fused_unsupported"]


def fused_unsupported(algo: PPO) -> str | None:
    """Why ``algo``'s minibatch update cannot be fused (``None``: it can)."""
    cfg, opt = algo.config, algo.optimizer
    group = opt.param_groups[0]
    if type(opt) not in (torch.optim.Adam, torch.optim.AdamW):
        return f"optimizer_cls {type(opt).__name__} (the fused update writes Adam's and AdamW's step)"
    if len(opt.param_groups) != 1 or group.get("amsgrad") or group.get("maximize") or group.get("differentiable"):
        return "an optimizer with several param groups, amsgrad, maximize or differentiable"
    if type(opt) is torch.optim.Adam and group.get("weight_decay"):
        return "Adam with weight_decay (AdamW's decoupled decay is supported)"
    if algo.members.size != 1:
        return f"num_seeds={algo.members.size} (one member)"
    if algo.grad_scaler.is_enabled():
        return "enable_amp with float16 (its GradScaler; bf16 autocast is fused)"
    if cfg.accumulate_grads:
        return "accumulate_grads"
    if algo.kl_stop is not None:
        return "the KL early stop (target_kl_div without kl_adaptive_lr)"
    if cfg.kl_adaptive_lr_per_minibatch:
        return "kl_adaptive_lr_per_minibatch"
    if getattr(cfg, "rnd", None) is not None:
        return "rnd (the predictor's own step)"
    if cfg.symmetry_augment or cfg.mirror_loss_coeff is not None:
        return "symmetry_augment and mirror_loss_coeff"
    if algo.world_size > 1:
        return "torch.distributed"
    if algo.policy.recurrent:
        return "a recurrent policy"
    return None


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
    """

    def __init__(self, algo: PPO, compiled: bool = True) -> None:
        self.optimizer = algo.optimizer
        self.params = [p for p in algo.policy.model.parameters() if p.requires_grad]
        names = {id(p): n for n, p in algo.policy.model.named_parameters()}
        self.names = [f"policy.model.{names[id(p)]}" for p in self.params]
        self.module = _Losses(algo)
        group = self.optimizer.param_groups[0]
        self.beta1, self.beta2 = (float(b) for b in group["betas"])
        self.eps = float(group["eps"])
        self.decay = float(group["weight_decay"]) if type(self.optimizer) is torch.optim.AdamW else 0.0
        self.max_grad_norm = algo.config.max_grad_norm
        # Indices of the parameters clipped together: all, or the actor's and the critic's.
        index = {id(p): i for i, p in enumerate(self.params)}
        groups = algo.clip_groups or [self.params]
        self.clip_groups = [[index[id(p)] for p in group] for group in groups]
        device = self.params[0].device
        self.lr = torch.zeros((), device=device)
        self._state()  # the optimizer's state, made now if the optimizer has not stepped yet
        self.compiled = compiled
        self.fn = compile_fn(self._update) if compiled else self._update
        self._warm: set[tuple] = set()  # the minibatch layouts compiled so far

    def _state(self) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        """The optimizer's ``step``, ``exp_avg`` and ``exp_avg_sq`` of each parameter,
        created as torch's Adam creates them (float32 step counts on the device)."""
        state = self.optimizer.state
        for p in self.params:
            if not state[p]:
                state[p] = {
                    "step": torch.zeros((), dtype=torch.float32, device=p.device),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }
        return ([state[p]["step"] for p in self.params], [state[p]["exp_avg"] for p in self.params],
                [state[p]["exp_avg_sq"] for p in self.params])

    def __call__(self, mb: Batch) -> Tensor:
        lr = self.optimizer.param_groups[0]["lr"]
        if isinstance(lr, Tensor):
            self.lr.copy_(lr)
        else:
            self.lr.fill_(lr)
        steps, exp_avgs, exp_avg_sqs = self._state()
        if not self.compiled:
            return self.fn(self.params, steps, exp_avgs, exp_avg_sqs, self.lr, mb)
        # Once a minibatch layout (its keys, shapes, dtypes, and the grad mode) has been
        # compiled, every later call with it passes the same guards: the parameters and
        # the optimizer state keep their shapes, the LR is the one device tensor. The
        # per-call guard checks over the program's ~60 tensors (90 us at B = 64, 250 us at
        # B = 1024 on one CPU core) are skipped; a new layout (the last, smaller minibatch)
        # is checked, and compiled once, as before.
        layout = (torch.is_grad_enabled(), *((k, x.shape, x.dtype) for k, x in mb.items()))
        warm = layout in self._warm
        with torch.compiler.set_stance(skip_guard_eval_unsafe=warm):
            out = self.fn(self.params, steps, exp_avgs, exp_avg_sqs, self.lr, mb)
        self._warm.add(layout)
        return out

    def _update(self, params: list[Tensor], steps: list[Tensor], exp_avgs: list[Tensor],
                exp_avg_sqs: list[Tensor], lr: Tensor, mb: Batch) -> Tensor:
        def loss(values: list[Tensor]) -> tuple[Tensor, Tensor]:
            losses = functional_call(self.module, dict(zip(self.names, values)), (mb,))
            return losses.total, torch.stack([losses.total.detach(), *losses[1:]])

        detached = [p.detach() for p in params]
        grads, (_, terms) = grad_and_value(loss, has_aux=True)(detached)
        if self.max_grad_norm is not None:
            grads = list(grads)
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
                bias1 = 1 - torch.pow(b1, step)
                bias2_sqrt = torch.sqrt(1 - torch.pow(b2, step))
                p.sub_((lr / bias1) * m / (v.sqrt() / bias2_sqrt + self.eps))
        return terms
