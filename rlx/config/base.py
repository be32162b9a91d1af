"""The config classes every algorithm config builds on: the shared fields, the first-order
minibatch update's fields, and the fields of training on sequences (recurrent policies).

Every error in a config is a :class:`~rlx.core.config_fields.ConfigError` (a ``ValueError``)
raised at construction and naming the field; the concrete configs are in
:mod:`rlx.config`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from torch import nn

from rlx.algorithms.base import Algorithm
from rlx.core.precision import MATMUL_PRECISIONS
from rlx.core.config_fields import (check_bool, check_float, check_int, check_mode, check_schedule_field,
                                    config_dataclass, fail)
from rlx.core.distributions import Distribution
from rlx.env import OBS_GROUPS, resolve_device
from rlx.core.schedulers import ScheduleKind

if TYPE_CHECKING:
    from rlx.env import EnvFactory

__all__ = ["CommonConfig", "MinibatchConfig", "SequenceFields", "check_sequences"]


@config_dataclass
class CommonConfig:
    """Fields every rlx algorithm shares: env, model, buffer, GAE, normalizers, device."""

    #: Whether the algorithm trains ``num_seeds > 1`` agents at once.
    supports_seeds: ClassVar[bool] = False

    #: Model instance to use; mutually exclusive with ``model_cls``.
    model: nn.Module | None = None
    #: Model class built as ``model_cls(observation_spec, action_spec, num_params=(S, I),
    #: **model_config)`` (see :mod:`rlx.models`); default :class:`~rlx.models.MLPActorCritic`.
    model_cls: type[nn.Module] | None = None
    #: Keyword arguments for the model class; the default model takes ``hiddens``
    #: (default ``[256, 256]``), ``critic_hiddens`` (default: as ``hiddens``),
    #: ``activation_fn`` (default ``"relu"``) and ``log_std_init``.
    model_config: dict[str, Any] | None = None
    #: Action distribution class; inferred from the action spec when ``None``
    #: (Categorical, MultiCategorical, or Normal with clipping; pass
    #: :class:`~rlx.core.distributions.SquashedNormal` for tanh-squashed bounds).
    distribution_cls: type[Distribution] | None = None
    #: Env steps ``T`` per :meth:`collect` per env; the buffer is ``[B, T+1]``.
    horizon: int = 32
    #: Reset every env every N collects; negative: never (envs reset their own sub-envs
    #: at episode ends). rl8's default of 1 would cut every episode at ``T`` steps.
    horizons_per_env_reset: int = -1
    #: Number of parallel sub-environments ``B``.
    num_envs: int = 8192
    #: Optimizer class.
    optimizer_cls: type[torch.optim.Optimizer] = torch.optim.Adam
    #: Optimizer keyword arguments; default ``{"lr": 1e-3}``.
    optimizer_config: dict[str, Any] | None = None
    #: Learning-rate schedule: ``[(env_steps, lr), ...]``, counted in env transitions
    #: (``B * T`` per collect). Constant when ``None``. ``[[0, 3e-4], [1000000, 0]]``
    #: with ``lr_schedule_kind: interp`` anneals linearly to 0 over a 1M-step budget.
    lr_schedule: list[tuple[int, float]] | None = None
    #: ``"step"`` (jump and hold) or ``"interp"`` (linear between milestones).
    lr_schedule_kind: ScheduleKind = "step"
    #: GAE λ in [0, 1]: 0 is one-step TD, 1 is the Monte-Carlo return.
    gae_lambda: float = 0.95
    #: Discount γ in [0, 1].
    gamma: float = 0.95
    #: Normalize advantages by the batch mean and std before the update.
    normalize_advantages: bool = True
    #: Divide rewards by the running std of the discounted return (restarting at
    #: episode ends) before GAE.
    normalize_rewards: bool = True
    #: Feed the model observations normalized by a running mean/std (rlx addition).
    normalize_obs: bool = False
    #: Mixed precision: bf16 autocast, for one member and for many, on every CPU and on
    #: CUDA GPUs from Ampere on (no loss scale: the update steps as without AMP); fp16
    #: autocast with a GradScaler on an older GPU, for one member only (a loss scale would
    #: couple the members). The output heads, γ, returns and GAE stay in float32.
    enable_amp: bool = False
    #: Precision of float32 matmuls and convolutions: ``"fp32"`` (full), ``"tf32"`` (TF32
    #: tensor cores on CUDA: 10 mantissa bits, measured 12% faster on an H100 for PPO at
    #: B = 65536) or ``"bf16"`` (bf16 products); ``None`` leaves torch's setting.
    #: ``"auto"`` (the default): ``"tf32"`` on CUDA, where the shipped CartPole config
    #: learns with it as with float32 (H100, 2026-11-27) and JAX's default is the same,
    #: ``None`` elsewhere (:data:`rlx.core.precision.AUTO_MATMUL_PRECISION`; ``algo.modes``
    #: names the choice). It is torch's process-wide setting
    #: (``torch.set_float32_matmul_precision``), set at build. CPU matmuls stay float32 on
    #: CPUs without bf16 matmul support in oneDNN.
    matmul_precision: Literal["auto", "fp32", "tf32", "bf16"] | None = "auto"
    #: Max global gradient norm; ``None`` disables clipping.
    max_grad_norm: float | None = 5.0
    #: ``"auto"`` (CUDA when present, else CPU) or an explicit device, which is honoured.
    device: str = "auto"
    #: Seed for torch's RNGs at build (env resets, sampling, init); ``None`` leaves them.
    seed: int | None = None
    #: Asymmetric actor-critic: ``{"actor": [keys], "critic": [keys]}`` names the top-level
    #: keys of a Composite observation each network reads (``{"actor": ["policy"],
    #: "critic": ["policy", "privileged"]}``); a group left out reads every key, ``None``
    #: both. Acting reads the actor group; every value (rollout, bootstrap, truncation)
    #: the critic group; a deployed policy takes the actor keys only. Keys are checked
    #: against the env's observation at build.
    obs_groups: dict[str, list[str]] | None = None
    #: ``S`` independent agents trained at once (see :mod:`rlx.members`): the env holds
    #: ``S * num_envs`` sub-envs, rows ``i*B:(i+1)*B`` for seed i, whose initial
    #: parameters are a single-seed run's with ``seed + i``; the default model runs the
    #: S networks as one batched matmul per layer. Per seed: optimizer state, reward
    #: scaler, observation normalizer, advantage normalization, gradient clipping, KL
    #: early stop and adaptive LR, NPG's natural step and line search, NaN freeze and
    #: statistics (``member{i}/...``). Every algorithm, recurrent ones included (the
    #: default recurrent model stacks its LSTM/GRU cells: :mod:`rlx.members.stacked`).
    num_seeds: int = 1
    #: Hyperparameters that differ between the ``num_seeds`` members (a sweep or a
    #: population trained as one batch): ``{"lr": [...], "entropy_coeff": [...]}``, one
    #: value per member, member ``i`` taking the ``i``-th of each (``lr`` is
    #: ``optimizer_config["lr"]``). Fields that may differ: the learning rate, gamma,
    #: GAE's lambda and max_grad_norm; PPO's and A2C's entropy_coeff and vf_coeff; PPO's
    #: clip_param, vf_clip_param and target_kl_div; NPG's max_kl and damping. Shapes and
    #: loops (num_envs, widths, minibatches, epochs) stay shared. See
    #: :mod:`rlx.members.hparams`.
    member_hparams: dict[str, list[float]] | None = None
    #: Start from the policy (weights and normalizers) of this checkpoint or run directory,
    #: whose model must be this config's: PPO fine-tuning a distilled student, say. The
    #: optimizer and everything else start fresh.
    init_policy: str | None = None

    def __post_init__(self) -> None:
        if self.model is not None and self.model_cls is not None:
            fail(self, "model", "model and model_cls are mutually exclusive")
        if self.model is not None and not isinstance(self.model, nn.Module):
            fail(self, "model", f"must be an nn.Module, got {type(self.model).__name__}")
        for field in ("model_config", "optimizer_config"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, dict):
                fail(self, field, f"must be a dict or None, got {type(value).__name__}")
        if self.model_config is not None and self.model is not None:
            fail(self, "model_config", "has no effect with a model instance")
        if self.distribution_cls is not None and not (
            isinstance(self.distribution_cls, type) and issubclass(self.distribution_cls, Distribution)
        ):
            fail(self, "distribution_cls", "must be a subclass of rlx.core.distributions.Distribution")
        check_int(self, "horizon")
        check_int(self, "num_envs")
        check_int(self, "horizons_per_env_reset", minimum=None)
        if self.horizons_per_env_reset == 0:
            fail(self, "horizons_per_env_reset", "must be positive or negative (never reset), got 0")
        if not (isinstance(self.optimizer_cls, type) and issubclass(self.optimizer_cls, torch.optim.Optimizer)):
            fail(self, "optimizer_cls", f"must be a torch.optim.Optimizer subclass, got {self.optimizer_cls!r}")
        lr = self.optimizer_kwargs.get("lr")
        if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not lr > 0 or not math.isfinite(lr):
            fail(self, "optimizer_config", f"lr must be a positive number, got {lr!r}")
        if self.lr_schedule is not None:
            check_schedule_field(self, "lr_schedule")
            if any(v < 0 for _, v in self.lr_schedule):
                fail(self, "lr_schedule", "learning rates must be >= 0 (0 anneals the LR away at the end of a budget)")
        check_float(self, "gamma", low=0.0, high=1.0)
        check_float(self, "gae_lambda", low=0.0, high=1.0)
        if self.matmul_precision != "auto" and self.matmul_precision not in MATMUL_PRECISIONS:
            fail(self, "matmul_precision", f"must be 'auto', one of {sorted(k for k in MATMUL_PRECISIONS if k)} or "
                                           f"None, got {self.matmul_precision!r}")
        for field in ("normalize_advantages", "normalize_rewards", "normalize_obs", "enable_amp"):
            check_bool(self, field)
        check_float(self, "max_grad_norm", low=0.0, low_open=True, allow_none=True)
        try:
            resolve_device(self.device)
        except (RuntimeError, TypeError) as e:
            fail(self, "device", f"is not a valid device ({e})")
        check_int(self, "seed", minimum=0, allow_none=True)
        check_int(self, "num_seeds")
        if self.num_seeds > 1:
            self._check_seeds()
        if self.member_hparams is not None:
            from rlx.members.hparams import check_member_hparams

            check_member_hparams(self)
        self._check_obs_groups()
        if self.init_policy is not None and (not isinstance(self.init_policy, str) or not self.init_policy):
            fail(self, "init_policy", f"must be the path of a checkpoint or run directory, got {self.init_policy!r}")

    def _check_seeds(self) -> None:
        """What ``num_seeds > 1`` supports so far, refused by name otherwise."""
        from rlx.members.stacked import STACKED_MODELS

        if not self.supports_seeds:
            fail(self, "num_seeds", f"num_seeds={self.num_seeds} is not supported by {type(self).__name__}")

        stacked = tuple(STACKED_MODELS.values())
        custom = self.model if self.model is not None else self.model_cls
        if custom is not None and not (
            isinstance(custom, stacked) or (isinstance(custom, type) and issubclass(custom, stacked))
        ):
            field = "model" if self.model is not None else "model_cls"
            fail(self, field, f"num_seeds={self.num_seeds} needs a model with a seed dim (rlx.members.StackedMLPActorCritic, "
                              f"StackedRecurrentActorCritic or a subclass), got {custom!r}")
        if isinstance(self.model, stacked) and self.model.num_seeds != self.num_seeds:
            fail(self, "model", f"stacks {self.model.num_seeds} seeds, but num_seeds={self.num_seeds}")

    def _check_obs_groups(self) -> None:
        groups = self.obs_groups
        if groups is None:
            return
        if not isinstance(groups, dict) or not groups:
            fail(self, "obs_groups", f"must map 'actor' and/or 'critic' to lists of observation keys, got {groups!r}")
        for group, keys in groups.items():
            if group not in OBS_GROUPS:
                fail(self, "obs_groups", f"unknown group {group!r}; groups are {list(OBS_GROUPS)}")
            if not isinstance(keys, (list, tuple)) or not keys or not all(isinstance(k, str) for k in keys):
                fail(self, "obs_groups", f"{group} must be a non-empty list of observation keys, got {keys!r}")

    def _check_minibatch_size(self, field: str) -> None:
        check_int(self, field, allow_none=True)
        size = getattr(self, field)
        if size is not None and size > self.buffer_size:
            fail(
                self,
                field,
                f"{size} is larger than the buffer "
                f"(num_envs * horizon = {self.num_envs} * {self.horizon} = {self.buffer_size})",
            )

    @property
    def optimizer_kwargs(self) -> dict[str, Any]:
        """Optimizer keyword arguments with rlx's default learning rate filled in."""
        return {"lr": 1e-3, **(self.optimizer_config or {})}

    @property
    def buffer_size(self) -> int:
        """Samples per collect, ``N = B * T``."""
        return self.num_envs * self.horizon

    #: Whether a captured step holds ``enable_amp``'s bf16 autocast (PPO's and A2C's
    #: update: no loss scale, nothing read back; NPG's step is not written for it).
    graphs_amp: ClassVar[bool] = False

    def cudagraphs_blocker(self) -> str | None:
        """Why these fields rule out a ``cudagraphs`` field (``None``: they allow it): what
        a ``True`` refuses and what ``"auto"`` falls back on, by name."""
        if self.enable_amp and not self.graphs_amp:
            return "cannot be combined with enable_amp"
        if self.optimizer_cls not in (torch.optim.Adam, torch.optim.AdamW):
            return (f"needs optimizer_cls torch.optim.Adam or AdamW (the captured step reads its learning rate on "
                    f"the device), got {getattr(self.optimizer_cls, '__name__', self.optimizer_cls)}")
        return None

    #: What of this config's algorithm compiles and captures, tested on a CPU but not yet
    #: on a GPU (``None``: nothing): on CUDA ``"auto"`` leaves ``compile`` and
    #: ``cudagraphs`` off for it, naming it (:mod:`rlx.algorithms.modes`).
    untested_on_cuda: ClassVar[str | None] = None

    def compile_auto_blocker(self, device: torch.device) -> str | None:
        """Why ``compile="auto"`` stays off for these fields on ``device`` even where a run
        is long enough for compiling to pay (``None``: nothing does)."""
        return None

    #: The algorithm class :meth:`build` constructs (set by each config class).
    algorithm_cls: ClassVar[type[Algorithm]]

    def build(self, env_cls: EnvFactory) -> Algorithm:
        """Build this config's algorithm for ``env_cls`` and validate it against the env's
        specs (one reset, one act, one step: see :meth:`Algorithm.validate`)."""
        algo = type(self).algorithm_cls(env_cls, self)
        algo.validate()
        return algo


