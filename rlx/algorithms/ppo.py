"""Proximal policy optimization (Schulman et al., 2017, https://arxiv.org/abs/1707.06347).

One :meth:`PPO.step` runs ``num_sgd_iters`` epochs over the rollout. Each epoch has an
on-device permutation (all drawn first), gathers every entry into contiguous memory once,
and walks static-size minibatch views of it. Losses, monitors and the KL controls
(:mod:`rlx.algorithms.kl_control`) stay on the device; the one host sync is the returned
statistics' (and, on a CPU, one per epoch with the KL early stop: ``PPO.sync_kl_stop``).
"""

from __future__ import annotations

import functools
import sys
import time
from collections import namedtuple
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torchrl.data import Composite

from rlx.core import distributed as rdist
from rlx.algorithms.base import Algorithm
from rlx.algorithms.whole_step import WholeStepGraph
from rlx.core.config_fields import ConfigError
from rlx.models import split_actor_critic
from rlx.algorithms.epochs import Epochs
from rlx.algorithms.kl_control import KLEarlyStop, adapt_lr_, adapted_lr
from rlx.algorithms.minibatches import (  # the micro-batch defaults, re-exported
    CPU_MICRO_BATCH_SIZE, CPU_WIDE_MICRO_BATCH_SIZE, Batch, MinibatchSource, Samples, default_cpu_micro_batch_size,
    micro_batch_rows, pass_rows, passes)
from rlx.algorithms.rnd import IntrinsicRewards
from rlx.algorithms.symmetry import Symmetry
from rlx.collect.buffer import ADVANTAGES, LOGP, RETURNS, VALUES
from rlx.core.compiling import CompiledCall, WarmProgram, compiled, recheck_values
from rlx.members.optim import adam_state, steps_functionally
from rlx.core.cuda_graphs import GraphedBatchCall
from rlx.policy import EvalOutput
from rlx.core.schedulers import Schedule
from rlx.algorithms.ppo_losses import PPOLosses, kl_terms, ppo_losses
from rlx.members.ops import seed_means
from rlx.core.stats import Stats

if TYPE_CHECKING:
    from rlx.config import AlgorithmConfig
    from rlx.env import EnvFactory

__all__ = ["PPO", "PPOLosses", "ppo_losses", "CPU_MICRO_BATCH_SIZE", "CPU_WIDE_MICRO_BATCH_SIZE", "default_cpu_micro_batch_size"]

#: Statistic names of the loss terms (the ``kl`` term is reported as ``monitors/kl_div``
#: after the update instead).
LOSS_STATS = {"total": "losses/total", "policy": "losses/policy", "vf": "losses/vf", "entropy": "losses/entropy",
              "mirror": "losses/mirror",
              "clip_fraction": "monitors/clip_fraction"}


