"""Algorithm configs: dataclasses that validate themselves and build an algorithm.

``AlgorithmConfig(...).build(env_cls)`` returns a PPO algorithm with ``collect()`` and
``step()``. Field names and meanings follow rl8's ``AlgorithmConfig``; rlx's additions
(``seed``, ``normalize_obs``, ``kl_adaptive_lr``, ...) are documented on each field.

Every error in a config is a :class:`ConfigError` (a ``ValueError``) raised at
construction and naming the field.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import types
import typing
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

from rlx.distributions import Distribution
from rlx.schedulers import ScheduleKind, check_schedule

if TYPE_CHECKING:
    from rlx.algorithms.npg import NPG
    from rlx.algorithms.ppo import PPO
    from rlx.algorithms.recurrent_ppo import RecurrentPPO
    from rlx.env import EnvFactory

__all__ = [
    "AlgorithmConfig",
    "CommonConfig",
    "ConfigError",
    "NPGConfig",
    "RecurrentAlgorithmConfig",
    "config_dataclass",
    "config_from_dict",
    "config_to_dict",
    "import_object",
]


class ConfigError(ValueError, TypeError):
    """A bad config value or an unknown config field; the message names the field."""


def config_dataclass(cls: type) -> type:
    """``dataclasses.dataclass`` whose constructor rejects unknown fields by name.

    A plain dataclass raises ``TypeError: unexpected keyword argument``; a config raises
    :class:`ConfigError` (a ``ValueError``) that names the field and the valid ones.
    """
    cls = dataclasses.dataclass(cls)
    init = cls.__init__

    def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise ConfigError(
                f"{cls.__name__}: unknown field(s) {unknown}; valid fields are {sorted(names)}"
            )
        init(self, *args, **kwargs)

    checked_init.__doc__ = init.__doc__
    checked_init.__wrapped__ = init  # type: ignore[attr-defined]
    cls.__init__ = checked_init
    return cls


def _fail(owner: Any, field: str, message: str) -> None:
    raise ConfigError(f"{type(owner).__name__}.{field}: {message}")


def _check_schedule(owner: Any, field: str) -> None:
    """:func:`check_schedule` on ``owner.<field>`` and its ``<field>_kind``, its errors
    prefixed with the config class like every other field's."""
    try:
        check_schedule(getattr(owner, field), getattr(owner, f"{field}_kind"), name=field)
    except ValueError as e:
        raise ConfigError(f"{type(owner).__name__}.{e}") from None


