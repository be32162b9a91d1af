"""Natural policy gradient and TRPO on rlx's shared engine.

One :meth:`NPG.step` per collected batch:

1. GAE (shared with PPO), advantages normalized over the batch.
2. ``g``: gradient of the surrogate ``mean(exp(logp - logp_old) A)`` over the whole
   batch, at θ_old (where it equals the plain ``mean(∇logp A)``).
3. ``x ≈ (F + λ I)⁻¹ g`` by conjugate gradient, with Fisher-vector products on a random
   ``fvp_subsample`` of the batch: Gauss-Newton ``Jᵀ M J v`` with the distribution's
   analytic ``M`` (:meth:`~rlx.core.distributions.Distribution.fisher_product`), or the Hessian
   of the mean KL for a distribution without one.
4. The step: ``sqrt(2δ / xᵀ(F + λ I)x) · x`` (``"kl"``) or ``trust_region_size · x``
   (``"fixed"``); with ``line_search``, TRPO's backtracking with every candidate
   evaluated in one ``vmap``-ed pass and the accepted one chosen on the device.
5. Critic regression on the λ-returns with the config's optimizer.

The natural step runs in float32 (or the model's dtype) even with ``enable_amp``, which
applies to the critic regression only. No host sync happens before the single transfer
of the step's statistics.

The actor's flat vector is ``[S, P]``, one row per member (:mod:`rlx.members`; a single
run is ``[1, P]``): the surrogate is the sum of each member's mean, so its gradient is
each member's own; the Fisher of that sum is block-diagonal, so one Fisher-vector product
serves all members and conjugate gradient runs row by row (every dot product, step
length and line-search choice per member). With S > 1 a member whose step is not finite
is frozen where it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from rlx.core import distributed as rdist
from rlx.algorithms.base import Algorithm
from rlx.algorithms.whole_step import WholeStepGraph
from rlx.algorithms.minibatches import cat_passes, micro_batch_rows, pass_rows, passes
from rlx.core.compiling import WarmProgram, recheck_values
from rlx.collect.buffer import ACTIONS, ADVANTAGES, LOGP, RETURNS
from rlx.core.distributions import Distribution
from rlx.env import OBS
from rlx.core.natural_gradient import conjugate_gradient, gauss_newton_fvp, kl_hessian_fvp, row_dot
from rlx.policy import Obs
from rlx.core.stats import Stats
from rlx.members.optim import adam_state, steps_functionally
from rlx.models import split_actor_critic

if TYPE_CHECKING:
    from rlx.config import NPGConfig
    from rlx.env import EnvFactory

__all__ = ["MAX_CRITIC_PROGRAM_PASSES", "NPG", "split_actor_critic"]

#: The most passes (of ``micro_batch_size`` rows) a critic minibatch may have to run as one
#: compiled program with ``compile``; more run as a compiled pass's loss each (the program
#: unrolls its passes, and its compile time grows with them).
MAX_CRITIC_PROGRAM_PASSES = 8
#: The natural step's program's wrapper on a CPU (``rlx.core.compiling.compiled``'s
#: ``cpp_wrapper``): Python. Built apart in C++ (``"separate"``) its first compile was
#: shorter at one pass and as long at 8, and its warm step slower (docs/performance.md,
#: ``benchmarks/experiments/npg_wrapper.py``); one C++ file (``True``) over 64 passes did
#: not compile in 18 minutes.
NATURAL_STEP_CPP_WRAPPER: bool | str = False


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


def surrogate_of(dist: Distribution, samples: Samples, mean: Callable[[Tensor], Tensor]) -> Tensor:
    """``mean(exp(logp - logp_old) A)`` of ``dist`` on ``samples``, reduced by ``mean``
    (each member's, ``[S]``)."""
    return mean(torch.exp(dist.log_prob(samples.actions) - samples.old_logp) * samples.advantages)


class Samples(NamedTuple):
    """The samples a natural step reads (the whole batch or its FVP subsample), ``[n, ...]``."""

    obs_normalized: Obs
    obs: Obs  #: raw: the action mask (if any) is read from here
    actions: Tensor
    old_logp: Tensor  #: ``[n, 1]``, from the rollout
    advantages: Tensor  #: ``[n, 1]``

    def select(self, index: Tensor) -> Samples:
        return Samples(*(x[index] for x in self))


class NaturalStep(NamedTuple):
    """What one natural step did, as 0-d tensors on the device."""

    # [S] each: every member's.
    policy_loss: Tensor  #: minus the surrogate after the step
    entropy_loss: Tensor  #: minus the mean entropy before the step
    kl: Tensor  #: mean KL(old || new) on the batch, after the step
    step_size: Tensor  #: the multiplier applied to the CG direction (0: rejected)
    cg_residual: Tensor
    surrogate_gain: Tensor
    backtracks: Tensor  #: line-search backtracks taken (-1: rejected; 0 without line search)


class NPG(WholeStepGraph, Algorithm):
    """NPG / TRPO; build it with ``NPGConfig(...).build(env_cls)``."""

    config: NPGConfig
    captures = True  # cudagraphs captures its whole step

    def __init__(self, env_cls: EnvFactory, config: NPGConfig) -> None:
        super().__init__(env_cls, config)
        self._actor_view = _ActorView(self.policy.model)
        names = {id(p): f"model.{n}" for n, p in self.policy.model.named_parameters()}
        self._actor_names = [names[id(p)] for p in self.actor_params]
        # The flat vector is [S, P]: each parameter's member slice, flattened, per row (a
        # single run's parameters have no member dim).
        lead = len(self.members.lead)
        self._actor_shapes = [p.shape[lead:] for p in self.actor_params]
        self._actor_sizes = [p.shape[lead:].numel() for p in self.actor_params]
        #: Rows per pass (``micro_batch_size``; ``sys.maxsize``: whole passes).
        self._micro = micro_batch_rows(config.micro_batch_size, self.policy.model, self.device)
        model = self.policy.model
        self._value_fn = getattr(model, "value", None) or (lambda o: model(o)[1])
        self._loss_scaled = self.grad_scaler.is_enabled()  # float16 AMP (a compiled program cannot ask)
        #: Why ``compile`` compiles a critic pass's loss rather than its whole minibatch
        #: (``None``: it does, or no compile): an optimizer rlx does not step itself, or
        #: more passes a minibatch than :data:`MAX_CRITIC_PROGRAM_PASSES`.
        rows = config.num_envs * self.horizon  # each member's
        critic_passes = len(passes(min(config.critic_minibatch_size or rows, rows) * self.num_seeds, self._micro,
                                   self.num_seeds))
        self.critic_fallback = None
        if self.compiles and not steps_functionally(self.optimizer, self.grad_scaler):
            self.critic_fallback = (f"optimizer_cls {type(self.optimizer).__name__} with these options (the program "
                                    "steps Adam and AdamW with one param group, without maximize, differentiable or "
                                    "a float16 loss scale)")
        elif self.compiles and critic_passes > MAX_CRITIC_PROGRAM_PASSES:
            self.critic_fallback = (f"a critic minibatch of {critic_passes} passes (one program holds at most "
                                    f"{MAX_CRITIC_PROGRAM_PASSES}: it unrolls them)")
        #: The natural step and a critic minibatch (its passes' losses and backward, the
        #: clipped optimizer step), each a warm program with ``compile`` (keyed by the
        #: subsample's presence and the minibatch's rows; the batch's other dims are the
        #: algorithm's); where :attr:`critic_fallback` says why not, a pass's loss is the
        #: program and autograd's backward and the optimizer's step run around it.
        self._natural_program, self._critic_loss = self._natural_step, self._critic_losses
        self._critic_update = self.critic_minibatch
        self.warm_programs: tuple[WarmProgram, ...] = ()
        if self.compiles:
            # Called once a step: its wrapper stays Python (NATURAL_STEP_CPP_WRAPPER); so does
            # a critic program's over several passes.
            natural = WarmProgram(self._natural_step, device=self.device, cpp_wrapper=NATURAL_STEP_CPP_WRAPPER)
            self._natural_program = lambda samples, index: natural(index is None, samples, index)
            if self.critic_fallback is None:
                critic = WarmProgram(self.critic_minibatch, device=self.device, autograd=True,
                                     cpp_wrapper=critic_passes == 1)
                self._critic_update = lambda obs, returns, index: critic(index.shape[0], obs, returns, index)
            else:
                critic = WarmProgram(self._critic_losses, device=self.device, dynamic=None)
                self._critic_loss = lambda obs, returns: critic(returns.shape[0], obs, returns)
            self.warm_programs = (natural, critic)
        #: What step() runs on the device: :meth:`update_phase`, through one CUDA graph with ``cudagraphs``.
        self.run_update_phase = self._wrapped_phase()

    @property
    def needs_tensor_lr(self) -> bool:
        # A compiled critic minibatch steps Adam with the LR as a tensor (a float would be
        # baked into its program).
        compiled_adam = self.compiles and self.config.optimizer_cls in (torch.optim.Adam, torch.optim.AdamW)
        return self.uses_cuda_graphs or compiled_adam

    def _optimized_parameters(self) -> list[nn.Parameter]:
        sample = self.env.observation_spec.rand((2 * self.num_seeds,)).to(self.device)  # whole members
        self.actor_params, self.critic_params = split_actor_critic(self.policy.model, self.policy.normalize(sample))
        return self.critic_params

    # -- flat parameter vectors ------------------------------------------------------------

    def _flat_actor(self) -> Tensor:
        """``[S, P]``."""
        return torch.cat([p.detach().reshape(self.num_seeds, -1) for p in self.actor_params], dim=1)

    def _unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        """``[S, P]`` -> the actor's parameters (a single run's without the member dim)."""
        chunks = torch.split(theta, self._actor_sizes, dim=-1)
        return {n: c.reshape(*self.members.lead, *s) for n, c, s in zip(self._actor_names, chunks, self._actor_shapes)}

    @torch.no_grad()
    def _dist_params(self, theta: Tensor, obs_normalized: Obs) -> Tensor:
        """The actor's distribution parameters at ``theta`` on ``obs_normalized``, in passes."""
        params = self._unflatten(theta)
        S = self.num_seeds
        return cat_passes([functional_call(self._actor_view, params, (pass_rows(obs_normalized, lo, n, S),))
                           for lo, n in passes(obs_normalized.shape[0], self._micro, S)], S)

    def _gradient(self, theta: Tensor, samples: Samples) -> Tensor:
        """``[S, P]``: the gradient of the summed surrogates on ``samples``, accumulated over
        passes, each weighted by its share of the rows."""
        N, S = samples.advantages.shape[0], self.num_seeds
        parts = passes(N, self._micro, S)
        if len(parts) == 1:
            return grad(self._surrogate)(theta, samples)
        g = torch.zeros_like(theta)
        for lo, n in parts:
            part = Samples(*(pass_rows(x, lo, n, S) for x in samples))
            g.add_(grad(self._surrogate)(theta, part), alpha=n * S / N)
        return g

    def _dist(self, theta: Tensor, samples: Samples) -> Distribution:
        """The action distribution of actor parameters ``theta`` on ``samples``."""
        params = functional_call(self._actor_view, self._unflatten(theta), (samples.obs_normalized,))
        return self.policy.distribution(params, samples.obs)

    def _surrogates(self, theta: Tensor, samples: Samples) -> Tensor:
        """``[S]`` ``mean(exp(logp_θ - logp_old) A)``: the objective each member's step ascends."""
        return surrogate_of(self._dist(theta, samples), samples, self.members.mean_each)

    def _surrogate(self, theta: Tensor, samples: Samples) -> Tensor:
        """0-d: the sum of the members' surrogates (whose gradient is each member's own)."""
        return surrogate_of(self._dist(theta, samples), samples, self.members.mean_each).sum()

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
        recheck_values()  # what changed since collect() (max_kl, damping, ...) is seen by the compiled step
        lr, hparams = self.lr, self.hparam_stats()
        stats = self.run_update_phase()
        self._finish_step(obs_statistics=False)  # the phase merged them
        host = stats.to_host()  # SYNC: the stats of step()
        out = {**{k: v for k, v in host.items() if k != "params/finite"}, "monitors/lr": lr, **hparams,
               "profiling/step_ms": 1e3 * (time.perf_counter() - start)}
        self._check_params_finite(host, out)
        return out

    def update_phase(self) -> Stats:
        """All of step()'s work on the device: GAE, the natural step on the actor, the
        critic's regression, the rollout's observations merged into the normalizer, and
        the statistics (returned still on the device). The host decides nothing inside
        it, so one CUDA graph holds it whole (``cudagraphs``)."""
        self.compute_advantages()
        batch = self.flat_batch()
        advantages = batch[ADVANTAGES]
        if self.config.normalize_advantages:
            advantages = self.members.normalize(advantages)
        samples = Samples(self.policy.normalize(batch[OBS]), batch[OBS], batch[ACTIONS], batch[LOGP], advantages)
        actor = self.natural_step(samples)
        vf_loss = self._fit_critic(samples.obs_normalized, batch[RETURNS])
        self.update_obs_statistics()
        stats = Stats()
        add, lead = self.members.stats(stats), self.members.lead
        for name, value in (("losses/policy", actor.policy_loss), ("losses/vf", vf_loss),
                            ("losses/entropy", actor.entropy_loss), ("losses/total", actor.policy_loss + vf_loss),
                            ("monitors/kl_div", actor.kl), ("npg/step_size", actor.step_size),
                            ("npg/cg_residual", actor.cg_residual), ("npg/surrogate_gain", actor.surrogate_gain),
                            ("npg/line_search_backtracks", actor.backtracks)):
            add(name, value.float().reshape(lead))  # [S]: a single run's as 0-d
        self.members.add_activity(stats)
        stats.add("params/finite", self._params_finite(), "min")
        return stats

    def natural_step(self, samples: Samples) -> NaturalStep:
        """``θ += step · (F + λ I)⁻¹ g`` on the actor, each member's row of ``[S, P]``, with
        ``g`` from the whole batch and ``F`` from the FVP subsample; with ``line_search``,
        TRPO's backtracking. Moves the actor's parameters and returns what the step did."""
        N, n = samples.advantages.shape[0], self.config.fvp_batch_size
        # The FVP subsample is drawn here, outside the compiled program: the same draws as
        # an eager run's.
        index = None if n * self.num_seeds >= N else self.members.subsample(N // self.num_seeds, n)
        return self._natural_program(samples, index)

    def _natural_step(self, samples: Samples, index: Tensor | None) -> NaturalStep:
        """:meth:`natural_step` on the FVP subsample ``index`` (``None``: every row); with
        ``compile``, one compiled program."""
        cfg = self.config
        theta0 = self._flat_actor()  # [S, P]
        old_params = self._dist_params(theta0, samples.obs_normalized)  # detached: never a live graph
        old_dist = self.policy.distribution(old_params, samples.obs)
        g = self._gradient(theta0, samples)  # [S, P], whole batch
        rdist.all_reduce_(g, "mean")  # data parallel: the gradient of the global batch
        sub, sub_old_params = (samples, old_params) if index is None else (samples.select(index), old_params[index])
        fvp = self._fisher_vector_product(theta0, sub, sub_old_params)
        cg = conjugate_gradient(fvp, g, iters=cfg.cg_iters, residual_tol=cfg.cg_residual_tol)
        scale = self._step_scale(cg.x, fvp)  # [S, 1]
        if cfg.line_search:
            theta_new, step_size, backtracks = self._line_search(theta0, cg.x, scale, sub, sub_old_params)
        else:
            theta_new, step_size, backtracks = theta0 + scale * cg.x, scale.squeeze(-1), torch.zeros_like(scale.squeeze(-1))
        theta_new, moved = self.members.keep_finite_(theta0, theta_new)
        step_size = torch.where(moved, step_size, 0.0)
        mean = self.members.mean_each
        with torch.no_grad():
            for p, chunk in zip(self.actor_params, torch.split(theta_new, self._actor_sizes, dim=-1)):
                p.copy_(chunk.reshape(p.shape))
            new_dist = self.policy.distribution(self._dist_params(theta_new, samples.obs_normalized), samples.obs)
            surr_old, surr_new = surrogate_of(old_dist, samples, mean), surrogate_of(new_dist, samples, mean)
            return NaturalStep(
                -surr_new, -mean(old_dist.entropy()), mean(old_dist.kl(new_dist)), step_size,
                cg.residual_norm, surr_new - surr_old, backtracks,
            )

    def _fisher_vector_product(self, theta0: Tensor, sub: Samples, sub_old_params: Tensor
                               ) -> Callable[[Tensor], Tensor]:
        """``v -> (F + λ I) v`` at ``theta0`` on the subsample: Gauss-Newton with the
        distribution's analytic Fisher, else the Hessian of the mean KL; under torchrun,
        the global batch's Fisher on every rank; with seeds, each seed's Fisher on its own
        rows (the block-diagonal Fisher of the sum of their mean KLs). Micro-batched, the
        Fisher is the share-weighted sum of each pass's (each its rows' mean)."""
        damping, S = self.config.damping, self.num_seeds
        if self.hparams.varies("damping"):  # each member's, against its row of [S, P]
            damping = self.hparams.get("damping", theta0.dtype).view(S, 1)
        rows = sub.advantages.shape[0]
        parts = []
        for lo, n in passes(rows, self._micro, S):
            part = sub if n * S == rows else Samples(*(pass_rows(x, lo, n, S) for x in sub))
            parts.append((n * S / rows, self._pass_fvp(theta0, part, pass_rows(sub_old_params, lo, n, S))))
        if len(parts) == 1:
            fvp = parts[0][1]
        else:
            def fvp(v: Tensor) -> Tensor:
                return sum(share * part_fvp(v) for share, part_fvp in parts)
        if self.world_size == 1:
            return lambda v: fvp(v) + damping * v
        return lambda v: rdist.all_reduce_(fvp(v) + damping * v, "mean")

    def _pass_fvp(self, theta0: Tensor, sub: Samples, old_params: Tensor) -> Callable[[Tensor], Tensor]:
        """The undamped Fisher-vector product of one pass's rows (their mean Fisher)."""
        S = self.num_seeds
        old_dist = self.policy.distribution(old_params, sub.obs)

        def params_fn(theta: Tensor) -> Tensor:
            return functional_call(self._actor_view, self._unflatten(theta), (sub.obs_normalized,))

        if _has_analytic_fisher(old_dist):
            # gauss_newton_fvp divides by all S * n rows; each member's Fisher is over its n.
            return gauss_newton_fvp(params_fn, theta0, lambda u: S * old_dist.fisher_product(u))

        def mean_kl(theta: Tensor) -> Tensor:
            return self.members.mean_each(old_dist.kl(self.policy.distribution(params_fn(theta), sub.obs))).sum()

        return kl_hessian_fvp(mean_kl, theta0)

    def _step_scale(self, x: Tensor, fvp: Callable[[Tensor], Tensor]) -> Tensor:
        """The multiplier of the CG direction ``x``: ``sqrt(2δ / xᵀ(F + λ I)x)`` (``"kl"``;
        0 for a direction of no curvature) or ``trust_region_size`` (``"fixed"``)."""
        cfg = self.config
        if cfg.step_size_rule != "kl":  # [S, 1]
            return torch.full((x.shape[0], 1), cfg.trust_region_size, device=x.device, dtype=x.dtype)
        xAx = row_dot(x, fvp(x))
        zero = torch.zeros((), device=x.device, dtype=x.dtype)
        two_kl = 2.0 * cfg.max_kl
        if self.hparams.varies("max_kl"):  # each member's, [S, 1]
            two_kl = (2.0 * self.hparams.get("max_kl", torch.float64)).to(xAx.dtype).view(xAx.shape)
        return torch.where(xAx > 0, torch.sqrt(two_kl / torch.where(xAx > 0, xAx, 1.0)), zero)

    def _line_search(
        self, theta0: Tensor, direction: Tensor, scale: Tensor, sub: Samples, sub_old_params: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """TRPO's backtracking: for each member, the largest of ``scale · backtrack_coeff^k ·
        direction`` whose KL is within ``max_kl`` and whose surrogate improves on its own
        rows, all candidates of all members evaluated in one ``vmap``-ed pass and chosen
        on the device (every rank chooses alike). Micro-batched, the candidates are
        evaluated in passes of ``micro_batch_size / candidates`` rows, whose means are
        summed by share.

        Args:
            theta0, direction: ``[S, P]``.
            scale: ``[S, 1]``.

        Returns:
            ``(theta_new [S, P], step_size [S], backtracks [S])``: ``theta0`` itself, 0 and
            -1 for a member whose every candidate is rejected.
        """
        cfg, S = self.config, self.num_seeds
        coeffs = cfg.backtrack_coeff ** torch.arange(cfg.max_backtracks + 1, device=theta0.device, dtype=theta0.dtype)
        scales = coeffs.view(-1, 1, 1) * scale  # [C, S, 1]
        candidates = theta0 + scales * direction  # [C, S, P]

        rows, C = sub.advantages.shape[0], candidates.shape[0]
        pass_rows = rows if self._micro >= rows else max(1, self._micro // C)
        with torch.no_grad():
            surr0 = self._surrogates(theta0, sub)  # [S]
            surr_c = kl_c = torch.zeros((), device=theta0.device)
            for lo in range(0, rows, pass_rows):  # one batched pass over the candidates (per pass of rows)
                n = min(pass_rows, rows - lo)
                part = sub if n == rows else Samples(*(x[lo : lo + n] for x in sub))
                old_dist = self.policy.distribution(sub_old_params[lo : lo + n], part.obs)

                def evaluate(theta: Tensor, part: Samples = part, old_dist: Distribution = old_dist) -> tuple[Tensor, Tensor]:
                    return self._surrogates(theta, part), self.members.mean_each(old_dist.kl(self._dist(theta, part)))

                part_surr, part_kl = vmap(evaluate)(candidates)  # [C, S] each
                surr_c, kl_c = surr_c + (n / rows) * part_surr, kl_c + (n / rows) * part_kl
            if self.world_size > 1:  # the global batch's surrogates and KLs: every rank chooses alike
                reduced = rdist.all_reduce_(torch.cat([surr_c, kl_c, surr0.view(1, S)]), "mean")
                C = surr_c.shape[0]
                surr_c, kl_c, surr0 = reduced[:C], reduced[C : 2 * C], reduced[-1]
        max_kl = self.hparams.get("max_kl", kl_c.dtype)  # a float, or each member's [S]
        ok = (kl_c <= max_kl) & (surr_c > surr0) & torch.isfinite(surr_c)
        first = torch.argmax(ok.to(torch.int8), dim=0)  # [S]: each member's largest acceptable step
        accepted = ok.any(dim=0)
        chosen = candidates.gather(0, first.view(1, S, 1).expand(1, S, candidates.shape[-1])).squeeze(0)
        # torch.where returns theta0's own values when rejected: bit-exact restore.
        theta_new = torch.where(accepted.unsqueeze(1), chosen, theta0)
        step_size = torch.where(accepted, scales.squeeze(-1).gather(0, first.view(1, S)).squeeze(0), 0.0)
        backtracks = torch.where(accepted, first.to(theta0.dtype), -1.0)
        return theta_new, step_size, backtracks

    def _critic_losses(self, obs_normalized: Obs, returns: Tensor) -> Tensor:
        """``[S]``: each member's ``0.5 mean((V - R)²)`` on a pass's rows (with grad)."""
        with self.autocast():
            values = self._value_fn(obs_normalized)
        return 0.5 * self.members.mean_each((values.float() - returns).square())

    def _fit_critic(self, obs_normalized: Obs, returns: Tensor) -> Tensor:
        """Regress the critic on the λ-returns: each minibatch holds ``critic_minibatch_size``
        rows of every member (the whole buffer by default), the loss is the sum of each
        member's mean, and each member's optimizer step is clipped and gated on its own.
        Returns each member's mean loss over the minibatches, ``[S]``."""
        cfg, members = self.config, self.members
        n = returns.shape[0] // self.num_seeds
        m = cfg.critic_minibatch_size or n
        if self.compiles and self.critic_fallback is None:
            # The Adam state the program reads and writes exists before it runs, in the
            # parameters' dtype (a program traced on a missing state would make it on
            # every call).
            adam_state(self.optimizer, self.critic_params)
        total = torch.zeros(self.num_seeds, device=self.device)
        count = 0
        for _ in range(cfg.optim_critic_iters):
            index = members.epoch_order(n, m, shuffle=True)
            for lo, rows in members.minibatch_bounds(n, m):
                total = total + self._critic_update(obs_normalized, returns, index[lo : lo + rows])
                count += 1
        return total / count

    def critic_minibatch(self, obs_normalized: Obs, returns: Tensor, index: Tensor) -> Tensor:
        """One critic minibatch, the rows ``index`` of every member alike: the loss in passes
        whose gradients accumulate by share, then the optimizer step, each member's
        clipped and gated on its own. Returns each member's loss, ``[S]``. With
        ``compile`` one program (:attr:`critic_fallback`: where not)."""
        S, rows = self.num_seeds, index.shape[0]
        loss = torch.zeros(S, device=self.device)
        for first, size in passes(rows, self._micro, S):  # gradients accumulate by share
            mb = pass_rows(index, first, size, S)
            part = self._critic_loss(obs_normalized[mb], returns[mb])
            share = size * S / rows
            total = part.sum() * share if share != 1.0 else part.sum()
            (self.grad_scaler.scale(total) if self._loss_scaled else total).backward()
            loss = loss + share * part.detach()
        self.optimizer_step(self.critic_params)
        return loss