class PPO(Epochs, IntrinsicRewards, WholeStepGraph, Algorithm):
    """PPO on rlx's shared engine; build it with ``AlgorithmConfig(...).build(env_cls)``."""

    config: AlgorithmConfig
    captures = True  # cudagraphs captures its minibatch update
    #: The NamedTuple of the update's loss terms; a minibatch's are stacked in its order.
    loss_fields: type[tuple] = PPOLosses

    def __init__(self, env_cls: EnvFactory, config: AlgorithmConfig) -> None:
        super().__init__(env_cls, config)
        self.entropy_schedule = Schedule(
            config.entropy_coeff_schedule,
            config.entropy_coeff_schedule_kind,
            initial=config.entropy_coeff,
            name="entropy_coeff_schedule",
        )
        # A tensor, updated in place, so a captured update graph sees new values ([S] with
        # members that differ in it).
        lead = self.members.lead if self.hparams.varies("entropy_coeff") else ()
        self.entropy_coeff = torch.zeros(lead, device=self.device)
        self._refresh_entropy_coeff()
        self.minibatches = self._minibatch_source()
        self._kl_index = self.loss_fields._fields.index("kl")  # where the KL sits in stacked losses
        self._micro_units = self._micro_batch_units()
        self._epoch_batch: dict[str, Tensor] = {}
        self._views: tuple[tuple, list[Batch]] | None = None  # the minibatch views of _epoch_batch
        self._update_params = [p for p in self.policy.model.parameters() if p.requires_grad]
        self._loss_scaled = self.grad_scaler.is_enabled()  # float16 AMP (a compiled update cannot ask)
        if config.clip_grad_per_network:
            self.clip_groups = self._actor_and_critic()
        #: The task's mirror (``symmetry_fn``), checked to be an involution; ``None`` without one.
        self.symmetry = None
        if config.symmetry_fn is not None:
            self.symmetry = Symmetry(config.symmetry_fn, self.env.observation_spec, self.env.action_spec, self.device,
                                     where=f"{type(config).__name__}.symmetry_fn")
        if config.mirror_loss_coeff is not None:
            if not self.env.action_spec.dtype.is_floating_point:
                raise ConfigError(f"{type(config).__name__}.mirror_loss_coeff: needs continuous actions (it compares mean "
                                  f"actions), got a {self.env.action_spec.dtype} action spec")
            # The update's terms gain the mirror loss, reported as losses/mirror.
            self.loss_fields = namedtuple(f"{self.loss_fields.__name__}WithMirror", (*self.loss_fields._fields, "mirror"))
        self._init_rnd(config)
        self.kl_stop = None
        # The update's statistics, accumulated on the device by each minibatch update.
        self._sums = torch.zeros(len(self.loss_fields._fields), *self.members.lead, device=self.device)
        self._kl_max = torch.zeros(self.members.lead, device=self.device)
        if config.target_kl_div is not None and not config.kl_adaptive_lr:
            self.kl_stop = KLEarlyStop(self.hparams.get("target_kl_div", torch.float64), self.device, self.members.lead)
        #: Whether the epoch loop reads the KL early stop on the host after each epoch and
        #: ends there: on a CPU, where the read costs nothing, or where a single run's
        #: optimizer is stepped by torch (which cannot hold a step's state). Elsewhere the
        #: epochs after the stop run with every step held (parameters and optimizer state
        #: unchanged, exactly): no host read inside the update.
        self.sync_kl_stop = self.device.type == "cpu" or (
            self.members.size == 1 and not steps_functionally(self.optimizer, self.grad_scaler))
        # What runs the update: minibatch_update, the one implementation, wrapped here and
        # only here. ``compile`` compiles it whole (forward, losses, backward, clip, the KL
        # controls and the optimizer step: one program), or where it cannot
        # (:meth:`compile_fallback` names why) its forward pass and losses; ``cudagraphs``
        # captures it (compiled or not) in a CUDA graph.
        #: Why ``compile`` does not compile the whole update (``None``: it does, or no compile).
        self.compile_fallback = self._compile_fallback() if self.compiles else None
        whole = self.compiles and self.compile_fallback is None
        self.loss_fn = self.losses
        if self.compiles and not whole:
            self.loss_fn = compiled(self.losses, device=self.device, dynamic=self.members.compile_dynamic)
        self.compiled_update = CompiledCall(self.minibatch_update, device=self.device) if whole else None
        self.update = self._wrapped_update()
        #: What step() runs on the device: :meth:`update_phase`, through one CUDA graph
        #: with ``cudagraphs_scope="step"``.
        self.run_update_phase = self._wrapped_phase()
        # The phases around the epochs: GAE and the batch, each epoch's gather, the
        # statistics after the epochs (a program each with compile, on tensor
        # observations; under torch.distributed their all-reduces inside them).
        phases = self.compiles and not isinstance(self.env.observation_spec, Composite)
        self.prepare, self.gather, self.finish_statistics = self.prepared_batch, self.gathered, self.step_statistics
        #: The phases' compiled programs (prepare, gather, finish_statistics), with ``compile``.
        self.phase_programs: tuple[WarmProgram, ...] = ()
        if phases:  # warm programs: their inputs keep their shapes (the buffer's, N's), their Python values are checked
            prepare, gather, finish = self.phase_programs = tuple(
                WarmProgram(fn, device=self.device) for fn in (self.prepared_batch, self.gathered, self.step_statistics))
            self.prepare, self.gather = functools.partial(prepare, None), functools.partial(gather, None)
            # The minibatches run: an int (a value of the layout) or, with the KL early stop, a tensor.
            self.finish_statistics = lambda batch, n, sgd_epochs: finish(n if isinstance(n, int) else None, batch, n,
                                                                         sgd_epochs)
        #: Every minibatch update of a step as one program (compile on a CPU), or ``None``;
        #: :attr:`scan_fallback` says why not (``None`` without a whole compiled update).
        self.scanned_updates, self.scan_fallback = self.scan_updates()
        # The KL pass after the update: inside finish_statistics' program, else a program of its own.
        self.kl_sum = (compiled(self.kl_terms_sum, device=self.device, dynamic=None) if self.compiles and not phases
                       else self.kl_terms_sum)

    def _compile_fallback(self) -> str | None:
        """Why ``compile`` compiles the forward pass and losses rather than the whole
        minibatch update (``None``: the whole update compiles)."""
        if not steps_functionally(self.optimizer, self.grad_scaler):
            return (f"optimizer_cls {type(self.optimizer).__name__} with these options (the program steps Adam and AdamW "
                    "with one param group, without maximize, differentiable or a float16 loss scale)")
        return None

    def _wrapped_update(self) -> Callable[..., Tensor]:
        """:meth:`minibatch_update` (compiled with ``compile``), through a CUDA graph with
        ``cudagraphs`` (a new one after each load: a captured graph reads the optimizer
        state it was captured with)."""
        update = self.compiled_update or self.minibatch_update
        if self.compiled_update is not None:
            # The Adam state the program reads and writes exists before it runs (after a
            # load too): a program traced on a missing state would make it on every call.
            adam_state(self.optimizer, self._update_params)
        if not self.uses_cuda_graphs or self.graphs_whole_step:
            return update
        return GraphedBatchCall(update, self.device, before_capture=self.drop_grads)

    @property
    def graphs_whole_step(self) -> bool:
        """Whether one CUDA graph holds all of step()'s device work (``cudagraphs_scope="step"``)."""
        return self.uses_cuda_graphs and self.config.cudagraphs_scope == "step"

    def _wrapped_phase(self) -> Callable[[], tuple[Stats, int]]:
        # The graph holds every epoch: the KL stop gates on the device.
        assert not (self.graphs_whole_step and self.sync_kl_stop)
        return super()._wrapped_phase()

    @property
    def needs_tensor_lr(self) -> bool:
        # The KL early stop gates the LR on the device (Members.gates_lr).
        # A compiled update reads the LR as a tensor: a float would be baked into its program.
        compiled_adam = self.compiles and self.config.optimizer_cls in (torch.optim.Adam, torch.optim.AdamW)
        kl_stop = self.config.target_kl_div is not None and not self.config.kl_adaptive_lr
        return (self.uses_cuda_graphs or compiled_adam or (kl_stop and self.members.gates_lr)
                or self.config.kl_adaptive_lr_per_minibatch)

    def _actor_and_critic(self) -> list[list[torch.nn.Parameter]]:
        """The actor's and the critic's parameters (``clip_grad_per_network``)."""
        # Zeros, whole members: autograd finds which outputs a parameter feeds without
        # drawing from the RNG (a run's data must not depend on this option's probe).
        sample = self.env.observation_spec.zero((2 * self.num_seeds,)).to(self.device)
        try:
            actor, critic = split_actor_critic(self.policy.model, self.policy.normalize(sample),
                                               needed_by="clip_grad_per_network")
        except ValueError as e:
            raise ConfigError(f"{type(self.config).__name__}.{e}") from e
        trained = {id(p) for p in self._update_params}
        return [[p for p in actor if id(p) in trained], [p for p in critic if id(p) in trained]]

    def _minibatch_source(self) -> MinibatchSource:
        """The units the update shuffles and slices: single samples."""
        return Samples()

    def _micro_batch_units(self) -> int:
        """Each member's units per forward/backward pass (see ``AlgorithmConfig.micro_batch_size``)."""
        rows = micro_batch_rows(self.config.micro_batch_size, self.policy.model, self.device)
        return max(1, rows // self.minibatches.unit_samples) if rows < sys.maxsize else rows

    def step(self) -> dict[str, float]:
        """Run the PPO epochs over the collected rollout.

        Returns:
            ``losses/{policy,vf,entropy,total}`` and ``monitors/clip_fraction`` (means over
            the minibatches run); ``monitors/kl_div``, KL(rollout policy || updated policy)
            on the whole rollout after the last optimizer step, and ``monitors/kl_div_max``,
            the largest KL seen (before any step, or after the last); ``monitors/sgd_epochs``
            (epochs run, fewer than ``num_sgd_iters`` after a KL early stop) and
            ``monitors/optimizer_steps`` (with the early stop: steps that moved the
            parameters); ``monitors/lr`` (the LR of this update), ``coefficients/{entropy,vf}``
            and ``profiling/step_ms``.

        Raises:
            RuntimeError: no rollout: ``collect()`` must come first.
            FloatingPointError: the update left NaN or inf in the parameters.
        """
        self._check_buffered()
        start = time.perf_counter()
        recheck_values()  # what changed since collect() (a config field, the optimizer's options) is seen
        cfg = self.config
        lr, entropy_coeff, hparams = self.lr, self._entropy_coeff_value, self.hparam_stats()
        stats, epochs_run = self.run_update_phase()
        self._finish_step(obs_statistics=False)  # the phase merged them
        self._refresh_entropy_coeff()
        host = stats.to_host()  # SYNC: the stats of step()
        member_lrs = self.members.learning_rates(lr)
        if cfg.kl_adaptive_lr_per_minibatch:  # the LR its last minibatch left, on the host
            if self.num_seeds == 1:
                self._set_lr(host["monitors/lr"])
            else:  # each member's, already on the device: the host mirror follows
                member_lrs = self.members.host_values(host, "monitors/lr")
                self.members.mirror_lr_factors([m_lr / lr for m_lr in member_lrs])
        elif cfg.kl_adaptive_lr:  # each member on the KL its update reached, already on the host
            kls = self.members.host_values(host, "monitors/kl_div")
            targets = self.member_values("target_kl_div")
            adapted = [adapted_lr(m_lr, kl, target, cfg.kl_adaptive_lr_bounds)
                       for m_lr, kl, target in zip(member_lrs, kls, targets)]
            self._set_lr(self.members.set_learning_rates(lr, adapted))
        out = {
            **{k: v for k, v in host.items() if k != "params/finite"},
            **self.members.host_dict("monitors/lr", member_lrs),
            "monitors/sgd_epochs": host.get("monitors/sgd_epochs", float(epochs_run)),
            "monitors/lr": host.get("monitors/lr", lr),
            "coefficients/entropy": entropy_coeff,
            "coefficients/vf": float(cfg.vf_coeff),
            **hparams,
            **({"rnd/weight": self.rnd.weight_value} if self.rnd is not None else {}),
            "profiling/step_ms": 1e3 * (time.perf_counter() - start),
        }
        self._check_params_finite(host, out)
        return out

    def _step_stats(self, stats: Stats, means: tuple, batch: Batch, kl_max: Tensor) -> None:
        """``step()``'s statistics by name into ``stats``, on the device (with S members:
        ``member{i}/...`` for each, and their mean under the plain name)."""
        add = self.members.stats(stats)
        for field, value in means._asdict().items():
            if field in LOSS_STATS:
                add(LOSS_STATS[field], value)
        kl = self._kl_after_update(batch)
        add("monitors/kl_div", kl)
        add("monitors/kl_div_max", torch.maximum(kl_max, kl), "max")
        control = self.kl_stop
        if control is not None:
            add("monitors/optimizer_steps", control.applied)
            if self._lr_applied is not None:
                self._lr_applied.copy_(self._lr_tensor)  # the groups hold the base LR between steps
        self.members.add_activity(stats)
        if self.rnd is not None:
            add("losses/rnd", self._rnd_loss / self._rnd_steps.clamp(min=1))
            add("rnd/intrinsic_reward", self._intrinsic)
        if self.config.kl_adaptive_lr_per_minibatch and self.num_seeds > 1:  # each member's, as adapted
            add("monitors/lr", self._lr_tensor * self.members.lr_factor)
        elif self._lr_tensor is not None:  # a copy: the schedule may move the LR before the transfer
            stats.add("monitors/lr", self._lr_tensor.clone())
        stats.add("params/finite", self._params_finite(), "min")

    @torch.no_grad()
    def _kl_after_update(self, batch: Batch) -> Tensor:
        """KL(rollout policy || policy now) on the whole rollout, ``E[(r-1) - log r]``, each
        member's (0-d, or ``[S]``), in passes of one micro-batch (the actor only, where
        the model allows)."""
        n, S = self.minibatches.num_units(self.num_envs, self.horizon), self.num_seeds
        total = torch.zeros(self.members.lead, device=self.device)
        for lo, rows in passes(n, self._micro_units, S):
            part = batch if rows * S == n else {key: pass_rows(x, lo, rows, S) for key, x in batch.items()}
            total += self.kl_sum(part)
        per_member = n // S * self.minibatches.unit_samples
        return rdist.all_reduce_(total / per_member, "mean")

    def kl_terms_sum(self, part: Batch) -> Tensor:
        """``sum((r - 1) - log r)`` of each member over the samples of ``part`` (``kl_sum``
        runs it, compiled with ``compile``)."""
        logp, old_logp = self.minibatches.log_prob(self.policy, part)
        log_ratio = (logp - old_logp).float()
        return self.members.sum(kl_terms(log_ratio))

    def update_phase(self) -> tuple[Stats, int]:
        """All of step()'s work on the device: GAE and the batch (:meth:`prepared_batch`),
        the epochs of minibatch updates and their statistics (:meth:`run_epochs`), then
        the rollout's observations merged into the policy's running statistics.
        Returns the statistics (still on the device) and the epochs run. The host decides
        nothing inside it once the KL early stop gates on the device (``sync_kl_stop``
        off), so one CUDA graph can hold it whole (``cudagraphs_scope="step"``); with
        scanned updates (``compile`` on a CPU) the batch, the epochs and the statistics
        are one program (:meth:`scanned_phase`)."""
        out = self.scanned_phase() if self.scanned_updates is not None else None
        if out is None:
            out = self.run_epochs(self.prepare())
        self.update_obs_statistics()
        return out

    def prepared_batch(self) -> Batch:
        """GAE over the buffer, then the rollout as the epochs read it (advantages
        normalized), and the update's accumulators zeroed: one compiled program with
        ``compile``."""
        # The statistics the minibatch updates accumulate on the device, in place
        # (loss_fields' order), and the largest KL they see.
        self._sums.zero_()
        self._kl_max.zero_()
        if self.rnd is not None:
            self._rnd_loss.zero_()
            self._rnd_steps.zero_()
        self.compute_advantages()
        normalize = self.members.normalize if self.config.normalize_advantages else None
        return self.minibatches.batch(self.buffer, self.horizon, normalize)

    def minibatch_update(self, mb: Batch, *, weight: float = 1.0, step: bool = True,
                         kl_so_far: Tensor | None = None, accumulated: bool = False) -> Tensor:
        """One minibatch: forward, losses, backward of ``weight`` times their total, and
        (when ``step``) the optimizer step; returns the :attr:`loss_fields` of the
        minibatch, stacked in field order. ``accumulated``: the parameters' gradients hold
        the epoch's earlier minibatches' (``accumulate_grads``), which the backward adds
        to; otherwise they are ``None`` (a compiled update is a program of each, keyed by
        its options).

        A minibatch larger than the micro-batch is run in micro-batches whose gradients
        accumulate, each weighted by its share: the same gradient and statistics as one
        pass, up to float rounding, with activations that stay in cache on a CPU. With
        the KL early stop, the step is judged on the KL of the data its gradient came
        from: this minibatch's (``weight`` times it plus ``kl_so_far``, the epoch's
        earlier minibatches, with ``accumulate_grads``).
        """
        if self.config.symmetry_augment:
            mb = self.symmetry.augment(mb, self.num_seeds)  # twice the rows: each sample and its mirrored twin
        S, size = self.num_seeds, next(iter(mb.values())).shape[0]
        per_member = size // S
        stats: Tensor | None = None
        for lo, n in passes(size, self._micro_units, S):  # the same rows of every member
            part = mb if n == per_member else {key: pass_rows(x, lo, n, S) for key, x in mb.items()}
            share = n / per_member
            losses = self.loss_fn(part)
            total = losses.total.sum()  # S members: the sum of their losses, whose gradient is each one's own
            scale = weight * share
            total = total * scale if scale != 1.0 else total
            (self.grad_scaler.scale(total) if self._loss_scaled else total).backward()
            terms = torch.stack([losses.total.detach(), *losses[1:]])
            terms = terms if n == per_member else share * terms
            stats = terms if stats is None else stats + terms
        assert stats is not None
        if step:
            gate = running = None
            if self.config.kl_adaptive_lr_per_minibatch or self.kl_stop is not None:
                # The KL of the data the step's gradient came from: this minibatch's, or with
                # accumulate_grads the epoch's (``weight`` times it plus ``kl_so_far``).
                kl = stats[self._kl_index] if kl_so_far is None else stats[self._kl_index] * weight + kl_so_far
                kl = rdist.all_reduce_(kl.clone(), "mean")  # every rank judges alike
                if self.config.kl_adaptive_lr_per_minibatch:  # rsl_rl's rule, before this step
                    self._adapt_lr_to_minibatch(kl)
                if self.kl_stop is not None:
                    gate, running = self.kl_stop.gate(kl, self.members.active()), self.kl_stop.running
            self.optimizer_step(self._update_params, gate, running)
            if self.rnd is not None:
                self._rnd_step(mb, running)
        # The update's statistics (run_epochs reads them): a member's count only while its
        # epoch runs; the largest KL seen, a float32 statistic whatever the model's dtype.
        kl = stats[self._kl_index].to(self._kl_max.dtype)
        if self.kl_stop is None:
            self._sums.add_(stats)
            torch.maximum(self._kl_max, kl, out=self._kl_max)
        else:
            running = self.kl_stop.running
            self._sums.add_(stats * running)
            torch.where(running > 0, torch.maximum(self._kl_max, kl), self._kl_max, out=self._kl_max)
        return stats

    def _adapt_lr_to_minibatch(self, kl: Tensor) -> None:
        """``kl_adaptive_lr_per_minibatch``: rsl_rl's rule on the device on the minibatch's
        KL, before its step: a single run's LR, else each member's (the base LR times its
        factor, on its own KL and target)."""
        target, bounds = self.hparams.get("target_kl_div", torch.float64), self.config.kl_adaptive_lr_bounds
        if self.num_seeds == 1:
            self._lr_applied.copy_(adapt_lr_(self._lr_tensor, kl, target, bounds))
            return
        factor = self.members.lr_factor
        factor.copy_(adapt_lr_(self._lr_tensor * factor, kl, target, bounds) / self._lr_tensor)

    def losses(self, mb: Batch) -> tuple:
        """The policy's forward pass on a minibatch and its :attr:`loss_fields` (with grad)."""
        with self.autocast():
            out, rollout = self.minibatches.evaluate(self.policy, mb)
        terms = self.objective(out, rollout)
        coeff = self.config.mirror_loss_coeff
        if coeff is None:
            return terms
        with self.autocast():
            mirror = self.symmetry.mirror_loss(self.policy, mb, out, seed_means(self.num_seeds))
        return self.loss_fields(*terms._replace(total=terms.total + coeff * mirror), mirror.detach())

    def objective(self, out: EvalOutput, rollout: Batch) -> PPOLosses:
        """The loss terms of the policy's outputs ``out`` on a minibatch's ``rollout`` entries."""
        cfg = self.config
        return ppo_losses(
            out.logp,
            out.entropy,
            out.values.float(),
            rollout[LOGP],
            rollout[VALUES],
            rollout[ADVANTAGES],
            rollout[RETURNS],
            clip_param=self.hparams.get("clip_param", torch.float64),
            dual_clip_param=cfg.dual_clip_param,
            vf_clip_param=self.hparams.get("vf_clip_param", torch.float64),
            vf_coeff=self.hparams.get("vf_coeff"),
            entropy_coeff=self.entropy_coeff,
            num_seeds=self.num_seeds,
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        # Loading replaced the optimizer's state tensors, which a captured update would
        # go on reading: warm up and capture again at the next step() (the step's graph:
        # WholeStepGraph).
        self.update = self._wrapped_update()
        # The entropy coefficient is a function of the restored env-step count.
        self._refresh_entropy_coeff()

    def _refresh_entropy_coeff(self) -> None:
        """Set the entropy coefficient for the env steps so far: the schedule's value, or
        each member's (its ``entropy_coeff``, scaled by the schedule over its first value)."""
        base = self.entropy_schedule.value(self.env_steps)
        unchanged = getattr(self, "_entropy_coeff_value", None) == base
        self._entropy_coeff_value = base
        if not self.hparams.varies("entropy_coeff"):
            if not unchanged:  # a constant coefficient is not written again every step
                self.entropy_coeff.fill_(base)
            return
        first = self.entropy_schedule.value(0) if self.config.entropy_coeff_schedule is not None else None
        values = [c * base / first if first else c for c in self.hparams.values["entropy_coeff"]]
        self.entropy_coeff.copy_(torch.tensor(values, dtype=torch.float64))

    def _hparams_changed(self, name: str) -> None:
        if name == "entropy_coeff":
            self._entropy_coeff_value = None  # written again, whatever the schedule says
            self._refresh_entropy_coeff()
        elif name == "target_kl_div" and self.kl_stop is not None:
            self.kl_stop.set_target(self.hparams.get("target_kl_div", torch.float64))