def _check_int(owner: Any, field: str, *, minimum: int | None = 1, allow_none: bool = False) -> None:
    value = getattr(owner, field)
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(owner, field, f"must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        _fail(owner, field, f"must be >= {minimum}, got {value}")


def _check_float(
    owner: Any,
    field: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    allow_none: bool = False,
) -> None:
    value = getattr(owner, field)
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _fail(owner, field, f"must be a finite number, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        _fail(owner, field, f"must be {'>' if low_open else '>='} {low}, got {value}")
    if high is not None and value > high:
        _fail(owner, field, f"must be <= {high}, got {value}")


def _check_bool(owner: Any, field: str) -> None:
    if not isinstance(getattr(owner, field), bool):
        _fail(owner, field, f"must be a bool, got {getattr(owner, field)!r}")


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` is CUDA when present, else CPU; anything else is honoured as given."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@config_dataclass
class CommonConfig:
    """Fields every rlx algorithm shares: env, model, buffer, GAE, normalizers, device."""

    #: Model instance to use; mutually exclusive with ``model_cls``.
    model: nn.Module | None = None
    #: Model class built as ``model_cls(observation_spec, action_spec, num_params=(S, I),
    #: **model_config)`` (see :mod:`rlx.models`); default :class:`~rlx.models.MLPActorCritic`.
    model_cls: type[nn.Module] | None = None
    #: Keyword arguments for the model class; the default model takes ``hiddens``
    #: (default ``[256, 256]``), ``activation_fn`` (default ``"relu"``) and ``log_std_init``.
    model_config: dict[str, Any] | None = None
    #: Action distribution class; inferred from the action spec when ``None``
    #: (Categorical, MultiCategorical, or Normal with clipping; pass
    #: :class:`~rlx.distributions.SquashedNormal` for tanh-squashed bounds).
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
    #: (``B * T`` per collect). Constant when ``None``.
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
    #: Mixed precision: bf16 autocast on CPU, fp16 autocast with a GradScaler on CUDA.
    #: γ, returns and GAE stay in float32.
    enable_amp: bool = False
    #: Max global gradient norm; ``None`` disables clipping.
    max_grad_norm: float | None = 5.0
    #: ``"auto"`` (CUDA when present, else CPU) or an explicit device, which is honoured.
    device: str = "auto"
    #: Seed for torch's RNGs at build (env resets, sampling, init); ``None`` leaves them.
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.model is not None and self.model_cls is not None:
            _fail(self, "model", "model and model_cls are mutually exclusive")
        if self.model is not None and not isinstance(self.model, nn.Module):
            _fail(self, "model", f"must be an nn.Module, got {type(self.model).__name__}")
        for field in ("model_config", "optimizer_config"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, dict):
                _fail(self, field, f"must be a dict or None, got {type(value).__name__}")
        if self.model_config is not None and self.model is not None:
            _fail(self, "model_config", "has no effect with a model instance")
        if self.distribution_cls is not None and not (
            isinstance(self.distribution_cls, type) and issubclass(self.distribution_cls, Distribution)
        ):
            _fail(self, "distribution_cls", "must be a subclass of rlx.distributions.Distribution")
        _check_int(self, "horizon")
        _check_int(self, "num_envs")
        _check_int(self, "horizons_per_env_reset", minimum=None)
        if self.horizons_per_env_reset == 0:
            _fail(self, "horizons_per_env_reset", "must be positive or negative (never reset), got 0")
        if not (isinstance(self.optimizer_cls, type) and issubclass(self.optimizer_cls, torch.optim.Optimizer)):
            _fail(self, "optimizer_cls", f"must be a torch.optim.Optimizer subclass, got {self.optimizer_cls!r}")
        lr = self.optimizer_kwargs.get("lr")
        if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not lr > 0 or not math.isfinite(lr):
            _fail(self, "optimizer_config", f"lr must be a positive number, got {lr!r}")
        if self.lr_schedule is not None:
            _check_schedule(self, "lr_schedule")
            if any(v <= 0 for _, v in self.lr_schedule):
                _fail(self, "lr_schedule", "learning rates must be positive")
        _check_float(self, "gamma", low=0.0, high=1.0)
        _check_float(self, "gae_lambda", low=0.0, high=1.0)
        for field in ("normalize_advantages", "normalize_rewards", "normalize_obs", "enable_amp"):
            _check_bool(self, field)
        _check_float(self, "max_grad_norm", low=0.0, low_open=True, allow_none=True)
        try:
            resolve_device(self.device)
        except (RuntimeError, TypeError) as e:
            _fail(self, "device", f"is not a valid device ({e})")
        _check_int(self, "seed", minimum=0, allow_none=True)

    def _check_minibatch_size(self, field: str) -> None:
        _check_int(self, field, allow_none=True)
        size = getattr(self, field)
        if size is not None and size > self.buffer_size:
            _fail(
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


@config_dataclass
class AlgorithmConfig(CommonConfig):
    """Config of rlx's PPO (Schulman et al., 2017, https://arxiv.org/abs/1707.06347).

    Example:
        >>> from rlx import AlgorithmConfig
        >>> from rlx.envs import CartPole
        >>> algo = AlgorithmConfig(num_envs=64, horizon=32, device="cpu").build(CartPole)
        >>> collect_stats = algo.collect()
        >>> step_stats = algo.step()
    """

    #: Step the optimizer once per epoch on gradients accumulated over its minibatches
    #: (each weighted by its share of the buffer, so this equals the full-batch gradient).
    accumulate_grads: bool = False
    #: Entropy bonus weight; ignored when ``entropy_coeff_schedule`` is set.
    entropy_coeff: float = 0.0
    #: Entropy-coefficient schedule ``[(env_steps, coeff), ...]`` over env transitions.
    entropy_coeff_schedule: list[tuple[int, float]] | None = None
    #: ``"step"`` or ``"interp"``.
    entropy_coeff_schedule_kind: ScheduleKind = "step"
    #: Minibatch size ``M``; ``None`` makes the whole buffer one minibatch.
    sgd_minibatch_size: int | None = None
    #: Epochs over the buffer per :meth:`step`.
    num_sgd_iters: int = 4
    #: Shuffle samples into new minibatches every epoch (an on-device ``randperm``).
    shuffle_minibatches: bool = True
    #: PPO ratio clip ε: the surrogate ignores ratios outside [1 - ε, 1 + ε].
    clip_param: float = 0.2
    #: PPO2 value clip: the loss takes the max of the clipped and unclipped squared
    #: errors around the old value; ``None`` disables it.
    vf_clip_param: float | None = 5.0
    #: Dual-clip constant c > 1 (Ye et al., 2020) bounding the surrogate at ``c * A`` for
    #: negative advantages; ``None`` disables it.
    dual_clip_param: float | None = None
    #: Weight of the value loss in the total loss.
    vf_coeff: float = 1.0
    #: Target KL. An epoch whose mean approximate KL exceeds 1.5 × this stops the update
    #: (decided once per epoch: one host sync per epoch). The KL is measured in the
    #: minibatch forward passes, so with ``accumulate_grads`` (one optimizer step at the
    #: end of each epoch) the earliest stop is after the second epoch. ``None`` disables it.
    target_kl_div: float | None = None
    #: Adapt the learning rate to ``target_kl_div`` after every epoch: ÷1.5 when the KL
    #: exceeds 2 × target, ×1.5 when below target / 2, clamped to ``kl_adaptive_lr_bounds``.
    kl_adaptive_lr: bool = False
    #: ``(min_lr, max_lr)`` for ``kl_adaptive_lr``.
    kl_adaptive_lr_bounds: tuple[float, float] = (1e-5, 1e-2)
    #: Samples per forward/backward pass: a larger minibatch runs in micro-batches whose
    #: gradients accumulate, each weighted by its share (the same update and statistics
    #: up to float rounding, unlike ``sgd_minibatch_size``). ``None``: on a CPU, 4096 for
    #: models up to 128 wide and 2048 for wider ones (whole-buffer passes spill out of
    #: cache, 1.5-2x slower measured; much smaller ones repeat the per-pass dispatch),
    #: and no split on CUDA. 0: never split.
    micro_batch_size: int | None = None
    #: ``torch.compile`` (inductor) the policy's action sampling and value passes in
    #: collect and the forward pass and losses of the update. The first collect and step
    #: pay for compiling (tens of seconds on a CPU); tensor observations only. Sampling
    #: draws from inductor's RNG, so runs differ from eager ones with the same seed.
    compile: bool = False
    #: CUDA only: capture the minibatch update (forward, losses, backward, clipping,
    #: a capturable Adam with a tensor LR) in a CUDA graph and replay it, removing the
    #: per-kernel launch cost. Needs equal minibatches (``sgd_minibatch_size`` dividing
    #: ``num_envs * horizon``), no AMP, no gradient accumulation, one process and tensor
    #: observations. The first 3 minibatches run eagerly to warm up. With an env that
    #: declares ``graph_safe = True`` (the built-in envs do; see :class:`rlx.env.Env`),
    #: collect's whole T loop (acting, env steps, buffer writes) is captured too: the
    #: first 2 collects of each mode (sampling, deterministic) run eagerly, the 3rd
    #: captures, later ones replay. Other envs keep the eager T loop.
    cudagraphs: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for field in ("accumulate_grads", "shuffle_minibatches", "kl_adaptive_lr", "cudagraphs", "compile"):
            _check_bool(self, field)
        _check_float(self, "entropy_coeff", low=0.0)
        if self.entropy_coeff_schedule is not None:
            _check_schedule(self, "entropy_coeff_schedule")
            if any(v < 0 for _, v in self.entropy_coeff_schedule):
                _fail(self, "entropy_coeff_schedule", "entropy coefficients must be >= 0")
        _check_int(self, "num_sgd_iters")
        self._check_minibatch_size("sgd_minibatch_size")
        _check_int(self, "micro_batch_size", minimum=0, allow_none=True)
        _check_float(self, "clip_param", low=0.0, low_open=True)
        _check_float(self, "vf_clip_param", low=0.0, low_open=True, allow_none=True)
        _check_float(self, "dual_clip_param", low=1.0, low_open=True, allow_none=True)
        _check_float(self, "vf_coeff", low=0.0)
        _check_float(self, "target_kl_div", low=0.0, low_open=True, allow_none=True)
        if self.kl_adaptive_lr:
            if self.target_kl_div is None:
                _fail(self, "kl_adaptive_lr", "needs target_kl_div to be set")
            if self.lr_schedule is not None:
                _fail(self, "kl_adaptive_lr", "cannot be combined with lr_schedule")
            bounds = self.kl_adaptive_lr_bounds
            if (
                not isinstance(bounds, (tuple, list))
                or len(bounds) != 2
                or not all(isinstance(b, (int, float)) and b > 0 for b in bounds)
                or bounds[0] > bounds[1]
            ):
                _fail(self, "kl_adaptive_lr_bounds", f"must be (min_lr, max_lr) with 0 < min <= max, got {bounds!r}")

        if self.cudagraphs and self.compile:
            _fail(self, "compile", "cannot be combined with cudagraphs (the captured update runs eagerly)")
        if self.cudagraphs:
            if self.enable_amp or self.accumulate_grads:
                _fail(self, "cudagraphs", "cannot be combined with enable_amp or accumulate_grads")
            if self.buffer_size % self.minibatch_size:
                _fail(
                    self,
                    "cudagraphs",
                    f"needs equal minibatches: sgd_minibatch_size={self.minibatch_size} must divide "
                    f"num_envs * horizon = {self.buffer_size}",
                )

    @property
    def minibatch_size(self) -> int:
        """``M``: ``sgd_minibatch_size``, or the whole buffer."""
        return self.sgd_minibatch_size or self.buffer_size

    def build(self, env_cls: EnvFactory) -> PPO:
        """Build the PPO algorithm for ``env_cls`` and validate it against the env's specs."""
        from rlx.algorithms.ppo import PPO

        algo = PPO(env_cls, self)
        algo.validate()
        return algo


@config_dataclass
class NPGConfig(CommonConfig):
    """Config of rlx's natural policy gradient (Kakade, 2001) and TRPO (Schulman et al., 2015).

    One natural step per collected batch: ``g`` is the gradient of the surrogate
    ``mean(ratio * A)`` on the whole batch, ``F`` the Fisher of the policy (the Hessian
    of ``mean KL(π_old || π)``), and ``x`` solves ``(F + damping I) x = g`` by conjugate
    gradient. The critic regresses on the λ-returns with ``optimizer_cls``.

    Example:
        >>> from rlx import NPGConfig
        >>> from rlx.envs import CartPole
        >>> algo = NPGConfig(num_envs=64, horizon=32, device="cpu").build(CartPole)
        >>> collect_stats = algo.collect()
        >>> step_stats = algo.step()
    """

    #: Trust region δ: the mean KL(old || new) a ``"kl"`` step aims at, and the bound
    #: the line search enforces.
    max_kl: float = 0.01
    #: ``"kl"``: θ += sqrt(2δ / xᵀ(F + damping I)x) · x, a step whose quadratic KL
    #: estimate is δ whatever the scale of the advantages. ``"fixed"``: θ +=
    #: ``trust_region_size`` · x, tianshou's NPG rule, kept for compatibility; its KL
    #: grows with the square of the advantage scale, so it is no trust region.
    step_size_rule: Literal["kl", "fixed"] = "kl"
    #: The step multiplier of ``step_size_rule="fixed"`` (not a KL bound).
    trust_region_size: float = 0.5
    #: Damping λ >= 0 added to the Fisher: CG solves (F + λ I) x = g.
    damping: float = 0.1
    #: Conjugate-gradient iterations (a fixed count; converged iterations are frozen).
    cg_iters: int = 10
    #: CG stops updating once the squared residual is below this.
    cg_residual_tol: float = 1e-10
    #: Fraction in (0, 1] of the batch used for Fisher-vector products and the line
    #: search; the gradient always uses the whole batch.
    fvp_subsample: float = 0.2
    #: TRPO: backtrack along the natural step until the KL is within ``max_kl`` and the
    #: surrogate improves; all candidates are evaluated in one batched pass.
    line_search: bool = False
    #: Candidates are ``backtrack_coeff ** k`` times the step for k = 0..max_backtracks.
    max_backtracks: int = 10
    #: Shrink factor in (0, 1) between line-search candidates.
    backtrack_coeff: float = 0.8
    #: Epochs of critic regression per step.
    optim_critic_iters: int = 5
    #: Critic minibatch size; ``None`` is the whole buffer.
    critic_minibatch_size: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_float(self, "max_kl", low=0.0, low_open=True)
        if self.step_size_rule not in ("kl", "fixed"):
            _fail(self, "step_size_rule", f"must be 'kl' or 'fixed', got {self.step_size_rule!r}")
        _check_float(self, "trust_region_size", low=0.0, low_open=True)
        _check_float(self, "damping", low=0.0)
        _check_int(self, "cg_iters")
        _check_float(self, "cg_residual_tol", low=0.0)
        _check_float(self, "fvp_subsample", low=0.0, high=1.0, low_open=True)
        _check_bool(self, "line_search")
        _check_int(self, "max_backtracks", minimum=0)
        _check_float(self, "backtrack_coeff", low=0.0, high=1.0, low_open=True)
        if self.backtrack_coeff == 1.0:
            _fail(self, "backtrack_coeff", "must be < 1, got 1.0")
        _check_int(self, "optim_critic_iters")
        self._check_minibatch_size("critic_minibatch_size")

    @property
    def fvp_batch_size(self) -> int:
        """Samples used for Fisher-vector products: ``ceil(fvp_subsample * N)``."""
        return max(1, math.ceil(self.fvp_subsample * self.buffer_size))

    def build(self, env_cls: EnvFactory) -> NPG:
        """Build the NPG algorithm for ``env_cls`` and validate it against the env's specs."""
        from rlx.algorithms.npg import NPG

        algo = NPG(env_cls, self)
        algo.validate()
        return algo


@config_dataclass
class RecurrentAlgorithmConfig(AlgorithmConfig):
    """Config of rlx's PPO with a recurrent (LSTM or GRU) policy.

    Every :class:`AlgorithmConfig` field keeps its meaning; ``sgd_minibatch_size`` still
    counts samples and must hold whole sequences. The default model is
    :class:`~rlx.models.RecurrentActorCritic`, whose ``model_config`` takes ``hiddens``
    (encoder, default ``[64]``), ``activation_fn`` (default ``"tanh"``), ``cell``
    (``"lstm"`` or ``"gru"``), ``hidden_size`` (default 64), ``num_layers`` (default 1)
    and ``log_std_init``. A custom ``model_cls`` implements the recurrent interface of
    :mod:`rlx.models`.

    Example:
        >>> from rlx import RecurrentAlgorithmConfig
        >>> from rlx.envs import CartPoleNoVelocity
        >>> algo = RecurrentAlgorithmConfig(num_envs=64, horizon=32, seq_len=16, device="cpu").build(
        ...     CartPoleNoVelocity
        ... )
        >>> collect_stats = algo.collect()
        >>> step_stats = algo.step()
    """

    #: Steps per training sequence (truncated backprop through time); must divide
    #: ``horizon``. ``None``: the whole horizon, one sequence per env.
    seq_len: int | None = None
    #: Steps run without gradient before each sequence, from the state stored ``burn_in``
    #: steps earlier, to refresh the stored state with the current parameters (R2D2).
    #: Sequences with fewer collected steps before them keep their stored state.
    #: 0 disables it; at most ``horizon - seq_len``.
    burn_in: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_int(self, "seq_len", allow_none=True)
        _check_int(self, "burn_in", minimum=0)
        L = self.sequence_length
        if self.horizon % L:
            _fail(self, "seq_len", f"{L} must divide horizon={self.horizon}")
        if self.minibatch_size % L:
            _fail(
                self,
                "sgd_minibatch_size",
                f"{self.minibatch_size} must be a multiple of seq_len={L}: minibatches are whole sequences",
            )
        if self.burn_in > self.horizon - L:
            _fail(
                self,
                "burn_in",
                f"{self.burn_in} leaves no sequence with collected steps to burn in: "
                f"needs burn_in <= horizon - seq_len = {self.horizon - L}",
            )
        if self.cudagraphs:
            _fail(self, "cudagraphs", "is not supported for recurrent policies")
        if self.compile:
            _fail(self, "compile", "is not supported for recurrent policies")

    @property
    def sequence_length(self) -> int:
        """``L``: ``seq_len``, or the horizon."""
        return self.seq_len or self.horizon

    def build(self, env_cls: EnvFactory) -> RecurrentPPO:
        """Build the recurrent PPO algorithm for ``env_cls`` and validate it against the env's specs."""
        from rlx.algorithms.recurrent_ppo import RecurrentPPO

        algo = RecurrentPPO(env_cls, self)
        algo.validate()
        return algo


# -- plain-data (YAML) conversion ---------------------------------------------------------


def import_object(path: str, *, where: str = "") -> Any:
    """Import ``"package.module:Name"`` (or ``"package.module.Name"``).

    Raises:
        ConfigError: the module or the name cannot be imported, naming ``where``.
    """
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"{where}: {path!r} is not an import path like 'package.module:Name'")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # ImportError, or an error raised while importing user code
        raise ConfigError(f"{where}: cannot import module {module_name!r} ({type(e).__name__}: {e})") from e
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{where}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def object_path(obj: Any) -> str:
    """The ``"module:Name"`` import path of a class or function."""
    return f"{obj.__module__}:{obj.__qualname__}"


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check a plain-data ``value`` against the annotation ``tp``; convert where YAML
    cannot say it directly (import paths to classes, lists to tuples, ints to floats)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, option, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[-1] if len(errors) == 1 else f"{where}: {value!r} matches none of {_type_name(tp)}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: must be one of {list(args)}, got {value!r}")
        return value
    if tp is type(None):
        if value is not None:
            raise ConfigError(f"{where}: must be null, got {value!r}")
        return None
    if origin is type or tp is type:
        if isinstance(value, str):
            value = import_object(value, where=where)
        if not isinstance(value, type):
            raise ConfigError(f"{where}: must be a class or an import path, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: must be a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: must be a string, got {value!r}")
        return value
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: must be a list, got {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{where}: must have {len(args)} entries, got {value!r}")
            return tuple(_coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        item = args[0] if args else Any
        items = [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: must be a mapping, got {value!r}")
        return dict(value)
    if isinstance(tp, type):
        if not isinstance(value, tp):
            raise ConfigError(f"{where}: must be a {tp.__name__}, got {value!r}")
        return value
    return value


def config_from_dict(cls: type, data: Any, *, where: str = "") -> Any:
    """Build the config dataclass ``cls`` from plain data (a YAML mapping).

    Every key must be a field of ``cls`` and every value must match its type; classes
    are given as import paths (``"torch.optim:AdamW"``).

    Raises:
        ConfigError: naming the key and its place (``where``), for an unknown key or a
            value of the wrong type; then whatever the config's own validation raises.
    """
    where = where or cls.__name__
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a mapping of field names to values, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(f"{where}.{key}: unknown key; valid keys are {sorted(fields)}")
        kwargs[key] = _coerce(value, hints[key], f"{where}.{key}")
    return cls(**kwargs)


def config_to_dict(config: Any) -> dict[str, Any]:
    """Plain data for a config dataclass: classes become import paths, tuples lists.

    A model *instance* has no plain form; it is written as its ``repr`` under ``model``
    and such a config cannot be rebuilt from the dict.
    """

    def plain(value: Any) -> Any:
        if isinstance(value, type) or callable(value) and hasattr(value, "__qualname__"):
            return object_path(value)
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, nn.Module):
            return repr(value)
        return value

    return {f.name: plain(getattr(config, f.name)) for f in dataclasses.fields(config) if f.init}
