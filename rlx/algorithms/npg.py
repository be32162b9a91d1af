"""Natural policy gradient and TRPO on rlx's shared engine.

One :meth:`NPG.step` per collected batch:

1. GAE (shared with PPO), advantages normalized over the batch.
2. ``g``: gradient of the surrogate ``mean(exp(logp - logp_old) A)`` over the whole
   batch, at θ_old (where it equals the plain ``mean(∇logp A)``).
3. ``x ≈ (F + λ I)⁻¹ g`` by conjugate gradient, with Fisher-vector products on a random
   ``fvp_subsample`` of the batch: Gauss-Newton ``Jᵀ M J v`` with the distribution's
   analytic ``M`` (:meth:`~rlx.distributions.Distribution.fisher_product`), or the Hessian
   of the mean KL for a distribution without one.
4. The step: ``sqrt(2δ / xᵀ(F + λ I)x) · x`` (``"kl"``) or ``trust_region_size · x``
   (``"fixed"``); with ``line_search``, TRPO's backtracking with every candidate
   evaluated in one ``vmap``-ed pass and the accepted one chosen on the device.
5. Critic regression on the λ-returns with the config's optimizer.

The natural step runs in float32 (or the model's dtype) even with ``enable_amp``, which
applies to the critic regression only. No host sync happens before the single transfer
of the step's statistics.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from rlx import distributed as rdist
from rlx._sync import allowed_sync
from rlx.algorithms.base import Algorithm, Obs
from rlx.buffer import ACTIONS, ADVANTAGES, LOGP, RETURNS
from rlx.distributions import Distribution
from rlx.env import OBS
from rlx.natural_gradient import conjugate_gradient, gauss_newton_fvp, kl_hessian_fvp

if TYPE_CHECKING:
    from rlx.config import NPGConfig
    from rlx.env import EnvFactory

__all__ = ["NPG", "split_actor_critic"]


def split_actor_critic(model: nn.Module, sample_obs: Obs) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """The model's actor and critic parameters, which must not overlap.

    Uses ``actor_parameters()`` / ``critic_parameters()`` when the model has them, and
    otherwise asks autograd which parameters each output depends on.

    Raises:
        ValueError: a parameter feeds both the distribution and the value (a shared
            trunk): a natural step on it would also move the critic.
    """
    if callable(getattr(model, "actor_parameters", None)) and callable(getattr(model, "critic_parameters", None)):
        actor, critic = list(model.actor_parameters()), list(model.critic_parameters())
    else:
        params = [p for p in model.parameters() if p.requires_grad]
        dist_params, values = model(sample_obs)
        actor_grads = torch.autograd.grad(dist_params.sum(), params, allow_unused=True, retain_graph=True)
        critic_grads = torch.autograd.grad(values.sum(), params, allow_unused=True)
        actor = [p for p, g in zip(params, actor_grads) if g is not None]
        critic = [p for p, g in zip(params, critic_grads) if g is not None]
    shared = {id(p) for p in actor} & {id(p) for p in critic}
    if shared:
        names = [n for n, p in model.named_parameters() if id(p) in shared]
        raise ValueError(
            f"model: NPG needs separate actor and critic parameters, but {names} feed both; "
            "use separate networks (the default model does)"
        )
    return actor, critic


class _ActorView(nn.Module):
    """The model's distribution head alone, as a module for ``functional_call``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, obs: Obs) -> Tensor:
        dist_params = getattr(self.model, "dist_params", None)
        return dist_params(obs) if dist_params is not None else self.model(obs)[0]


def _has_analytic_fisher(dist: Distribution) -> bool:
    return type(dist).fisher_product is not Distribution.fisher_product