@config_dataclass
class MinibatchConfig(CommonConfig):
    """Fields of the first-order minibatch update that PPO and A2C share: entropy bonus,
    value weight, minibatches, micro-batches, ``compile`` and ``cudagraphs``."""


    #: Entropy bonus weight; ignored when ``entropy_coeff_schedule`` is set.
    entropy_coeff: float = 0.0
    #: Entropy-coefficient schedule ``[(env_steps, coeff), ...]`` over env transitions.
    entropy_coeff_schedule: list[tuple[int, float]] | None = None
    #: ``"step"`` or ``"interp"``.
    entropy_coeff_schedule_kind: ScheduleKind = "step"
    #: Minibatch size ``M``; ``None`` makes the whole buffer one minibatch.
    sgd_minibatch_size: int | None = None
    #: Shuffle samples into new minibatches every epoch (an order drawn on the device:
    #: :meth:`rlx.members.Members.epoch_order`).
    shuffle_minibatches: bool = True
    #: Weight of the value loss in the total loss.
    vf_coeff: float = 1.0
    #: Samples per forward/backward pass: a larger minibatch runs in micro-batches whose
    #: gradients accumulate, each weighted by its share (the same update and statistics
    #: up to float rounding, unlike ``sgd_minibatch_size``). With S members, each
    #: member's samples per pass (as ``sgd_minibatch_size``): every pass takes the same
    #: rows of every member. ``None``: on a CPU, 4096 for models up to 128 wide and 2048
    #: for wider ones, of each member (whole-buffer passes spill out of cache,
    #: 1.5-2x slower measured; much smaller ones repeat the per-pass dispatch), and no
    #: split on CUDA. 0: never split.
    micro_batch_size: int | None = None
    #: Clip the actor's and the critic's gradients each to ``max_grad_norm`` (rsl_rl's
    #: rule), rather than their joint norm: a large critic gradient then no longer
    #: shrinks the actor's step. Needs a model with separate actor and critic parameters.
    clip_grad_per_network: bool = False
    #: A mirror of a symmetric task (rsl_rl's ``symmetry_cfg``): ``fn(obs, actions) ->
    #: (mirrored_obs, mirrored_actions)`` on batches, an import path in YAML. Checked at
    #: build to be an involution on random inputs. See :mod:`rlx.algorithms.symmetry`.
    symmetry_fn: Callable[..., Any] | None = None
    #: Double every minibatch with its mirrored twin (needs ``symmetry_fn``).
    symmetry_augment: bool = False
    #: Weight of the mirror loss, ``mean((mu(mirror(o)) - mirror(mu(o)))^2)`` of the policy's
    #: mean action (rsl_rl's ``use_mirror_loss`` and ``mirror_loss_coeff``; needs
    #: ``symmetry_fn`` and continuous actions; with S members each its own); ``None``: off.
    mirror_loss_coeff: float | None = None
    #: ``torch.compile`` (inductor) the policy's action sampling and value passes in
    #: collect, and PPO's whole minibatch update as one program where it can
    #: (:meth:`rlx.algorithms.ppo.PPO.minibatch_update`, the eager update itself; where it
    #: cannot, ``compile_fallback`` says why and its forward pass and losses compile). The first collect and step
    #: pay for compiling (tens of seconds on a CPU); observation groups work too. Sampling
    #: draws from inductor's RNG, so runs differ from eager ones with the same seed.
    #: Combines with ``cudagraphs``: the captured update runs the compiled code.
    #: ``"auto"`` (the default) leaves it off: its compile time exceeds what it saves in
    #: the shipped configs' runs (:mod:`rlx.algorithms.modes`); set it for long runs.
    compile: bool | Literal["auto"] = "auto"
    #: CUDA only: capture the update (forward, losses, backward, clipping, a capturable
    #: Adam with a tensor LR; what one graph holds: ``cudagraphs_scope``) in a CUDA graph
    #: and replay it, removing the per-kernel launch cost. Needs ``optimizer_cls`` Adam or
    #: AdamW (with seeds: each seed's :class:`~rlx.members.optim.SeedAdam` step), no
    #: float16 AMP (bf16, on GPUs from Ampere on, is captured), with
    #: ``cudagraphs_scope="minibatch"`` equal minibatches (``sgd_minibatch_size`` dividing
    #: ``num_envs * horizon``) and no gradient accumulation, one process
    #: and tensor observations (a recurrent policy's step and T loop capture too; tested
    #: on a CPU only so far, so ``"auto"`` leaves them off on CUDA). With an env that declares
    #: ``graph_safe = True`` (the built-in envs do; see :class:`rlx.env.Env`), all of
    #: collect's device work (acting, env steps, buffer writes, then the values, the
    #: reward scaler and the statistics) is captured too, one graph per mode (sampling,
    #: deterministic); other envs keep the eager T loop. Both follow one rule
    #: (:mod:`rlx.core.cuda_graphs`): 3 eager warm-up calls, then one capture, then
    #: replays. ``"auto"`` (the default): on where all of the above holds (on CUDA), else
    #: off, the reason named in ``algo.modes``.
    cudagraphs: bool | Literal["auto"] = "auto"
    #: What one CUDA graph holds when ``cudagraphs`` is on. ``"step"`` (the default): all
    #: of ``step()``'s device work (GAE and the batch, every epoch's order and gather, the
    #: minibatch updates with the KL early stop's gating, the statistics) as one graph,
    #: replayed once a step, whose statistics the host reads in one transfer
    #: (:meth:`rlx.algorithms.ppo.PPO.update_phase`). ``"minibatch"``: each minibatch
    #: update, replayed epochs x minibatches times a step, with GAE, each epoch's order and
    #: gather and the statistics running between the replays. On an H100 (2026-11-27) both
    #: matched the uncaptured step in the GPU tests and ``"step"`` ran 8.65M against 7.90M
    #: env steps/s at B = 4096 and 27.0M against 26.1M at B = 65536 (``docs/gpu.md``).
    cudagraphs_scope: Literal["minibatch", "step"] = "step"

    def __post_init__(self) -> None:
        super().__post_init__()
        for field in ("shuffle_minibatches", "clip_grad_per_network", "symmetry_augment"):
            check_bool(self, field)
        check_mode(self, "cudagraphs")
        check_mode(self, "compile")
        if self.cudagraphs_scope not in ("minibatch", "step"):
            fail(self, "cudagraphs_scope", f"must be 'minibatch' or 'step', got {self.cudagraphs_scope!r}")
        if self.symmetry_fn is not None and not callable(self.symmetry_fn):
            fail(self, "symmetry_fn", f"must be a function, got {self.symmetry_fn!r}")
        if self.symmetry_augment and self.symmetry_fn is None:
            fail(self, "symmetry_augment", "needs symmetry_fn, the task's mirror")
        check_float(self, "mirror_loss_coeff", low=0.0, allow_none=True)
        if self.mirror_loss_coeff is not None and self.symmetry_fn is None:
            fail(self, "mirror_loss_coeff", "needs symmetry_fn, the task's mirror")
        check_float(self, "entropy_coeff", low=0.0)
        if self.entropy_coeff_schedule is not None:
            check_schedule_field(self, "entropy_coeff_schedule")
            if any(v < 0 for _, v in self.entropy_coeff_schedule):
                fail(self, "entropy_coeff_schedule", "entropy coefficients must be >= 0")
        self._check_minibatch_size("sgd_minibatch_size")
        check_int(self, "micro_batch_size", minimum=0, allow_none=True)
        check_float(self, "vf_coeff", low=0.0)
        # The fields here (a subclass refuses its own, naming them: PPO's rnd).
        why = MinibatchConfig.cudagraphs_blocker(self) if self.cudagraphs is True else None
        if why is not None:
            fail(self, "cudagraphs", why)

    graphs_amp = True

    def cudagraphs_blocker(self) -> str | None:
        why = super().cudagraphs_blocker()
        if why is not None or self.cudagraphs_scope == "step":  # one graph holds every minibatch, as they are
            return why
        # A graph per minibatch update: one layout of inputs, and no gradients handed
        # from one replay to the next.
        if self.accumulate_grads:
            return 'cannot be combined with accumulate_grads with cudagraphs_scope="minibatch" ("step" can)'
        if self.buffer_size % self.minibatch_size:
            return (f'needs equal minibatches with cudagraphs_scope="minibatch" ("step" does not): '
                    f"sgd_minibatch_size={self.minibatch_size} must divide num_envs * horizon = {self.buffer_size}")
        return None

    @property
    def minibatch_size(self) -> int:
        """``M``: ``sgd_minibatch_size``, or the whole buffer."""
        return self.sgd_minibatch_size or self.buffer_size


