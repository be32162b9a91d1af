"""PPO's KL controls: an early stop decided on the device before every optimizer step,
and a learning rate adapted to the KL each update reached.

Both measure KL(rollout policy || current policy) with the estimator ``E[(r - 1) - log r]``
on the rollout's own actions.

* **Early stop** (``target_kl_div`` without ``kl_adaptive_lr``), Stable-Baselines3's rule
  made sync-free: every optimizer step is judged before it runs, on the KL of the data
  its gradient came from (its minibatch; with ``accumulate_grads``, every minibatch of the
  epoch), measured in the forward passes that produced that gradient. Once a judged KL
  exceeds 1.5 x target, that step and every later one of the ``step()`` apply a
  learning rate of 0, so the parameters no longer move. The zero-LR steps of that last
  epoch still pass their gradients through the optimizer, so a stateful optimizer's
  moment estimates see them; the steps of later epochs are held (state and parameters
  unchanged). On a CPU the update loop reads the stop at the end of the epoch and runs
  no further epoch; on a GPU it runs them held, with no host read
  (``PPO.sync_kl_stop``): the same parameters and optimizer state either way.
* **Adaptive LR** (``kl_adaptive_lr``), rsl_rl's rule (÷1.5 above 2 x target, x1.5
  below target / 2, clamped) applied once per ``step()`` to the KL the update reached
  (``monitors/kl_div``, measured after its last optimizer step): the controlled quantity
  is exactly the one the rule judges, so it never adapts on a KL measured before an
  update, lowers the LR without stopping, and behaves the same with one minibatch, with
  accumulation and with several. The KL travels in ``step()``'s one transfer: no sync.
  Applied before every minibatch to the KL accumulated since the rollout instead, the
  rule grows the LR on the small KLs of an update's first steps and shrinks it on the
  large ones of its last, and the KL per update settled at 2.5x to 3.9x the target on
  CartPole (target 0.002, 4 epochs).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["EARLY_STOP_FACTOR", "KLEarlyStop", "adapted_lr", "close_gate_"]

#: A judged KL above this many times the target stops the update (early stop).
EARLY_STOP_FACTOR = 1.5


class KLEarlyStop:
    """The early stop of one PPO algorithm, on the device (see the module docstring).

    Its tensors have the member axis's lead shape: 0-d for a single run, ``[S]`` for S
    members (one decision each, judged on ``[S]`` KLs). The optimizer step applies
    :attr:`open` (:meth:`rlx.members.Members.optimizer_step`): to a single run's tensor
    LR, to each member's step factor.

    Args:
        target: ``target_kl_div``, or each member's (``[S]`` float64).
        device: Where the decision lives.
        shape: ``()``, or ``(S,)`` for S members.
    """

    def __init__(self, target: float | Tensor, device: torch.device, shape: tuple[int, ...] = ()) -> None:
        self.limit: float | Tensor = EARLY_STOP_FACTOR * float(target) if not isinstance(target, Tensor) else 0.0
        if isinstance(target, Tensor):  # each member's target ([S], float64)
            self.limit = (EARLY_STOP_FACTOR * target).float()
        #: 1.0 while optimizer steps apply, 0.0 once the stop triggered.
        self.open = torch.ones(shape, device=device)
        #: Optimizer steps applied (with a nonzero LR) in this ``step()``.
        self.applied = torch.zeros(shape, device=device)
        #: ``open`` as the current epoch began: with S members, those whose optimizer
        #: state still advances (a stopped member rides along through the epochs the
        #: others run, where a single run would have ended).
        self.running = torch.ones(shape, device=device)

    def set_target(self, target: Tensor) -> None:
        """New ``[S]`` targets, in place (members that differ in ``target_kl_div``)."""
        assert isinstance(self.limit, Tensor)
        self.limit.copy_(EARLY_STOP_FACTOR * target)

    def begin(self) -> None:
        """Start a ``step()``: every step may apply, none has."""
        self.open.fill_(1.0)
        self.applied.zero_()

    def start_epoch(self) -> Tensor:
        """Start an epoch; returns :attr:`running` (in place: a captured update reads it)."""
        return self.running.copy_(self.open)

    def gate(self, kl: Tensor, active: Tensor) -> Tensor:
        """Judge the optimizer step about to run on its KL: closes :attr:`open` from the
        first step judged above the limit on, and counts the steps that apply (of the
        ``active`` members: a frozen one's steps move nothing). Returns :attr:`open`."""
        return close_gate_(self.open, self.applied, kl, self.limit, active)

    def stopped(self, active: Tensor) -> Tensor:
        """``[]`` bool: the stop triggered in this ``step()`` for every member still
        ``active`` (a frozen member's KL stays 0 and would never stop the update)."""
        return ((self.open == 0) | (active == 0)).all()


def close_gate_(is_open: Tensor, applied: Tensor, kl: Tensor, limit: float | Tensor, active: Tensor | float) -> Tensor:
    """:meth:`KLEarlyStop.gate` on its tensors, in place (what the update's program
    runs on them as its inputs): ``is_open`` closes where ``kl`` exceeds ``limit`` and
    stays closed; ``applied`` counts the steps still open of the ``active`` members."""
    is_open.mul_(kl <= limit)
    applied.add_(is_open * active)
    return is_open


def adapted_lr(lr: float, kl: float, target: float, bounds: tuple[float, float]) -> float:
    """rsl_rl's rule: ``lr / 1.5`` when ``kl > 2 target``, ``lr * 1.5`` when
    ``kl < target / 2``, else ``lr``; clamped to ``bounds``. A NaN KL keeps ``lr``."""
    if kl > 2.0 * target:
        lr /= 1.5
    elif kl < 0.5 * target:
        lr *= 1.5
    low, high = bounds
    return min(max(lr, low), high)


def adapt_lr_(lr: Tensor, kl: Tensor, target: float, bounds: tuple[float, float]) -> Tensor:
    """rsl_rl's rule on the device, in place: ``lr / 1.5`` when ``kl > 2 target``,
    ``lr * 1.5`` when ``0 < kl < target / 2``, clamped to ``bounds`` (no host sync).
    What ``kl_adaptive_lr_per_minibatch`` applies before every optimizer step."""
    low, high = bounds
    lowered = torch.where(kl > 2.0 * target, lr / 1.5, lr)
    raised = torch.where((kl < 0.5 * target) & (kl > 0.0), lr * 1.5, lowered)
    return lr.copy_(raised.clamp(low, high))