class NPG(Algorithm):
    """NPG / TRPO; build it with ``NPGConfig(...).build(env_cls)``."""

    config: NPGConfig

    def __init__(self, env_cls: EnvFactory, config: NPGConfig) -> None:
        super().__init__(env_cls, config)
        self._actor_view = _ActorView(self.policy.model)
        names = {id(p): f"model.{n}" for n, p in self.policy.model.named_parameters()}
        self._actor_names = [names[id(p)] for p in self.actor_params]
        self._actor_shapes = [p.shape for p in self.actor_params]
        self._actor_sizes = [p.numel() for p in self.actor_params]

    def _optimized_parameters(self) -> list[nn.Parameter]:
        sample = self.env.observation_spec.rand((2,)).to(self.device)
        self.actor_params, self.critic_params = split_actor_critic(self.policy.model, self.policy.normalize(sample))
        return self.critic_params

    # -- flat parameter vectors ------------------------------------------------------------

    def _flat_actor(self) -> Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.actor_params])

    def _unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        chunks = torch.split(theta, self._actor_sizes)
        return {n: c.view(s) for n, c, s in zip(self._actor_names, chunks, self._actor_shapes)}

    def _dist_params(self, theta: Tensor, obs_normalized: Obs) -> Tensor:
        return functional_call(self._actor_view, self._unflatten(theta), (obs_normalized,))

    # -- the step ------------------------------------------------------------------------

    def step(self) -> dict[str, float]:
        """One natural-gradient step on the actor, then critic regression.

        Returns:
            ``losses/{policy,vf,entropy,total}`` (policy: minus the surrogate after the
            step), ``monitors/kl_div`` (mean KL(old || new) on the batch, after the step),
            ``monitors/lr`` (the critic's), ``npg/step_size`` (the multiplier applied to
            the CG direction, 0 when the line search rejects every candidate),
            ``npg/cg_residual``, ``npg/surrogate_gain``, ``npg/line_search_backtracks``
            (-1 when rejected, 0 without line search) and ``profiling/step_ms``.

        Raises:
            RuntimeError: no rollout: ``collect()`` must come first.
            FloatingPointError: the update left NaN or inf in the parameters.
        """
        self._check_buffered()
        start = time.perf_counter()
        cfg = self.config
        self._compute_advantages()
        batch = self._flat_batch()
        advantages = batch[ADVANTAGES]
        if cfg.normalize_advantages:
            advantages = self._normalized_advantages(advantages)
        lr = self.lr
        actor_stats = self._natural_step(batch[OBS], batch[ACTIONS], batch[LOGP], advantages)
        vf_loss = self._fit_critic(batch[OBS], batch[RETURNS])
        self._finish_step()

        stats = rdist.all_reduce_(torch.stack([*actor_stats, vf_loss, self._params_finite()]), "mean")
        with allowed_sync():
            values = stats.tolist()  # SYNC: the stats of step()
        policy_loss, entropy_loss, kl, step_size, residual, gain, backtracks, vf, params_finite = values
        out = {
            "losses/policy": policy_loss,
            "losses/vf": vf,
            "losses/entropy": entropy_loss,
            "losses/total": policy_loss + vf,
            "monitors/kl_div": kl,
            "monitors/lr": lr,
            "npg/step_size": step_size,
            "npg/cg_residual": residual,
            "npg/surrogate_gain": gain,
            "npg/line_search_backtracks": backtracks,
            "profiling/step_ms": 1e3 * (time.perf_counter() - start),
        }
        self._check_params_finite(params_finite, out)
        return out

    def _natural_step(self, obs: Obs, actions: Tensor, old_logp: Tensor, advantages: Tensor) -> list[Tensor]:
        cfg = self.config
        policy = self.policy
        N = advantages.shape[0]
        obs_n = policy.normalize(obs)
        theta0 = self._flat_actor()
        with torch.no_grad():
            old_params = self._dist_params(theta0, obs_n)  # [N, K], detached: never a live graph
        old_dist = policy.distribution(old_params, obs)

        def surrogate(theta: Tensor, obs_n: Obs, obs: Obs, actions: Tensor, old_logp: Tensor, adv: Tensor) -> Tensor:
            dist = policy.distribution(self._dist_params(theta, obs_n), obs)
            return (torch.exp(dist.log_prob(actions) - old_logp) * adv).mean()

        g = grad(surrogate)(theta0, obs_n, obs, actions, old_logp, advantages)  # [P], whole batch
        rdist.all_reduce_(g, "mean")  # data parallel: the gradient of the global batch

        # Fisher-vector products (and the line search) on a random subsample.
        n = cfg.fvp_batch_size
        if n < N:
            idx = torch.randperm(N, device=self.device)[:n]
            sub = (obs_n[idx], obs[idx], actions[idx], old_logp[idx], advantages[idx])
            sub_old_dist = policy.distribution(old_params[idx], sub[1])
        else:
            sub = (obs_n, obs, actions, old_logp, advantages)
            sub_old_dist = old_dist

        def params_fn(theta: Tensor) -> Tensor:
            return self._dist_params(theta, sub[0])

        if _has_analytic_fisher(sub_old_dist):
            fvp = gauss_newton_fvp(params_fn, theta0, sub_old_dist.fisher_product, damping=cfg.damping)
        else:

            def mean_kl(theta: Tensor) -> Tensor:
                return sub_old_dist.kl(policy.distribution(params_fn(theta), sub[1])).mean()

            fvp = kl_hessian_fvp(mean_kl, theta0, damping=cfg.damping)
        if self.world_size > 1:
            local_fvp = fvp

            def fvp(v: Tensor) -> Tensor:  # the global batch's Fisher on every rank
                return rdist.all_reduce_(local_fvp(v), "mean")

        cg = conjugate_gradient(fvp, g, iters=cfg.cg_iters, residual_tol=cfg.cg_residual_tol)
        x = cg.x
        zero = torch.zeros((), device=x.device, dtype=x.dtype)
        if cfg.step_size_rule == "kl":
            xAx = x.dot(fvp(x))
            scale = torch.where(xAx > 0, torch.sqrt(2.0 * cfg.max_kl / torch.where(xAx > 0, xAx, 1.0)), zero)
        else:
            scale = torch.full((), cfg.trust_region_size, device=x.device, dtype=x.dtype)
        direction = x

        if cfg.line_search:
            coeffs = cfg.backtrack_coeff ** torch.arange(cfg.max_backtracks + 1, device=x.device, dtype=x.dtype)
            scales = scale * coeffs  # [C]
            candidates = theta0 + scales.unsqueeze(1) * direction  # [C, P]
            sub_surr0 = surrogate(theta0, *sub)

            def evaluate(theta: Tensor) -> tuple[Tensor, Tensor]:
                dist = policy.distribution(self._dist_params(theta, sub[0]), sub[1])
                surr = (torch.exp(dist.log_prob(sub[2]) - sub[3]) * sub[4]).mean()
                return surr, sub_old_dist.kl(dist).mean()

            with torch.no_grad():
                surr_c, kl_c = vmap(evaluate)(candidates)  # [C] each, one batched pass
                # Every rank accepts the same candidate: global surrogates and KLs.
                reduced = rdist.all_reduce_(torch.cat([surr_c, kl_c, sub_surr0.detach().view(1)]), "mean")
                surr_c, kl_c, sub_surr0 = reduced[: len(surr_c)], reduced[len(surr_c) : -1], reduced[-1]
            ok = (kl_c <= cfg.max_kl) & (surr_c > sub_surr0) & torch.isfinite(surr_c)
            first = torch.argmax(ok.to(torch.int8)).view(1)  # the largest acceptable step
            accepted = ok.any()
            # torch.where returns theta0's own values when rejected: bit-exact restore.
            theta_new = torch.where(accepted, candidates.index_select(0, first).squeeze(0), theta0)
            step_size = torch.where(accepted, scales.index_select(0, first).squeeze(0), zero)
            backtracks = torch.where(accepted, first.squeeze(0).to(x.dtype), -torch.ones_like(zero))
        else:
            theta_new = theta0 + scale * direction
            step_size, backtracks = scale, zero

        with torch.no_grad():
            for p, chunk in zip(self.actor_params, torch.split(theta_new, self._actor_sizes)):
                p.copy_(chunk.view_as(p))
            new_dist = policy.distribution(self._dist_params(theta_new, obs_n), obs)
            kl = old_dist.kl(new_dist).mean()
            surr_old = (torch.exp(old_dist.log_prob(actions) - old_logp) * advantages).mean()
            surr_new = (torch.exp(new_dist.log_prob(actions) - old_logp) * advantages).mean()
            entropy = old_dist.entropy().mean()
        return [
            -surr_new.float(),
            -entropy.float(),
            kl.float(),
            step_size.float(),
            cg.residual_norm.float(),
            (surr_new - surr_old).float(),
            backtracks.float(),
        ]

    def _fit_critic(self, obs: Obs, returns: Tensor) -> Tensor:
        """Regress the critic on the λ-returns; the mean loss over minibatches (0-d)."""
        cfg = self.config
        N = returns.shape[0]
        M = cfg.critic_minibatch_size or N
        obs_n = self.policy.normalize(obs)
        value_fn = getattr(self.policy.model, "value", None) or (lambda o: self.policy.model(o)[1])
        total = torch.zeros((), device=self.device)
        count = 0
        for _ in range(cfg.optim_critic_iters):
            index = torch.randperm(N, device=self.device)
            for lo in range(0, N, M):
                mb = index[lo : lo + M]
                with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=cfg.enable_amp):
                    values = value_fn(obs_n[mb])
                loss = 0.5 * (values.float() - returns[mb]).square().mean()
                self.grad_scaler.scale(loss).backward()
                self._optimizer_step(self.critic_params)
                total = total + loss.detach()
                count += 1
        return total / count
