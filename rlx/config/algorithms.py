"""Algorithm configs: dataclasses that validate themselves and build an algorithm.

``AlgorithmConfig(...).build(env_cls)`` returns a PPO algorithm with ``collect()`` and
``step()``. Field names and meanings follow rl8's ``AlgorithmConfig``; rlx's additions
(``seed``, ``normalize_obs``, ``kl_adaptive_lr``, ...) are documented on each field.

Every error in a config is a :class:`ConfigError` (a ``ValueError``) raised at
construction and naming the field. The field checks live in :mod:`rlx.core.config_fields`,
the YAML typing in :mod:`rlx.core.yaml_types`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Literal

import torch

from rlx.algorithms.a2c import A2C, RecurrentA2C
from rlx.algorithms.base import Algorithm
from rlx.algorithms.distillation import Distillation
from rlx.algorithms.npg import NPG
from rlx.algorithms.ppo import PPO
from rlx.algorithms.recurrent_ppo import RecurrentPPO
from rlx.config.base import CommonConfig, MinibatchConfig, SequenceFields, check_sequences
from rlx.core.config_fields import ConfigError, check_bool, check_mode, check_float, check_int, config_dataclass, fail
from rlx.core.yaml_types import config_from_dict, config_to_dict, import_object, object_path

__all__ = [
    "A2CConfig",
    "AlgorithmConfig",
    "CommonConfig",
    "ConfigError",
    "DistillationConfig",
    "MinibatchConfig",
    "NPGConfig",
    "RecurrentA2CConfig",
    "RecurrentAlgorithmConfig",
    "config_dataclass",
    "config_from_dict",
    "config_to_dict",
    "import_object",
    "object_path",
]


@config_dataclass
class AlgorithmConfig(MinibatchConfig):
    """Config of rlx's PPO (Schulman et al., 2017, https://arxiv.org/abs/1707.06347).

    Example:
        >>> from rlx import AlgorithmConfig
        >>> from rlx.envs import CartPole
        >>> algo = AlgorithmConfig(num_envs=64, horizon=32, device="cpu").build(CartPole)
        >>> collect_stats = algo.collect()
        >>> step_stats = algo.step()
    """


    algorithm_cls: ClassVar[type[Algorithm]] = PPO
    supports_seeds: ClassVar[bool] = True

    #: Step the optimizer once per epoch on gradients accumulated over its minibatches
    #: (each weighted by its share of the buffer, so this equals the full-batch gradient).
    accumulate_grads: bool = False
    #: Epochs over the buffer per :meth:`step`.
    num_sgd_iters: int = 4
    #: PPO ratio clip ε: the surrogate ignores ratios outside [1 - ε, 1 + ε].
    clip_param: float = 0.2
    #: PPO2 value clip: the loss takes the max of the clipped and unclipped squared
    #: errors around the old value; ``None`` disables it.
    vf_clip_param: float | None = 5.0
    #: Dual-clip constant c > 1 (Ye et al., 2020) bounding the surrogate at ``c * A`` for
    #: negative advantages; ``None`` disables it.
    dual_clip_param: float | None = None
    #: Target KL(rollout policy || updated policy). Every optimizer step is judged before
    #: it runs on the KL of the data its gradient came from (``E[(r-1) - log r]`` from its
    #: forward passes): without ``kl_adaptive_lr``, a step judged above 1.5 × target and
    #: every later step of the ``step()`` leave the parameters alone, and no further epoch
    #: runs (decided on the device; one host sync per epoch). See
    #: :mod:`rlx.algorithms.kl_control`. ``None`` disables it.
    target_kl_div: float | None = None
    #: Steer the learning rate to ``target_kl_div`` instead of stopping: after every
    #: ``step()``, ÷1.5 when the KL the update reached (``monitors/kl_div``) exceeds 2 ×
    #: target, ×1.5 when below target / 2, clamped to ``kl_adaptive_lr_bounds`` (rsl_rl's
    #: rule, judged on the whole update; no extra sync).
    kl_adaptive_lr: bool = False
    #: ``(min_lr, max_lr)`` for ``kl_adaptive_lr``.
    kl_adaptive_lr_bounds: tuple[float, float] = (1e-5, 1e-2)
    #: With ``kl_adaptive_lr``: apply the rule before every optimizer step, to the KL of
    #: the minibatch about to be stepped on (rsl_rl's placement; on the device, no sync),
    #: rather than once after each ``step()``: an update whose KL runs away at a high LR
    #: is slowed within it, but the KL an update reaches overshoots the target (3.1-3.4x
    #: on CartPole, ``benchmarks/kl_control.py``; the update-level rule holds 1.0x). With
    #: ``accumulate_grads``, before each epoch's one step, on the epoch's KL. Each member
    #: on its own KL and target.
    kl_adaptive_lr_per_minibatch: bool = False
    #: Random network distillation (rsl_rl's ``rnd_cfg``): an intrinsic reward for novel
    #: states, ``{weight: 0.5, obs_keys: [policy], ...}`` (the fields of
    #: :class:`rlx.algorithms.rnd.RNDConfig`); ``None``: off. Each member its own; not with a
    #: recurrent policy. Its predictor steps inside the update, compiled and captured with it.
    rnd: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rnd is not None:
            from rlx.algorithms.rnd import RNDConfig

            RNDConfig.from_dict(self.rnd, where=f"{type(self).__name__}.rnd")
        for field in ("accumulate_grads", "kl_adaptive_lr", "kl_adaptive_lr_per_minibatch"):
            check_bool(self, field)
        if self.kl_adaptive_lr_per_minibatch and not self.kl_adaptive_lr:
            fail(self, "kl_adaptive_lr_per_minibatch", "needs kl_adaptive_lr=True")
        check_int(self, "num_sgd_iters")
        check_float(self, "clip_param", low=0.0, low_open=True)
        check_float(self, "vf_clip_param", low=0.0, low_open=True, allow_none=True)
        check_float(self, "dual_clip_param", low=1.0, low_open=True, allow_none=True)
        check_float(self, "target_kl_div", low=0.0, low_open=True, allow_none=True)
        if self.kl_adaptive_lr:
            if self.target_kl_div is None:
                fail(self, "kl_adaptive_lr", "needs target_kl_div to be set")
            if self.lr_schedule is not None:
                fail(self, "kl_adaptive_lr", "cannot be combined with lr_schedule")
            bounds = self.kl_adaptive_lr_bounds
            if (
                not isinstance(bounds, (tuple, list))
                or len(bounds) != 2
                or not all(isinstance(b, (int, float)) and b > 0 for b in bounds)
                or bounds[0] > bounds[1]
            ):
                fail(self, "kl_adaptive_lr_bounds", f"must be (min_lr, max_lr) with 0 < min <= max, got {bounds!r}")


_A2C_HAS_NO = "a PPO field; A2C takes the plain policy gradient (no ratio, no clipping, no KL control)"


@config_dataclass
class A2CConfig(MinibatchConfig):
    """Config of rlx's synchronous advantage actor-critic (A2C; Mnih et al., 2016,
    https://arxiv.org/abs/1602.01783).

    One gradient step per collect on the whole rollout (or one epoch of
    ``sgd_minibatch_size`` minibatches) on ``-mean(logp * A) + vf_coeff * value loss +
    entropy_coeff * (-entropy)``. The optimizer is ``optimizer_cls`` (Adam by default);
    the original used ``torch.optim.RMSprop`` with ``{"lr": 7e-4, "alpha": 0.99,
    "eps": 1e-5}``. PPO's ratio, clipping, epochs and KL fields are refused by name.

    Example:
        >>> from rlx import A2CConfig
        >>> from rlx.envs import CartPole
        >>> a2c = A2CConfig(num_envs=64, horizon=8, device="cpu").build(CartPole)
        >>> stats = {**a2c.collect(), **a2c.step()}
    """

    algorithm_cls: ClassVar[type[Algorithm]] = A2C
    supports_seeds: ClassVar[bool] = True
    #: What A2C fixes in the shared update: one epoch, no accumulation, no KL controls.
    num_sgd_iters: ClassVar[int] = 1
    accumulate_grads: ClassVar[bool] = False
    target_kl_div: ClassVar[float | None] = None
    kl_adaptive_lr: ClassVar[bool] = False
    kl_adaptive_lr_per_minibatch: ClassVar[bool] = False
    foreign_fields: ClassVar[dict[str, str]] = dict.fromkeys(
        ("clip_param", "vf_clip_param", "dual_clip_param", "num_sgd_iters", "accumulate_grads",
         "target_kl_div", "kl_adaptive_lr", "kl_adaptive_lr_bounds", "kl_adaptive_lr_per_minibatch"),
        _A2C_HAS_NO,
    )

    #: Weight of the value loss (A2C's 0.5).
    vf_coeff: float = 0.5
    #: Entropy bonus weight (A2C's 0.01); ignored when ``entropy_coeff_schedule`` is set.
    entropy_coeff: float = 0.01
    #: Max global gradient norm (A2C's 0.5); ``None`` disables clipping.
    max_grad_norm: float | None = 0.5


@config_dataclass
class DistillationConfig(CommonConfig):
    """Config of teacher-student distillation (rsl_rl's ``Distillation``; see
    :mod:`rlx.algorithms.distillation`): the student (this config's model, on its
    ``obs_groups``' actor keys) collects and regresses its mean action on a trained
    teacher's.

    Example:
        >>> from rlx import DistillationConfig
        >>> student = DistillationConfig(teacher="runs/teacher", obs_groups={"actor": ["policy"]},
        ...                              num_envs=256).build(MyEnv)  # doctest: +SKIP
    """

    algorithm_cls: ClassVar[type[Algorithm]] = Distillation
    supports_seeds: ClassVar[bool] = True

    #: The teacher: a ``rlx train`` run directory or checkpoint, or an OnPolicyRunner
    #: checkpoint (``model_<it>.pt``).
    teacher: str | None = None
    #: Which member of a multi-member teacher run (``None`` for a single run).
    teacher_member: int | None = None
    #: For a teacher trained by rsl_rl 5.x: the ``train_cfg`` it was trained with (its
    #: ``actor`` section and ``obs_groups`` rebuild the actor; needs rsl_rl installed).
    teacher_rsl_rl_cfg: dict[str, Any] | None = None
    #: ``"mse"`` or ``"huber"`` between the student's and the teacher's mean actions.
    loss_type: Literal["mse", "huber"] = "mse"
    #: Epochs over each rollout.
    num_sgd_iters: int = 1
    #: Samples per minibatch (of each member); ``None``: the whole rollout.
    sgd_minibatch_size: int | None = None
    #: Max gradient norm of the student; ``None`` disables clipping (rsl_rl's default).
    max_grad_norm: float | None = None
    #: Learning rate (rsl_rl's distillation default).
    optimizer_config: dict[str, Any] | None = dataclasses.field(default_factory=lambda: {"lr": 1e-3})
    #: The student's collect samples actions: start from a small std (as rsl_rl's student).
    model_config: dict[str, Any] | None = dataclasses.field(default_factory=lambda: {"log_std_init": math.log(0.1)})
    #: ``torch.compile`` (inductor) each minibatch update whole (the student's forward
    #: pass, the loss, the backward, the clipped Adam step: ``Distillation.minibatch_update``,
    #: the function eager runs) and collect's acting as PPO's ``compile`` does. ``"auto"``:
    #: where its compile time pays within the run (:mod:`rlx.algorithms.modes`); on CUDA
    #: only with ``True`` until a GPU run has tested it.
    compile: bool | Literal["auto"] = "auto"
    #: CUDA only: capture all of ``step()``'s device work (the teacher's targets, every
    #: epoch's order, the minibatch updates, the statistics: ``Distillation.update_phase``)
    #: in one CUDA graph, and with a graph-safe env collect's device work, as PPO's
    #: ``cudagraphs`` does. Needs Adam or AdamW and no ``enable_amp``. ``"auto"`` leaves it
    #: off until a GPU run has tested it; ``True`` opts in.
    cudagraphs: bool | Literal["auto"] = "auto"
    #: What of this config compiles and captures, tested on a CPU only so far.
    untested_on_cuda: ClassVar[str | None] = "distillation's step"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_mode(self, "compile")
        check_mode(self, "cudagraphs")
        why = self.cudagraphs_blocker() if self.cudagraphs is True else None
        if why is not None:
            fail(self, "cudagraphs", why)
        if not isinstance(self.teacher, str) or not self.teacher:
            fail(self, "teacher", f"must be the path of the teacher's run directory or checkpoint, got {self.teacher!r}")
        check_int(self, "teacher_member", minimum=0, allow_none=True)
        if self.loss_type not in ("mse", "huber"):
            fail(self, "loss_type", f"must be 'mse' or 'huber', got {self.loss_type!r}")
        check_int(self, "num_sgd_iters")
        self._check_minibatch_size("sgd_minibatch_size")
        if self.member_hparams:
            fail(self, "member_hparams", "is not supported by DistillationConfig yet")


#: The most passes of ``micro_batch_size`` rows an NPG natural step may unroll for
#: ``compile="auto"`` to compile it on a CPU (:meth:`NPGConfig.compile_auto_blocker`).
NPG_AUTO_COMPILE_PASSES = 8


@config_dataclass
class NPGConfig(CommonConfig):
    """Config of rlx's natural policy gradient (Kakade, 2001) and TRPO (Schulman et al., 2015).

    One natural step per collected batch: ``g`` is the gradient of the surrogate
    ``mean(ratio * A)`` on the whole batch, ``F`` the Fisher of the policy (the Hessian
    of ``mean KL(π_old || π)``), and ``x`` solves ``(F + damping I) x = g`` by conjugate
    gradient. The critic regresses on the λ-returns with ``optimizer_cls``.

    Example (TRPO: the natural step with a line search):
        >>> from rlx import NPGConfig
        >>> from rlx.envs import Pendulum
        >>> trpo = NPGConfig(num_envs=64, line_search=True, max_kl=0.01, device="cpu").build(Pendulum)
        >>> for _ in range(3):
        ...     stats = {**trpo.collect(), **trpo.step()}
    """

    algorithm_cls: ClassVar[type[Algorithm]] = NPG
    supports_seeds: ClassVar[bool] = True

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
    #: Samples per forward/backward pass (as PPO's ``micro_batch_size``): the whole-batch
    #: gradient, the critic's minibatches and the whole-batch forward passes run in
    #: passes of this many rows, their gradients accumulated by share (the same step up to
    #: float rounding). ``None``: on a CPU, 4096 for models up to 128 wide and 2048 for
    #: wider ones (a 32768-row pass of a 256-wide critic runs 1.9x slower than 2048-row
    #: passes), no split on CUDA; 0: never split. Not with S members (their rows stay whole).
    micro_batch_size: int | None = None
    #: ``torch.compile`` (inductor) the natural step (gradient, Fisher-vector products,
    #: conjugate gradient, step size, line search and the parameter update) as one
    #: program, each critic minibatch (its passes' losses and backward, the clipped Adam
    #: step) as one program where it can (``NPG.critic_fallback`` says where not: a
    #: compiled loss per pass), and collect's acting and value passes as PPO's
    #: ``compile`` does. The
    #: first step pays for compiling (about a minute on a CPU; inductor's on-disk cache
    #: serves later runs), which grows with the passes of ``micro_batch_size`` rows the
    #: program unrolls: on a CPU at 131k rows (64 passes) it did not finish in 20
    #: minutes. Not under torch.distributed. ``"auto"`` (the default): on where its
    #: compile time pays within the run (:mod:`rlx.algorithms.modes`).
    compile: bool | Literal["auto"] = "auto"
    #: CUDA only: capture all of ``step()``'s device work (GAE, the natural step, the
    #: critic's regression, the statistics) in one CUDA graph, replayed once a step, and
    #: with a graph-safe env collect's device work too, as PPO's ``cudagraphs`` does.
    #: Needs ``optimizer_cls`` Adam or AdamW (the critic's; a capturable step, its LR on
    #: the device), no ``enable_amp``, one process and a feedforward policy. ``"auto"``
    #: (the default): on where it can run, else off, the reason named in ``algo.modes``.
    #: On an H100 (2026-11-27) the captured step matched the uncaptured one (NPG, TRPO
    #: with a schedule, members, compiled) and took 129 ms against 803 ms eagerly at
    #: B = 65536.
    cudagraphs: bool | Literal["auto"] = "auto"

    def compile_auto_blocker(self, device: torch.device) -> str | None:
        # The natural step's program unrolls its passes of micro_batch_size rows, and its
        # compile time grows with them (docs/performance.md): "auto" compiles at most
        # NPG_AUTO_COMPILE_PASSES on a CPU, counted at the smallest CPU default (2048).
        if device.type != "cpu":
            return None
        micro = self.micro_batch_size if self.micro_batch_size is not None else 2048
        passes = -(-self.buffer_size // micro) if micro else 1
        if passes > NPG_AUTO_COMPILE_PASSES:
            return (f"the natural step's program would unroll {passes} passes of {micro} rows (num_envs * horizon = "
                    f"{self.buffer_size}), past the {NPG_AUTO_COMPILE_PASSES} it compiles in minutes")
        return None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self, "micro_batch_size", minimum=0, allow_none=True)
        check_mode(self, "compile")
        check_mode(self, "cudagraphs")
        why = self.cudagraphs_blocker() if self.cudagraphs is True else None
        if why is not None:
            fail(self, "cudagraphs", why)
        check_float(self, "max_kl", low=0.0, low_open=True)
        if self.step_size_rule not in ("kl", "fixed"):
            fail(self, "step_size_rule", f"must be 'kl' or 'fixed', got {self.step_size_rule!r}")
        check_float(self, "trust_region_size", low=0.0, low_open=True)
        check_float(self, "damping", low=0.0)
        check_int(self, "cg_iters")
        check_float(self, "cg_residual_tol", low=0.0)
        check_float(self, "fvp_subsample", low=0.0, high=1.0, low_open=True)
        check_bool(self, "line_search")
        check_int(self, "max_backtracks", minimum=0)
        check_float(self, "backtrack_coeff", low=0.0, high=1.0, low_open=True)
        if self.backtrack_coeff == 1.0:
            fail(self, "backtrack_coeff", "must be < 1, got 1.0")
        check_int(self, "optim_critic_iters")
        self._check_minibatch_size("critic_minibatch_size")

    @property
    def fvp_batch_size(self) -> int:
        """Samples used for Fisher-vector products: ``ceil(fvp_subsample * N)``."""
        return max(1, math.ceil(self.fvp_subsample * self.buffer_size))


@config_dataclass
class RecurrentAlgorithmConfig(SequenceFields, AlgorithmConfig):
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

    algorithm_cls: ClassVar[type[Algorithm]] = RecurrentPPO

    def __post_init__(self) -> None:
        super().__post_init__()
        check_sequences(self)


@config_dataclass
class RecurrentA2CConfig(SequenceFields, A2CConfig):
    """Config of rlx's A2C with a recurrent (LSTM or GRU) policy: :class:`A2CConfig`'s
    fields plus ``seq_len`` and ``burn_in``, with the models of
    :class:`RecurrentAlgorithmConfig`.

    Example:
        >>> from rlx import RecurrentA2CConfig
        >>> from rlx.envs import CartPoleNoVelocity
        >>> a2c = RecurrentA2CConfig(num_envs=64, horizon=16, seq_len=8, device="cpu").build(CartPoleNoVelocity)
        >>> stats = {**a2c.collect(), **a2c.step()}
    """

    algorithm_cls: ClassVar[type[Algorithm]] = RecurrentA2C

    def __post_init__(self) -> None:
        super().__post_init__()
        check_sequences(self)

