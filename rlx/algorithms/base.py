"""What every rlx algorithm shares: the policy, the optimizer, the GAE call and the state.

The subclass (PPO, NPG) supplies :meth:`Algorithm.step`. The env, the buffer and the T
loop belong to the :class:`~rlx.collect.rollout.Rollout`; ``collect()`` here decides when to
reset, runs it, and moves its statistics to the host in ONE transfer.
"""

from __future__ import annotations

import copy
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import torch
from tensordict import TensorDict
from torch import Tensor

from rlx.core import distributed as rdist
from rlx.collect.buffer import ACTIONS, ADVANTAGES, FINAL_VALUES, LOGP, RETURNS, VALUES
from rlx.core.precision import apply_matmul_precision
from rlx.core.config_fields import ConfigError
from rlx.env import OBS, REWARDS, TERMINATED, TRUNCATED, check_device_available, check_env_limits, env_is_graph_safe, env_record
from rlx.core.gae import generalized_advantage_estimate_
from rlx.core.normalization import RewardScaler
from rlx.policy import Obs, Policy, PolicyBase, flatten_time
from rlx.algorithms.modes import resolve_modes
from rlx.collect.rollout import VALUE_PASS_ROWS, ActFn, Rollout, ValueFn, envs_start_afresh
from rlx.core.compiling import compiled, recheck_values
from rlx.core.schedulers import Schedule
from rlx.members import Members
from rlx.members.hparams import MemberHparams, MemberValues
from rlx.members.optim import load_optimizer_state
from rlx.core.yaml_types import config_to_dict

if TYPE_CHECKING:
    from rlx.config import CommonConfig
    from rlx.env import EnvFactory

__all__ = ["Algorithm", "Obs", "RolloutFns"]


class RolloutFns(NamedTuple):
    """How an algorithm's collect runs: ``act`` and ``value`` (``None``: the policy's
    own), and ``compile_steps``: the T loop as compiled programs (:mod:`rlx.collect.compiled_loop`)."""

    act: ActFn | None
    value: ValueFn | None
    compile_steps: bool