@config_dataclass
class SequenceFields:
    """The fields of training a recurrent policy on sequences (mixed into a recurrent
    config before its algorithm's config; :func:`check_sequences` validates them)."""

    #: Steps per training sequence (truncated backprop through time); must divide
    #: ``horizon``. ``None``: the whole horizon, one sequence per env.
    seq_len: int | None = None
    #: Steps run without gradient before each sequence, from the state stored ``burn_in``
    #: steps earlier, to refresh the stored state with the current parameters (R2D2).
    #: Sequences with fewer collected steps before them keep their stored state.
    #: 0 disables it; at most ``horizon - seq_len``.
    burn_in: int = 0

    @property
    def sequence_length(self) -> int:
        """``L``: ``seq_len``, or the horizon."""
        return self.seq_len or self.horizon


def check_sequences(config: Any) -> None:
    """Validate a recurrent config's sequence fields against its horizon and minibatches."""
    check_int(config, "seq_len", allow_none=True)
    check_int(config, "burn_in", minimum=0)
    L = config.sequence_length
    if config.horizon % L:
        fail(config, "seq_len", f"{L} must divide horizon={config.horizon}")
    if config.minibatch_size % L:
        fail(
            config,
            "sgd_minibatch_size",
            f"{config.minibatch_size} must be a multiple of seq_len={L}: minibatches are whole sequences",
        )
    if config.burn_in > config.horizon - L:
        fail(
            config,
            "burn_in",
            f"{config.burn_in} leaves no sequence with collected steps to burn in: "
            f"needs burn_in <= horizon - seq_len = {config.horizon - L}",
        )
    if config.symmetry_augment:
        fail(config, "symmetry_augment", "is not supported for recurrent policies yet")
    if config.mirror_loss_coeff is not None:
        fail(config, "mirror_loss_coeff", "is not supported for recurrent policies yet")
    if getattr(config, "rnd", None) is not None:
        fail(config, "rnd", "is not supported for recurrent policies yet")
