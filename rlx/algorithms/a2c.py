"""Synchronous advantage actor-critic (A2C; Mnih et al., 2016, https://arxiv.org/abs/1602.01783).

One :meth:`~rlx.algorithms.ppo.PPO.step` of A2C is one epoch of PPO's engine with another
objective: the plain policy-gradient surrogate ``-mean(logp * A)`` (no ratio, no
clipping), a value regression and an entropy bonus, in one gradient step on the whole
rollout or in a few minibatches. Collection, GAE with rlx's episode-end handling,
normalizers, AMP, micro-batches, schedules, gradient clipping, ``compile`` and
``cudagraphs`` are the shared engine's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor

from rlx.algorithms.ppo import PPO
from rlx.algorithms.ppo_losses import kl_terms
from rlx.members import seed_means
from rlx.algorithms.recurrent_ppo import RecurrentUpdate
from rlx.collect.buffer import ADVANTAGES, LOGP, RETURNS
from rlx.policy import EvalOutput

if TYPE_CHECKING:
    from rlx.algorithms.minibatches import Batch
    from rlx.config import A2CConfig, RecurrentA2CConfig

__all__ = ["A2C", "A2CLosses", "RecurrentA2C", "a2c_losses"]


class A2CLosses(NamedTuple):
    """A2C loss terms for one minibatch (0-d tensors; only ``total`` carries grad)."""

    total: Tensor
    policy: Tensor
    vf: Tensor
    entropy: Tensor  #: minus the mean entropy: the term ``entropy_coeff`` multiplies
    kl: Tensor  #: approximate KL(rollout || current), ``E[(r - 1) - log r]`` (a monitor)


def a2c_losses(
    logp: Tensor,
    entropy: Tensor,
    values: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    returns: Tensor,
    *,
    vf_coeff: float | Tensor,
    entropy_coeff: float | Tensor,
    num_seeds: int = 1,
) -> A2CLosses:
    """The A2C objective, as a loss to minimise.

    * policy: ``-mean(logp * A)``, whose gradient is the policy gradient
      ``-mean(∇logp * A)`` with the advantages as constants;
    * value: ``0.5 mean((V - R)²)``;
    * entropy: ``-mean(H)``;
    * total: ``policy + vf_coeff * value + entropy_coeff * entropy``.

    Args:
        logp, entropy, values: ``[M, 1]`` from the current policy (with grad).
        old_logp: ``[M, 1]`` from the rollout (only for the KL monitor).
        advantages, returns: ``[M, 1]`` from GAE.
        num_seeds: ``S > 1``: every term is ``[S]``, each seed's mean (as :func:`~rlx.algorithms.ppo_losses.ppo_losses`).
    """
    mean = seed_means(num_seeds)
    policy_loss = -mean(logp * advantages)
    vf_loss = 0.5 * mean((values - returns).square())
    entropy_loss = -mean(entropy)
    total = policy_loss + vf_coeff * vf_loss + entropy_coeff * entropy_loss
    with torch.no_grad():
        log_ratio = (logp - old_logp).detach().float()
        kl = mean(kl_terms(log_ratio))
    return A2CLosses(total, policy_loss.detach(), vf_loss.detach(), entropy_loss.detach(), kl)


class A2C(PPO):
    """A2C on rlx's shared engine; build it with ``A2CConfig(...).build(env_cls)``.

    The optimizer is the config's (Adam by default; the original A2C used RMSprop:
    ``optimizer_cls=torch.optim.RMSprop, optimizer_config={"lr": 7e-4, "alpha": 0.99,
    "eps": 1e-5}``).
    """

    config: A2CConfig
    loss_fields = A2CLosses

    def objective(self, out: EvalOutput, rollout: Batch) -> A2CLosses:
        inputs = (out.logp, out.entropy, out.values.float(), rollout[LOGP], rollout[ADVANTAGES], rollout[RETURNS])
        return a2c_losses(*inputs, vf_coeff=self.hparams.get("vf_coeff"), entropy_coeff=self.entropy_coeff,
                          num_seeds=self.num_seeds)


class RecurrentA2C(RecurrentUpdate, A2C):
    """A2C with a recurrent policy, trained on sequences; build it with
    ``RecurrentA2CConfig(...).build(env_cls)``."""

    config: RecurrentA2CConfig