class Algorithm(MemberValues, ABC):
    """Base of rlx's on-policy algorithms (see the subclasses for the update).

    Args:
        env_cls: The env class (or factory) built as ``env_cls(num_envs, horizon,
            device=device)``.
        config: The algorithm's config.

    Attributes:
        modes: ``compile`` and ``cudagraphs`` as it runs them ("auto" resolved), and why.
        env: The env instance.
        policy: The :class:`~rlx.policy.PolicyBase`.
        rollout: The :class:`~rlx.collect.rollout.Rollout` that owns the buffer and the T loop.
        optimizer: Optimizer over the policy's parameters.
        env_steps: Env transitions collected so far (``B * T`` per collect, all ranks).
    """

    #: The policy class the algorithm builds.
    policy_cls: type[PolicyBase] = Policy

    def __init__(self, env_cls: EnvFactory, config: CommonConfig) -> None:
        self.config = config
        self.env_cls = env_cls
        self.rank, self.world_size = rdist.rank(), rdist.world_size()
        self.device = check_device_available(config.device, where=f"{type(config).__name__}.device")
        if self.world_size > 1 and self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", rdist.local_rank())  # one GPU per rank
        if self.world_size > 1:
            # Refuse ranks that disagree before any collective depends on their shapes.
            env, env_kwargs = env_record(env_cls)
            rdist.check_same_on_all_ranks(
                {"algorithm": type(self).__name__, "env": {"env": env, "env_kwargs": env_kwargs}, **config_to_dict(config)},
                "the algorithm config",
            )
        if config.seed is not None:
            torch.manual_seed(config.seed + self.rank)  # one seed stream per rank
        # num_seeds = S members: S * B sub-envs, rows i*B:(i+1)*B for member i (rlx.members).
        self.num_seeds = config.num_seeds
        self.members = Members(self.num_seeds, self.device)
        #: The hyperparameters that differ between members (``config.member_hparams``).
        self.hparams = self.members.hparams = MemberHparams(config, self.device)
        self.num_envs, self.horizon = config.num_envs * self.num_seeds, config.horizon
        check_env_limits(env_cls, self.num_envs, self.horizon)
        self.env = env_cls(self.num_envs, self.horizon, device=self.device)
        model_cls, model_config = config.model_cls, config.model_config
        if config.model is None:
            model_cls, model_config = self.members.model_cls_and_config(
                model_cls, model_config, self.policy_cls.default_model_cls, config.seed
            )
        self.policy = self.policy_cls(
            self.env.observation_spec,
            self.env.action_spec,
            model=config.model,
            model_cls=model_cls,
            model_config=model_config,
            distribution_cls=config.distribution_cls,
            normalize_obs=config.normalize_obs,
            device=self.device,
            obs_groups=config.obs_groups,
            num_seeds=self.num_seeds,
        )
        if config.init_policy is not None:  # a trained start (a distilled student, say)
            from rlx.run.checkpoint import load_policy_state

            where = f"{type(config).__name__}.init_policy"
            try:
                self.policy.load_state_dict(load_policy_state(config.init_policy, where=where))
            except RuntimeError as e:
                raise ConfigError(f"{where}: its policy does not fit this config's ({str(e).splitlines()[0]})") from e
        if self.device.type == "cpu":
            self.policy.max_rows_per_pass = VALUE_PASS_ROWS
        self.modes = resolve_modes(config, self.device, self.world_size, self.policy.recurrent, captures=self.captures)
        apply_matmul_precision(self.modes.matmul_precision)  # process-wide, as torch keeps it
        fns = self._rollout_fns()
        graph_safe = env_is_graph_safe(self.env)
        graphed = self.uses_cuda_graphs and self.device.type == "cuda" and graph_safe
        compile_steps = fns.compile_steps and graph_safe
        self.rollout = Rollout(
            self.env, self.policy, self.horizon, self.device, act_fn=None if compile_steps else fns.act,
            value_fn=fns.value, graphed=graphed, members=self.members, compile_steps=compile_steps,
        )
        if self.world_size > 1:
            rdist.check_same_on_all_ranks(
                {n: list(p.shape) for n, p in self.policy.named_parameters()}, "the model's parameters"
            )
            rdist.broadcast_module_(self.policy)  # identical start on every rank
        # A tensor LR (for a captured update, or for KL controls decided on the device): the
        # base LR, and the LR the next optimizer step applies, which the param groups hold.
        self._lr_tensor = self._lr_applied = None
        if self.needs_tensor_lr:
            self._lr_tensor = torch.tensor(float(config.optimizer_kwargs["lr"]), device=self.device)
            self._lr_applied = self._lr_tensor.clone()
        self.optimizer = self._make_optimizer()
        self.lr_schedule = Schedule(
            config.lr_schedule, config.lr_schedule_kind, initial=config.optimizer_kwargs["lr"], name="lr_schedule"
        )
        self._set_lr(self.lr_schedule.value(0))
        if self.hparams.varies("lr"):  # each member's LR over the config's
            base = config.optimizer_kwargs["lr"]
            self.members.set_lr_factors([lr / base for lr in self.hparams.values["lr"]])
        self.reward_scaler = RewardScaler(self.num_envs, config.gamma, device=self.device, num_seeds=self.num_seeds)
        if self.hparams.varies("gamma"):
            self.reward_scaler.set_gamma(self.hparams.per_env("gamma", config.num_envs))
        self.amp_dtype = self.members.amp_dtype(self.device, config.enable_amp)
        self.grad_scaler = torch.amp.GradScaler(
            self.device.type, enabled=config.enable_amp and self.amp_dtype == torch.float16
        )
        self.env_steps = 0
        self.num_collects = 0
        self.num_steps = 0
        self._buffered = False
        self._force_reset = True  # the first collect (and one after a lossy resume) resets
        self._scaled_rewards = torch.zeros(self.num_envs, self.horizon, 1, device=self.device)
        #: Parameter groups whose gradients are clipped apart (``None``: all as one).
        self.clip_groups: list[list[torch.nn.Parameter]] | None = None

    # -- construction hooks --------------------------------------------------------------

    #: Whether the algorithm has an update that ``cudagraphs`` captures (PPO's).
    captures: ClassVar[bool] = False

    def autocast(self) -> torch.autocast:
        """``enable_amp``'s autocast (:attr:`amp_dtype`; a no-op without it). Its cache of
        cast weights is off: a captured update re-casts them in each replay rather than
        keeping copies made during the capture, as torch's CUDA graphs require; each weight
        is cast once a forward pass either way."""
        return torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.config.enable_amp,
                              cache_enabled=False)

    @property
    def uses_cuda_graphs(self) -> bool:
        """Whether the update (and, for a graph-safe env, collect's T loop and tail) is captured in
        CUDA graphs (PPO's ``cudagraphs``, resolved: :attr:`modes`)."""
        return self.modes.cudagraphs

    @property
    def compiles(self) -> bool:
        """Whether collect and the update run compiled programs (``compile``, resolved)."""
        return self.modes.compile

    @property
    def needs_tensor_lr(self) -> bool:
        """Whether the optimizer's learning rate is a device tensor, written in place."""
        return self.uses_cuda_graphs

    def _make_optimizer(self) -> torch.optim.Optimizer:
        params, kwargs = self._optimized_parameters(), self._optimizer_kwargs()
        try:
            return self.members.optimizer(self.config.optimizer_cls, params, kwargs)
        except (ValueError, RuntimeError) as e:
            where = f"{type(self.config).__name__}.optimizer_config"
            if self._lr_tensor is not None:
                raise ConfigError(
                    f"{where}: {self.config.optimizer_cls.__name__} {self.config.optimizer_kwargs} does not take the "
                    f"tensor learning rate that cudagraphs and target_kl_div need ({e})"
                ) from e
            raise ConfigError(f"{where}: {e}") from e

    def _rollout_fns(self) -> RolloutFns:
        """What the T loop calls to act and to value (``None``: the policy's own), and whether it
        runs compiled (a graph-safe env): with ``compile`` (a second shape recompiles once, dynamic)."""
        if not self.compiles:
            return RolloutFns(None, None, False)
        return RolloutFns(compiled(self.policy.act_step, device=self.device, dynamic=None),
                          compiled(self.policy.value_step, device=self.device, dynamic=None), True)

    def _optimized_parameters(self) -> list[torch.nn.Parameter]:
        return list(self.policy.model.parameters())  # the first-order optimizer's: all of the model's

    def _optimizer_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.config.optimizer_kwargs)
        if self._lr_applied is not None:
            kwargs["lr"] = self._lr_applied
        # Fused Adam is the fastest Adam on both devices: one kernel per parameter, where
        # the default foreach Adam runs a dozen small ops per tensor list. On CUDA it also
        # takes the GradScaler's found-inf flag on the device, so an AMP step never syncs.
        # In a CUDA graph it is also capturable (step counts on the device); the eager and
        # graphed updates then run the same kernel, which matters to Adam: its first
        # steps turn rounding-level gradients into lr-sized moves, so two Adam variants
        # drift apart where one kernel would agree (measured on an H100, #21).
        adam = self.config.optimizer_cls in (torch.optim.Adam, torch.optim.AdamW)
        if adam and not {"fused", "foreach", "capturable", "differentiable"} & kwargs.keys():
            kwargs["fused"] = True
        if self.uses_cuda_graphs:
            # A graph-captured step: the optimizer keeps its step counts on the device.
            kwargs["capturable"] = True
        return kwargs

    def _set_lr(self, lr: float) -> None:
        self._lr_value = float(lr)  # host mirror: reading a tensor LR would sync
        if self._lr_tensor is not None:
            self._lr_tensor.fill_(lr)
            self._lr_applied.fill_(lr)
            return
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    @property
    def resets_next_collect(self) -> bool:
        """Whether the next :meth:`collect` starts by resetting every env."""
        hper = self.config.horizons_per_env_reset
        return self._force_reset or (hper > 0 and self.num_collects % hper == 0)

    @property
    def lr(self) -> float:
        """The current learning rate (also as ``learning_rate``, rsl_rl's name)."""
        return self._lr_value
    learning_rate = lr

    @property
    def buffer(self) -> TensorDict | None:
        """The ``[B, T+1]`` rollout buffer (:mod:`rlx.collect.buffer`); ``None`` before :meth:`validate`."""
        return self.rollout.buffer

    def validate(self) -> None:
        """Check the env and the policy against the specs, then allocate the buffer.

        Resets the env, acts once, steps once and checks every output's keys, shapes and
        dtypes. Called by ``build()``; ``collect()`` calls it if it has not run.

        Raises:
            EnvOutputError: naming the offending key, its shape and the expected one.
        """
        self.rollout.validate()

    # -- collect -----------------------------------------------------------------------

    @torch.no_grad()
    def collect(self, *, env_config: dict[str, Any] | None = None, deterministic: bool = False) -> dict[str, float]:
        """Step the env ``T`` times with the policy and fill the buffer.

        The env is reset on the first call and then every ``horizons_per_env_reset``
        calls (never, when negative); otherwise collection continues from the last
        observation of the previous call, with partial episodes carried over.

        Args:
            env_config: Passed to ``env.reset(config=...)`` when the env is reset.
            deterministic: Act with the distribution's mode (evaluation).

        Returns:
            ``returns/*`` (sum of rewards over the horizon per env), ``rewards/*``,
            ``episodes/{count,return_mean,length_mean}`` over episodes that ended in
            this call (NaN when none did), ``env/resets``, ``env/steps`` and
            ``profiling/collect_ms``.

        Raises:
            ValueError: NaN or inf in the rewards or observations, naming the key and the
                first (env, step) where it appeared.
        """
        start = time.perf_counter()
        recheck_values()  # the compiled programs' Python values, once a collect
        rollout = self.rollout
        if rollout.buffer is None:
            self.validate()
        reset_all = self.resets_next_collect
        self._force_reset = False
        rollout.begin(reset_all, env_config)
        if reset_all:
            self.reward_scaler.reset()
            if self.num_collects == 0:
                # Start the running obs statistics from the first observations, so the
                # first update does not see raw observations as if normalized.
                self.policy.update_obs_stats(rollout.obs[0])
        stats = rollout.run(deterministic, self.reward_scaler if self.config.normalize_rewards else None)
        host = stats.to_host()  # SYNC: the one transfer of collect()
        rollout.finish(host)
        self.num_collects += 1
        self.env_steps += self.config.num_envs * self.horizon * self.world_size  # every rank's (per seed)
        self._buffered = True
        return {**rollout.report(host, self.world_size), "profiling/collect_ms": 1e3 * (time.perf_counter() - start)}

    # -- shared parts of step ------------------------------------------------------------

    def optimizer_step(self, params: list[torch.nn.Parameter], gate: Tensor | None = None,
                        running: Tensor | None = None) -> None:
        """Clip (after unscaling AMP gradients), step the optimizer, clear gradients: each
        member apart (:meth:`rlx.members.Members.optimizer_step`)."""
        lr = (self._lr_tensor, self._lr_applied) if self._lr_tensor is not None else None
        self.members.optimizer_step(self.optimizer, params, max_grad_norm=self.hparams.get("max_grad_norm"),
                                    grad_scaler=self.grad_scaler, gate=gate, running=running, lr=lr,
                                    clip_groups=self.clip_groups)

    def drop_grads(self) -> None:
        """Set every gradient to ``None``: before a CUDA graph capture, so the captured
        backward allocates the gradients in the graph's memory pool."""
        self.optimizer.zero_grad(set_to_none=True)

    def _check_buffered(self) -> None:
        if not self._buffered:
            raise RuntimeError(
                f"{type(self).__name__}.step() called with no fresh rollout: call collect() before step()"
            )

    def compute_advantages(self) -> None:
        """GAE over the buffer, in place into ``advantages`` and ``returns`` (float32)."""
        T = self.horizon
        buf = self.buffer
        rewards = buf.get(REWARDS)[:, :T]
        if self.config.normalize_rewards:
            rewards = self.reward_scaler.scale_rewards(rewards, out=self._scaled_rewards)
        rewards = self._with_intrinsic_rewards(rewards)
        generalized_advantage_estimate_(
            rewards,
            buf.get(VALUES),
            buf.get(TERMINATED)[:, :T],
            buf.get(TRUNCATED)[:, :T],
            buf.get(FINAL_VALUES)[:, :T],
            gamma=self._per_env("gamma"),
            gae_lambda=self._per_env("gae_lambda"),
            advantages=buf.get(ADVANTAGES)[:, :T],
            returns=buf.get(RETURNS)[:, :T],
        )
        # A member whose rollout holds NaN or inf diverged: frozen before any update.
        self.members.freeze_nonfinite_(buf.get(ADVANTAGES)[:, :T], buf.get(RETURNS)[:, :T])

    def _with_intrinsic_rewards(self, rewards: Tensor) -> Tensor:
        """The ``[B, T, 1]`` rewards GAE reads, with any intrinsic reward added (PPO's RND);
        the extrinsic ones as they are."""
        return rewards

    def flat_batch(self) -> dict[str, Obs]:
        """The ``N = B * T`` samples of the rollout as flat ``[N, ...]`` entries."""
        T = self.horizon
        return {key: flatten_time(self.buffer.get(key)[:, :T]) for key in (OBS, ACTIONS, LOGP, VALUES, ADVANTAGES, RETURNS)}

    def update_obs_statistics(self) -> None:
        """Merge the rollout's observations into the policy's running statistics (with
        ``normalize_obs``): after the update, which normalized them as the rollout did."""
        if self.policy.normalizes_obs:
            self.policy.update_obs_stats(flatten_time(self.buffer.get(OBS)[:, 1 : self.horizon + 1]))

    def _finish_step(self, obs_statistics: bool = True) -> None:
        """Bookkeeping after an update: obs statistics (unless the update phase merged
        them), schedules, flags."""
        if obs_statistics:
            self.update_obs_statistics()
        if self.config.lr_schedule is not None:
            self._set_lr(self.lr_schedule.value(self.env_steps))
        self._buffered = False
        self.num_steps += 1

    @torch.no_grad()
    def _params_finite(self) -> Tensor:
        """``[]`` bool, whether every policy parameter is finite, for step()'s one transfer: a
        NaN or inf entry makes the sum non-finite (finite ones would have to pass 1e38)."""
        return torch.stack([p.sum() for p in self.policy.model.parameters()]).sum().isfinite()

    def _check_params_finite(self, host: dict[str, float], stats: dict[str, float]) -> None:
        """Raise when ``host["params/finite"]`` (from :meth:`_params_finite`) says no."""
        if host["params/finite"] >= 1.0:
            return
        losses = ", ".join(f"{k} = {v:.4g}" for k, v in stats.items() if k.startswith("losses/"))
        raise FloatingPointError(
            f"{type(self).__name__}.step(): the update left NaN or inf in the policy's parameters "
            f"(update {self.num_steps}; {losses}). Lower the learning rate, set max_grad_norm, or "
            "check the env's rewards and observations, then resume from the last checkpoint"
        )

    @abstractmethod
    def step(self) -> dict[str, float]:
        """Update the policy from the rollout in the buffer."""

    # -- state ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training exactly: policy (with normalizers),
        optimizer, reward scaler, AMP scaler, counters, partial episodes, the last
        observation (and a recurrent policy's live states), the env's state (when it has
        ``state_dict``) and the RNG states.

        Only tensors, numbers, strings and containers: loadable with ``weights_only=True``.
        """
        state: dict[str, Any] = {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "reward_scaler": self.reward_scaler.state_dict(),
            "grad_scaler": self.grad_scaler.state_dict(),
            "counters": {"env_steps": self.env_steps, "num_collects": self.num_collects, "num_steps": self.num_steps},
            **self.members.state_dict(),
            **self.rollout.state_dict(),
            "rng": {"cpu": torch.get_rng_state()},
        }
        if self.device.type == "cuda":
            state["rng"]["cuda"] = torch.cuda.get_rng_state(self.device)
        if callable(getattr(self.env, "state_dict", None)):
            state["env"] = self.env.state_dict()
        # A snapshot: module and optimizer state dicts alias the live tensors, which the
        # next step() would change under the caller.
        return copy.deepcopy(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output into this (freshly built) algorithm."""
        self.policy.load_state_dict(state["policy"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        # The LR follows the restored optimizer: a schedule or the KL-adaptive rule moved
        # it away from the initial LR (a tensor LR: one sync, at load). A loaded param
        # group holds a copy of the saved LR tensor: the groups get back the live one.
        lr = float(self.optimizer.param_groups[0]["lr"])
        if self._lr_applied is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = self._lr_applied
        self._set_lr(lr)
        self.grad_scaler.load_state_dict(state["grad_scaler"])
        self.members.load_state_dict(state)
        for name in self.hparams.names:
            self._hparams_changed(name)
        counters = state["counters"]
        self.env_steps = counters["env_steps"]
        self.num_collects = counters["num_collects"]
        self.num_steps = counters["num_steps"]
        if self.buffer is None:
            self.validate()
        # The rollout itself is not saved: a step() must follow a new collect().
        self._buffered = False
        if envs_start_afresh(state, self.num_envs, self.world_size):  # the shared state loads, the envs
            self._load_per_rank_state_fresh(state)  # start afresh
            return
        self.reward_scaler.load_state_dict(state["reward_scaler"])
        self.rollout.load_state_dict(state)
        if "env" in state and callable(getattr(self.env, "load_state_dict", None)):
            self.env.load_state_dict(state["env"])
            self._force_reset = self.num_collects == 0
        else:
            # The env cannot restore its simulator state: start the next collect from
            # fresh resets rather than from observations the env no longer matches.
            self._force_reset = True
        torch.set_rng_state(state["rng"]["cpu"])
        if "cuda" in state["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)

    def _load_per_rank_state_fresh(self, state: dict[str, Any]) -> None:
        """Resume under torchrun (or with another number of envs): the shared state was
        loaded; per-rank (per-env) state restarts.

        A checkpoint holds rank 0's envs, partial episodes and RNG. Other ranks (and any
        number of ranks) cannot continue those, so every rank resets its envs, zeroes its
        running returns and reseeds from ``(seed, rank, collects)``: the run continues
        with the same policy, optimizer, normalizer statistics, schedules and counters,
        but not bit-identically to an uninterrupted run.
        """
        scaler_state = {k: v for k, v in state["reward_scaler"].items() if k != "returns"}
        self.reward_scaler.load_state_dict(scaler_state, strict=False)
        self.reward_scaler.reset()
        self.rollout.restart_episodes()
        self._force_reset = True
        seed = self.config.seed if self.config.seed is not None else 0
        torch.manual_seed(seed + 1_000_003 * (self.num_collects + 1) + self.rank)
