"""What every rlx algorithm shares: env, policy, buffer, collect, GAE and state.

The subclass (PPO, NPG) supplies :meth:`Algorithm.step`. Everything here follows the
hot-loop rules of design.md §8: ``collect()``'s T loop writes into preallocated buffer
views and never syncs with the host; its statistics are reduced on the device and leave
it in ONE transfer at the end of the call.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor

from rlx import distributed as rdist
from rlx._sync import allowed_sync
from rlx.buffer import ACTIONS, ADVANTAGES, FINAL_VALUES, LOGP, RETURNS, VALUES, make_buffer
from rlx.env import (
    FINAL_OBS,
    OBS,
    REWARDS,
    TERMINATED,
    TRUNCATED,
    EnvOutputError,
    check_devices,
    check_env_limits,
    check_obs,
    check_step_output,
    env_is_graph_safe,
)
from rlx.gae import generalized_advantage_estimate_
from rlx.normalization import RewardScaler
from rlx.policy import Policy, flatten_time
from rlx.schedulers import Schedule

if TYPE_CHECKING:
    from rlx.config import CommonConfig
    from rlx.env import EnvFactory

__all__ = ["Algorithm", "VALUE_PASS_ROWS", "COLLECT_GRAPH_WARMUPS"]

#: Rows per forward pass on a CPU, for the actor in collect's T loop and the value passes
#: after it: the fastest per row for 64- to 256-wide MLPs on this project's CPU (larger
#: passes spill out of cache and cost up to 3x more per row). CUDA runs one pass of up to
#: 2**20 rows.
VALUE_PASS_ROWS = 2048

#: With ``cudagraphs=True`` and a graph-safe env, the first collects of each mode run
#: eagerly on a side stream (lazy CUDA init, allocator and cuBLAS warm-up, as capture
#: requires); the next one captures the T loop, and every later one replays it.
COLLECT_GRAPH_WARMUPS = 2

Obs = Tensor | TensorDictBase


def _float_leaves(x: Obs) -> list[tuple[str, Tensor]]:
    if isinstance(x, Tensor):
        return [(OBS, x)] if x.is_floating_point() else []
    return [
        (f"{OBS}.{'.'.join(k) if isinstance(k, tuple) else k}", v)
        for k, v in x.items(include_nested=True, leaves_only=True)
        if v.is_floating_point()
    ]


def _env_description(env_cls: Any) -> dict[str, Any]:
    """The env class or factory with its bound arguments, alike on every rank that built
    the same env: a value that is not plain data is named by its type (a repr would hold
    a per-process address)."""

    def plain(kwargs: dict[str, Any]) -> dict[str, Any]:
        return {k: v if isinstance(v, (str, int, float, bool, type(None))) else type(v).__qualname__ for k, v in kwargs.items()}

    if isinstance(env_cls, functools.partial):
        kwargs, env_cls = plain(env_cls.keywords), env_cls.func
    else:
        kwargs = plain(getattr(env_cls, "factory_kwargs", None) or {})
    name = getattr(env_cls, "__qualname__", None) or getattr(env_cls, "__name__", type(env_cls).__qualname__)
    return {"env": f"{getattr(env_cls, '__module__', '')}:{name}", "env_kwargs": kwargs}


def _to_plain(x: Obs) -> Tensor | dict[str, Any]:
    """A tensor, or a TensorDict as nested dicts of tensors (safe for weights_only loads)."""
    return x.clone() if isinstance(x, Tensor) else x.to_dict()


def _load_into(dst: Obs, src: Tensor | dict[str, Any]) -> None:
    if isinstance(dst, Tensor):
        dst.copy_(src)
    else:
        dst.copy_(TensorDict(src, batch_size=dst.batch_size, device=dst.device))


class Algorithm(ABC):
    """Base of rlx's on-policy algorithms (see the subclasses for the update).

    Args:
        env_cls: The env class (or factory) built as ``env_cls(num_envs, horizon,
            device=device)``.
        config: The algorithm's config.

    Attributes:
        env: The env instance.
        policy: The :class:`~rlx.policy.Policy`.
        buffer: The ``[B, T+1]`` rollout buffer (see :mod:`rlx.buffer`).
        optimizer: Optimizer over the policy's parameters.
        env_steps: Env transitions collected so far (``B * T`` per collect).
    """

    #: The policy class the algorithm builds.
    policy_cls: type[Policy] = Policy

    def __init__(self, env_cls: EnvFactory, config: CommonConfig) -> None:
        from rlx.config import config_to_dict, resolve_device

        self.config = config
        self.env_cls = env_cls
        self.rank, self.world_size = rdist.rank(), rdist.world_size()
        self.device = resolve_device(config.device)
        if self.world_size > 1 and self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", rdist.local_rank())  # one GPU per rank
        if self.world_size > 1:
            # Refuse ranks that disagree before any collective depends on their shapes.
            rdist.check_same_on_all_ranks(
                {"algorithm": type(self).__name__, "env": _env_description(env_cls), **config_to_dict(config)},
                "the algorithm config",
            )
        if config.seed is not None:
            torch.manual_seed(config.seed + self.rank)  # one seed stream per rank
        self.num_envs, self.horizon = config.num_envs, config.horizon
        check_env_limits(env_cls, self.num_envs, self.horizon)
        self.env = env_cls(self.num_envs, self.horizon, device=self.device)
        self.policy = self.policy_cls(
            self.env.observation_spec,
            self.env.action_spec,
            model=config.model,
            model_cls=config.model_cls,
            model_config=config.model_config,
            distribution_cls=config.distribution_cls,
            normalize_obs=config.normalize_obs,
            device=self.device,
        )
        if self.device.type == "cpu":
            self.policy.max_rows_per_pass = VALUE_PASS_ROWS
        # With separate heads, collect's T loop runs only the actor and every value is
        # computed in batched passes after it.
        self._values_after_loop = self.policy.separate_heads and not self.policy.recurrent
        # What collect calls to act and to value observations (PPO may compile them).
        self._sample_actions = self.policy.sample_actions
        self._values = self.policy.value
        # cudagraphs=True with a graph-safe env: collect's T loop is captured once per
        # mode (sampling, deterministic) and replayed (see _graphed_collect_steps).
        self._collect_graphed = (
            bool(getattr(config, "cudagraphs", False))
            and self.device.type == "cuda"
            and env_is_graph_safe(self.env)
            and not self.policy.recurrent
        )
        self._collect_graphs: dict[bool, torch.cuda.CUDAGraph] = {}
        self._collect_warmups: dict[bool, int] = {}
        if self.world_size > 1:
            rdist.check_same_on_all_ranks(
                {n: list(p.shape) for n, p in self.policy.named_parameters()}, "the model's parameters"
            )
            rdist.broadcast_module_(self.policy)  # identical start on every rank
        self.optimizer = config.optimizer_cls(self._optimized_parameters(), **self._optimizer_kwargs())
        self.lr_schedule = Schedule(
            config.lr_schedule, config.lr_schedule_kind, initial=config.optimizer_kwargs["lr"], name="lr_schedule"
        )
        self._set_lr(self.lr_schedule.value(0))
        self.reward_scaler = RewardScaler(self.num_envs, config.gamma, device=self.device)
        self.amp_dtype = torch.float16 if self.device.type == "cuda" else torch.bfloat16
        self.grad_scaler = torch.amp.GradScaler(
            self.device.type, enabled=config.enable_amp and self.amp_dtype == torch.float16
        )
        self.env_steps = 0
        self.num_collects = 0
        self.num_steps = 0
        self.buffer: TensorDict | None = None
        self._buffered = False
        self._force_reset = True  # the first collect (and one after a lossy resume) resets
        # Per-env partial-episode return and length carried across collects (float64:
        # long infinite-horizon episodes must not lose precision).
        self._episode_return = torch.zeros(self.num_envs, dtype=torch.float64, device=self.device)
        self._episode_length = torch.zeros(self.num_envs, dtype=torch.float64, device=self.device)

    # -- construction helpers ----------------------------------------------------------

    def _optimized_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters the first-order optimizer updates (all of the model's)."""
        return list(self.policy.model.parameters())

    def _optimizer_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.config.optimizer_kwargs)
        if getattr(self.config, "cudagraphs", False):
            # A graph-captured step: Adam keeps its step counts on the device, and the
            # LR is a tensor that _set_lr updates in place.
            return {**kwargs, "capturable": True, "lr": torch.tensor(float(kwargs["lr"]), device=self.device)}
        # Fused Adam is the fastest Adam on both devices: one kernel per parameter, where
        # the default foreach Adam runs a dozen small ops per tensor list (on a CPU, for a
        # 64x64 model, 440 vs 116 us a step). On CUDA it also takes the GradScaler's
        # found-inf flag on the device, so an AMP step never syncs.
        if (
            self.config.optimizer_cls in (torch.optim.Adam, torch.optim.AdamW)
            and not {"fused", "foreach", "capturable", "differentiable"} & kwargs.keys()
        ):
            kwargs["fused"] = True
        return kwargs

    def _set_lr(self, lr: float) -> None:
        self._lr_value = float(lr)  # host mirror: reading a tensor LR would sync
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    @property
    def lr(self) -> float:
        """The current learning rate."""
        return self._lr_value

    def validate(self) -> None:
        """Check the env and the policy against the specs, then allocate the buffer.

        Resets the env, acts once, steps once and checks every output's keys, shapes and
        dtypes. Called by ``build()``; ``collect()`` calls it if it has not run.

        Raises:
            EnvOutputError: naming the offending key, its shape and the expected one.
        """
        env_name = type(self.env).__name__
        B = self.num_envs
        obs_spec, action_spec = self.env.observation_spec, self.env.action_spec
        obs = self.env.reset()
        check_obs(obs, obs_spec, B, where=f"{env_name}.reset()")
        check_devices(obs, self.device, where=f"{env_name}.reset()")
        with torch.no_grad():
            params, values = self._probe_model(obs)
        expected = (B, sum(self.policy.num_params))
        if tuple(params.shape) != expected:
            raise EnvOutputError(
                f"model output 'dist_params' has shape {list(params.shape)}, expected {list(expected)} "
                f"for {self.policy.distribution_cls.__name__} over {type(action_spec).__name__}"
                f"{list(action_spec.shape)}"
            )
        if tuple(values.shape) != (B, 1):
            raise EnvOutputError(f"model output 'values' has shape {list(values.shape)}, expected {[B, 1]}")
        act = self._probe_act(obs)
        expected_actions = (B, *action_spec.shape)
        if tuple(act.actions.shape) != expected_actions or act.actions.dtype != action_spec.dtype:
            raise EnvOutputError(
                f"policy 'actions' have shape {list(act.actions.shape)} and dtype {act.actions.dtype}, "
                f"expected {list(expected_actions)} and {action_spec.dtype}"
            )
        if tuple(act.logp.shape) != (B, 1):
            raise EnvOutputError(f"policy 'logp' has shape {list(act.logp.shape)}, expected {[B, 1]}")
        if not action_spec.is_in(act.env_actions):
            raise EnvOutputError(f"policy env actions fall outside {env_name}.action_spec")
        out = self.env.step(act.env_actions)
        check_step_output(out, obs_spec, B, where=f"{env_name}.step()")
        check_devices(out, self.device, where=f"{env_name}.step()")
        self._env_terminates = TERMINATED in out.keys()
        self._env_truncates = TRUNCATED in out.keys()
        if self.buffer is None:
            self._allocate(obs_spec, action_spec)

    def _probe_model(self, obs: Obs) -> tuple[Tensor, Tensor]:
        """The model's ``(dist_params [B, P], values [B, 1])`` on reset observations."""
        return self.policy.model(self.policy.normalize(obs))

    def _probe_act(self, obs: Obs) -> Any:
        """One :class:`~rlx.policy.ActOutput` on reset observations."""
        return self.policy.act(obs)

    def _allocate(self, obs_spec: Any, action_spec: Any) -> None:
        B, T = self.num_envs, self.horizon
        self.buffer = buf = make_buffer(
            obs_spec, action_spec, B, T, device=self.device, with_final_obs=self._env_truncates
        )

        def cols(key: str) -> list[Any]:
            entry = buf.get(key)
            return [entry[:, t] for t in range(T + 1)]

        # Views of every column, made once: the T loop only copies into them.
        self._obs_cols = cols(OBS)
        self._action_cols, self._logp_cols, self._value_cols = cols(ACTIONS), cols(LOGP), cols(VALUES)
        self._reward_cols = cols(REWARDS)
        self._terminated_cols, self._truncated_cols = cols(TERMINATED), cols(TRUNCATED)
        self._final_obs_cols = cols(FINAL_OBS) if self._env_truncates else None
        self._scaled_rewards = torch.zeros(B, T, 1, device=self.device)
        self._time_index = torch.arange(T, device=self.device)
        # Truncated steps valued per collect without a fallback: every sub-env can reach
        # its time limit at most ceil(T / limit) times in T steps (once, for an env that
        # does not declare max_episode_steps); more falls back to valuing every step.
        limit = getattr(self.env, "max_episode_steps", None)
        per_env = -(-T // limit) if isinstance(limit, int) and limit > 0 else 1
        self._set_truncation_capacity(B * per_env)

    def _set_truncation_capacity(self, capacity: int) -> None:
        """Value at most ``capacity`` truncated steps per collect without a fallback."""
        self._truncation_capacity = min(self.num_envs * self.horizon, max(1, capacity))
        self._truncation_ranks = torch.arange(1, self._truncation_capacity + 1, device=self.device)

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
        if self.buffer is None:
            self.validate()
        B, T = self.num_envs, self.horizon
        hper = self.config.horizons_per_env_reset
        reset_all = self._force_reset or (hper > 0 and self.num_collects % hper == 0)
        self._force_reset = False
        obs_cols = self._obs_cols
        if reset_all:
            obs_cols[0].copy_(self.env.reset(config=env_config))
            self._episode_return.zero_()
            self._episode_length.zero_()
            self.reward_scaler.returns.zero_()
            if self.num_collects == 0:
                # Start the running obs statistics from the first observations, so the
                # first update does not see raw observations as if normalized.
                self.policy.update_obs_stats(obs_cols[0])
        else:
            obs_cols[0].copy_(obs_cols[T])
        self._begin_collect(reset_all)
        if self._collect_graphed:
            self._graphed_collect_steps(deterministic)
        else:
            self._collect_steps(deterministic)
        truncates = self._env_truncates
        buf = self.buffer
        if self._values_after_loop:
            # V of every column, the bootstrap column T included, in batched passes: with
            # separate heads the T loop ran only the actor.
            buf.get(VALUES).copy_(self._batched_values(self._values, buf.get(OBS)))
        else:
            self._value_cols[T].copy_(self._bootstrap_values(obs_cols[T]))
        overflow = torch.zeros((), dtype=torch.bool, device=self.device)
        if truncates:
            # V(final_obs) where the episode was truncated, else 0 (the bootstrap of
            # design.md §5): only the truncated rows are valued, up to a fixed capacity.
            final_values, overflow = self._truncated_final_values()
            buf.get(FINAL_VALUES)[:, :T] = final_values

        rewards = buf.get(REWARDS)[:, :T]  # [B, T, 1]
        dones = buf.get(TERMINATED)[:, :T] | buf.get(TRUNCATED)[:, :T]  # [B, T, 1]
        if self.config.normalize_rewards:
            self.reward_scaler.update(rewards, dones)
        stats = self._reduce_collect_stats(self._collect_stats_tensor(rewards, dones, reset_all))
        stats = torch.cat([stats, overflow.double()[None]])  # this rank's own flag, not reduced
        with allowed_sync():
            values = stats.tolist()  # SYNC: the one transfer of collect()
        if values[-1]:
            # More truncations than the capacity (an env that truncates for other reasons
            # than its time limit): value every step, as a plain pass would.
            buf.get(FINAL_VALUES)[:, :T] = self._all_final_values()
        values = values[:-1]
        if values[-2] < 1.0 or values[-1] < 1.0:
            self._raise_nonfinite()

        self.num_collects += 1
        self.env_steps += B * T * self.world_size  # every rank's transitions
        self._buffered = True
        count = values[8]
        return {
            "returns/min": values[0],
            "returns/max": values[1],
            "returns/mean": values[2],
            "returns/std": values[3],
            "rewards/min": values[4],
            "rewards/max": values[5],
            "rewards/mean": values[6],
            "rewards/std": values[7],
            "episodes/count": count,
            "episodes/return_mean": values[9] / count if count else math.nan,
            "episodes/length_mean": values[10] / count if count else math.nan,
            "env/resets": count + (B * self.world_size if reset_all else 0),
            "env/steps": float(B * T * self.world_size),
            "profiling/collect_ms": 1e3 * (time.perf_counter() - start),
        }

    def _collect_steps(self, deterministic: bool) -> None:
        """The T loop: act, step the env, and write every column into the buffer.

        Column 0's observations are in place when it starts. Everything it touches lives
        at fixed addresses (the buffer's column views, the policy's parameters and
        normalizer statistics, a graph-safe env's state), which is what lets
        :meth:`_graphed_collect_steps` replay it as one CUDA graph.
        """
        obs_cols = self._obs_cols
        T = self.horizon
        terminates, truncates = self._env_terminates, self._env_truncates
        for t in range(T):
            act = self._act(t, obs_cols[t], deterministic)
            # Into the buffer before the env sees them: an env may modify its actions in
            # place (a clamp_), and the buffer must keep what logp was computed for.
            self._action_cols[t].copy_(act.actions)
            self._logp_cols[t].copy_(act.logp)
            if not self._values_after_loop:
                self._value_cols[t].copy_(act.values)
            out = self.env.step(act.env_actions)
            self._reward_cols[t].copy_(out.get(REWARDS))
            if terminates:
                self._terminated_cols[t].copy_(out.get(TERMINATED))
            elif TERMINATED in out.keys():
                raise EnvOutputError(
                    f"{type(self.env).__name__}.step() returned 'terminated' at step {t} but not "
                    "when validated; an env must return the same keys on every step"
                )
            if truncates:
                self._truncated_cols[t].copy_(out.get(TRUNCATED))
                self._final_obs_cols[t].copy_(out.get(FINAL_OBS))
            elif TRUNCATED in out.keys():
                raise EnvOutputError(
                    f"{type(self.env).__name__}.step() returned 'truncated' at step {t} but not "
                    "when validated; an env must return the same keys on every step"
                )
            obs_cols[t + 1].copy_(out.get(OBS))

    def _graphed_collect_steps(self, deterministic: bool) -> None:
        """:meth:`_collect_steps` through a CUDA graph, one per mode (sampling or
        deterministic): :data:`COLLECT_GRAPH_WARMUPS` eager warm-ups on a side stream,
        then one capture, then replays.

        A replay launches the T steps' kernels at once, with no Python and no per-kernel
        launch cost. It reads the same tensors the capture did: the buffer columns, the
        policy's parameters and normalizer statistics (every update writes them in
        place), and the env's state, which a graph-safe env also updates in place.
        Random draws replay from the device generator's current state, as eager ones.
        """
        graph = self._collect_graphs.get(deterministic)
        if graph is not None:
            graph.replay()
            return
        stream = torch.cuda.current_stream(self.device)
        warmups = self._collect_warmups.get(deterministic, 0)
        if warmups < COLLECT_GRAPH_WARMUPS:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(stream)
            with torch.cuda.stream(side):
                self._collect_steps(deterministic)
            stream.wait_stream(side)
            self._collect_warmups[deterministic] = warmups + 1
            return
        graph = torch.cuda.CUDAGraph()
        with allowed_sync():  # SYNC: once per mode; capture begins with a device synchronize
            with torch.cuda.graph(graph):
                self._collect_steps(deterministic)
        self._collect_graphs[deterministic] = graph
        graph.replay()  # capture records the kernels without running them

    # Hooks of collect(), overridden by the recurrent algorithm: each runs inside the T
    # loop or right after it, so none may sync with the host.

    def _begin_collect(self, reset_all: bool) -> None:
        """Called after column 0's observations are in place, before the T loop."""

    def _act(self, t: int, obs: Obs, deterministic: bool) -> Any:
        """Act at step ``t`` on the ``[B, *obs]`` observations of column ``t``."""
        if self._values_after_loop:
            return self._sample_actions(obs, deterministic=deterministic)
        return self.policy.act(obs, deterministic=deterministic)

    def _value_pass_rows(self) -> int:
        """Rows per batched value pass: the policy's ``max_rows_per_pass``, else 2**20."""
        return self.policy.max_rows_per_pass or 1 << 20

    def _batched_values(self, value_fn: Any, *columns: Obs) -> Tensor:
        """``value_fn`` over ``[B, C, ...]`` inputs, giving ``[B, C, 1]``, in passes of whole
        columns of at most :meth:`_value_pass_rows` rows (one pass over ``B * C`` rows
        spills out of a CPU's cache). ``value_fn`` takes the inputs flattened to
        ``[B * c, ...]`` and returns ``[B * c, 1]``."""
        B, C = columns[0].shape[:2]
        values = torch.empty(B, C, 1, device=self.device)
        step = max(1, self._value_pass_rows() // B)
        for lo in range(0, C, step):
            hi = min(lo + step, C)
            values[:, lo:hi] = value_fn(*(flatten_time(x[:, lo:hi]) for x in columns)).view(B, hi - lo, 1)
        return values

    def _bootstrap_values(self, obs: Obs) -> Tensor:
        """``V`` of column ``T``'s observations, ``[B, 1]``."""
        return self.policy.value(obs)

    def _final_value_inputs(self) -> tuple[Any, tuple[Obs, ...]]:
        """``(value_fn, columns)`` that value the rollout's final observations: ``value_fn``
        maps flat ``[n, ...]`` rows of the ``[B, T, ...]`` columns to ``[n, 1]`` values."""
        return self._values, (self.buffer.get(FINAL_OBS)[:, : self.horizon],)

    def _all_final_values(self) -> Tensor:
        """``[B, T, 1]``: ``V(final_obs)`` on every step in batched passes, 0 where the step
        did not truncate."""
        value_fn, columns = self._final_value_inputs()
        truncated = self.buffer.get(TRUNCATED)[:, : self.horizon]
        return self._batched_values(value_fn, *columns).masked_fill(~truncated, 0.0)

    def _truncated_final_values(self) -> tuple[Tensor, Tensor]:
        """``V(final_obs)`` on the truncated steps only, without a host sync.

        Truncations are rare (a time limit ends an episode once every few hundred steps),
        so valuing every step's final observation wastes most of a pass over ``B * T``
        rows (10-22% of a CartPole collect on a CPU). The ``k``-th truncated step in
        flat order is found with a ``searchsorted`` on the running count of truncations,
        and only the first :attr:`_truncation_capacity` of them are gathered and valued.

        Returns:
            ``[B, T, 1]`` values (0 where the step did not truncate) and a ``[]`` bool,
            True when there were more truncated steps than the capacity: their values are
            then missing, and :meth:`collect` recomputes every row after its sync.
        """
        B, T = self.num_envs, self.horizon
        N, K = B * T, self._truncation_capacity
        if K >= N:
            return self._all_final_values(), torch.zeros((), dtype=torch.bool, device=self.device)
        value_fn, columns = self._final_value_inputs()
        truncated = self.buffer.get(TRUNCATED)[:, :T].reshape(N)  # [B, T, 1] -> [N], flat order b * T + t
        count = torch.cumsum(truncated, 0)  # [N] truncations up to each row
        rows = torch.searchsorted(count, self._truncation_ranks).clamp_(max=N - 1)  # [K] flat row of each rank
        env_idx, step_idx = rows // T, rows % T  # unused slots point at a valid row and are dropped below
        chunk = self._value_pass_rows()
        slot_values = torch.zeros(K + 1, 1, device=self.device)  # slot K: the 0 of every other step
        for lo in range(0, K, chunk):
            e, t = env_idx[lo : lo + chunk], step_idx[lo : lo + chunk]
            slot_values[lo : lo + e.shape[0]] = value_fn(*(x[e, t] for x in columns)).float()
        slot = torch.where(truncated & (count <= K), count - 1, K)  # [N] each row's slot, K if none
        return slot_values.index_select(0, slot).view(B, T, 1), count[-1] > K

    def _collect_stats_tensor(self, rewards: Tensor, dones: Tensor, reset_all: bool) -> Tensor:
        """Reduce the collect statistics on the device into one float64 vector.

        Episode returns and lengths are found without a loop: with ``S`` the running
        sum of rewards (including the return carried in from earlier collects), an
        episode ending at ``t`` whose previous end in this rollout was at ``p`` has
        return ``S_t - S_p`` (``S_t`` when there was none).
        """
        B, T = self.num_envs, self.horizon
        r = rewards.squeeze(-1).double()  # [B, T]
        d = dones.squeeze(-1)  # [B, T]
        t_idx = self._time_index
        running = self._episode_return.unsqueeze(1) + torch.cumsum(r, dim=1)  # [B, T]
        last_end = torch.cummax(torch.where(d, t_idx, -1), dim=1).values  # last end <= t
        prev_end = torch.cat([last_end.new_full((B, 1), -1), last_end[:, :-1]], dim=1)  # < t
        has_prev = prev_end >= 0
        prev_running = torch.where(has_prev, running.gather(1, prev_end.clamp(min=0)), 0.0)
        episode_return = running - prev_running  # [B, T], meaningful where d
        episode_length = torch.where(has_prev, t_idx - prev_end, t_idx + 1 + self._episode_length.unsqueeze(1))
        d_float = d.double()
        # Carry the unfinished episodes into the next collect.
        final_end = last_end[:, -1]
        ended = final_end >= 0
        end_running = running.gather(1, final_end.clamp(min=0).unsqueeze(1)).squeeze(1)
        self._episode_return.copy_(torch.where(ended, running[:, -1] - end_running, running[:, -1]))
        self._episode_length.copy_(torch.where(ended, (T - 1 - final_end).double(), self._episode_length + T))

        horizon_returns = r.sum(dim=1)  # [B]
        rewards_std, rewards_mean = torch.std_mean(r, correction=0)
        returns_std, returns_mean = torch.std_mean(horizon_returns, correction=0)
        rewards_finite = torch.isfinite(rewards).all()
        obs_finite = torch.ones((), dtype=torch.bool, device=self.device)
        for _, leaf in _float_leaves(self.buffer.get(OBS)):
            obs_finite = obs_finite & torch.isfinite(leaf).all()
        for _, leaf in self._truncated_final_obs_leaves():
            obs_finite = obs_finite & torch.isfinite(leaf).all()
        return torch.stack(
            [
                horizon_returns.min(),
                horizon_returns.max(),
                returns_mean,
                returns_std,
                r.min(),
                r.max(),
                rewards_mean,
                rewards_std,
                d_float.sum(),
                (episode_return * d_float).sum(),
                (episode_length * d_float).sum(),
                rewards_finite.double(),
                obs_finite.double(),
            ]
        )

    def _reduce_collect_stats(self, stats: Tensor) -> Tensor:
        """Combine per-rank collect statistics into global ones (ranks have equal B)."""
        if self.world_size == 1:
            return stats
        # Means and second moments average; counts and sums add; extremes take max/min.
        moments = torch.stack([stats[2], stats[3].square() + stats[2].square(), stats[6], stats[7].square() + stats[6].square()])
        rdist.all_reduce_(moments, "mean")
        sums = rdist.all_reduce_(stats[8:11].clone(), "sum")
        highs = rdist.all_reduce_(torch.stack([stats[1], -stats[0], stats[5], -stats[4], -stats[11], -stats[12]]), "max")
        return torch.stack([
            -highs[1], highs[0], moments[0], (moments[1] - moments[0].square()).clamp(min=0).sqrt(),
            -highs[3], highs[2], moments[2], (moments[3] - moments[2].square()).clamp(min=0).sqrt(),
            sums[0], sums[1], sums[2], -highs[4], -highs[5],
        ])

    def _truncated_final_obs_leaves(self) -> list[tuple[str, Tensor]]:
        """``final_obs``'s float leaves ``[B, T, ...]``, zeroed where the step did not
        truncate: only truncated steps' final observations are valued (the bootstrap)."""
        if not self._env_truncates:
            return []
        B, T = self.num_envs, self.horizon
        truncated = self.buffer.get(TRUNCATED)[:, :T]  # [B, T, 1]
        leaves = []
        for name, leaf in _float_leaves(self.buffer.get(FINAL_OBS)[:, :T]):
            mask = truncated.view(B, T, *([1] * (leaf.dim() - 2)))
            leaves.append((FINAL_OBS + name[len(OBS) :], leaf.masked_fill(~mask, 0.0)))
        return leaves

    def _raise_nonfinite(self) -> None:
        """Name the first non-finite reward or observation (an error path: syncs freely)."""
        T = self.horizon
        checks = [(REWARDS, self.buffer.get(REWARDS)[:, :T])]
        checks += [(name, leaf) for name, leaf in _float_leaves(self.buffer.get(OBS))]
        checks += self._truncated_final_obs_leaves()
        for name, x in checks:
            bad = ~torch.isfinite(x)
            if bad.any():
                env_idx, step_idx = (int(i) for i in bad.nonzero()[0][:2])
                value = x[env_idx, step_idx].flatten()[bad[env_idx, step_idx].flatten()][0].item()
                if name.startswith(OBS):  # column t holds the observation after step t-1
                    where = "reset observation" if step_idx == 0 else f"step {step_idx - 1}"
                else:
                    where = f"step {step_idx}"
                raise ValueError(
                    f"non-finite value {value} in '{name}' from {type(self.env).__name__} "
                    f"at env {env_idx}, {where} of this collect"
                )
        raise ValueError("non-finite value in the rollout")  # pragma: no cover

    # -- shared parts of step ------------------------------------------------------------

    def _optimizer_step(self, params: list[torch.nn.Parameter]) -> None:
        """Clip (after unscaling AMP gradients), step the optimizer, clear gradients."""
        scaler = self.grad_scaler
        rdist.all_reduce_grads_(params)  # data parallel: the gradient of the global batch
        if self.config.max_grad_norm is not None:
            scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm, foreach=True)
        scaler.step(self.optimizer)
        scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def _check_buffered(self) -> None:
        if not self._buffered:
            raise RuntimeError(
                f"{type(self).__name__}.step() called with no fresh rollout: call collect() before step()"
            )

    def _normalized_advantages(self, advantages: Tensor) -> Tensor:
        """``(A - mean) / std`` with the mean and std of the batch on every rank."""
        if self.world_size == 1:
            std, mean = torch.std_mean(advantages, correction=0)
        else:
            a = advantages.double()
            moments = rdist.all_reduce_(torch.stack([a.mean(), a.square().mean()]), "mean")
            mean = moments[0]
            std = (moments[1] - mean.square()).clamp(min=0).sqrt()
        return ((advantages - mean) / (std + 1e-8)).to(advantages.dtype)

    def _compute_advantages(self) -> None:
        """GAE over the buffer, in place into ``advantages`` and ``returns`` (float32)."""
        T = self.horizon
        buf = self.buffer
        rewards = buf.get(REWARDS)[:, :T]
        if self.config.normalize_rewards:
            rewards = self.reward_scaler.scale_rewards(rewards, out=self._scaled_rewards)
        generalized_advantage_estimate_(
            rewards,
            buf.get(VALUES),
            buf.get(TERMINATED)[:, :T],
            buf.get(TRUNCATED)[:, :T],
            buf.get(FINAL_VALUES)[:, :T],
            gamma=self.config.gamma,
            gae_lambda=self.config.gae_lambda,
            advantages=buf.get(ADVANTAGES)[:, :T],
            returns=buf.get(RETURNS)[:, :T],
        )

    def _flat_batch(self) -> dict[str, Obs]:
        """The ``N = B * T`` samples of the rollout as flat ``[N, ...]`` entries."""
        T = self.horizon
        return {key: flatten_time(self.buffer.get(key)[:, :T]) for key in (OBS, ACTIONS, LOGP, VALUES, ADVANTAGES, RETURNS)}

    def _finish_step(self) -> None:
        """Bookkeeping after an update: obs statistics, schedules, flags."""
        T = self.horizon
        self.policy.update_obs_stats(flatten_time(self.buffer.get(OBS)[:, 1 : T + 1]))
        self._set_lr(self._scheduled_lr())
        self._buffered = False
        self.num_steps += 1

    def _scheduled_lr(self) -> float:
        if self.config.lr_schedule is None:
            return self.lr
        return self.lr_schedule.value(self.env_steps)

    def _params_finite(self) -> Tensor:
        """``[]`` float32, 1 when every policy parameter is finite, else 0: stays on the
        device for step()'s one transfer (a NaN or inf entry makes the total norm non-finite)."""
        params = [p.detach() for p in self.policy.model.parameters()]
        total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6
        if total_norm is not None:
            norm = total_norm(params, error_if_nonfinite=False)
        else:
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p) for p in params]))
        return torch.isfinite(norm).to(torch.float32)

    def _check_params_finite(self, flag: float, stats: dict[str, float]) -> None:
        """Raise when :meth:`_params_finite` (already on the host as ``flag``) said no."""
        if flag >= 1.0:
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

    def _load_per_rank_state_fresh(self, state: dict[str, Any]) -> None:
        """Resume under torchrun: the shared state was loaded; per-rank state restarts.

        A checkpoint holds rank 0's envs, partial episodes and RNG. Other ranks (and any
        number of ranks) cannot continue those, so every rank resets its envs, zeroes its
        running returns and reseeds from ``(seed, rank, collects)``: the run continues
        with the same policy, optimizer, normalizer statistics, schedules and counters,
        but not bit-identically to an uninterrupted run.
        """
        scaler_state = {k: v for k, v in state["reward_scaler"].items() if k != "returns"}
        self.reward_scaler.load_state_dict(scaler_state, strict=False)
        self.reward_scaler.returns.zero_()
        self._episode_return.zero_()
        self._episode_length.zero_()
        self._force_reset = True
        self._buffered = False
        seed = self.config.seed if self.config.seed is not None else 0
        torch.manual_seed(seed + 1_000_003 * (self.num_collects + 1) + self.rank)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training exactly: policy (with normalizers),
        optimizer, reward scaler, AMP scaler, counters, partial episodes, the last
        observation, the env's state (when it has ``state_dict``) and the RNG states.

        Only tensors, numbers, strings and containers: loadable with ``weights_only=True``.
        """
        state: dict[str, Any] = {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "reward_scaler": self.reward_scaler.state_dict(),
            "grad_scaler": self.grad_scaler.state_dict(),
            "counters": {
                "env_steps": self.env_steps,
                "num_collects": self.num_collects,
                "num_steps": self.num_steps,
            },
            "episode_return": self._episode_return.clone(),
            "episode_length": self._episode_length.clone(),
            "last_obs": _to_plain(self._obs_cols[self.horizon]) if self.buffer is not None else None,
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
        self.optimizer.load_state_dict(state["optimizer"])
        # The host mirror of the LR follows the restored optimizer: a schedule or the
        # KL-adaptive rule moved it away from the initial LR (a tensor LR: one sync, at load).
        self._lr_value = float(self.optimizer.param_groups[0]["lr"])
        self.grad_scaler.load_state_dict(state["grad_scaler"])
        counters = state["counters"]
        self.env_steps = counters["env_steps"]
        self.num_collects = counters["num_collects"]
        self.num_steps = counters["num_steps"]
        if self.buffer is None:
            self.validate()
        if self.world_size > 1:
            self._load_per_rank_state_fresh(state)
            return
        self.reward_scaler.load_state_dict(state["reward_scaler"])
        self._episode_return.copy_(state["episode_return"])
        self._episode_length.copy_(state["episode_length"])
        if state.get("last_obs") is not None:
            _load_into(self._obs_cols[self.horizon], state["last_obs"])
        if "env" in state and callable(getattr(self.env, "load_state_dict", None)):
            self.env.load_state_dict(state["env"])
            self._force_reset = self.num_collects == 0
        else:
            # The env cannot restore its simulator state: start the next collect from
            # fresh resets rather than from observations the env no longer matches.
            self._force_reset = True
        # The rollout itself is not saved: a step() must follow a new collect().
        self._buffered = False
        torch.set_rng_state(state["rng"]["cpu"])
        if "cuda" in state["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
