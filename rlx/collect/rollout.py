"""The rollout: the ``[B, T+1]`` buffer, the T loop that fills it, and what it reports.

:class:`Rollout` owns everything between the env and the update: the buffer (see
:mod:`rlx.collect.buffer`) and its column views, the policy's per-sub-env state, the partial
episodes carried across collects, the truncation bootstrap ``V(final_obs)``, the
collect's device work as one CUDA graph (the T loop and the tail), and the collect
statistics. The algorithm decides when to reset and what to do with the filled buffer;
the rollout never touches the optimizer.

Everything here follows the hot-loop rules of design.md §8: the T loop writes into
views made once at build and never syncs with the host; statistics are built on the
device, by name, and leave it in ONE transfer (the algorithm's ``collect()`` makes it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor

from rlx.collect.buffer import ACTIONS, FINAL_VALUES, HIDDEN, LOGP, RESETS, VALUES, StepColumns, make_buffer
from rlx.core.cuda_graphs import GraphedCall
from rlx.env import (
    FINAL_OBS,
    OBS,
    REWARDS,
    TERMINATED,
    TRUNCATED,
    EnvOutputError,
    check_devices,
    check_obs,
    check_step_output,
)
from rlx.collect.compiled_loop import CompiledTLoop
from rlx.collect.values import RolloutValues, ValueFn
from rlx.collect.episodes import float_leaves, raise_first_nonfinite, rollout_statistics, truncated_final_obs_leaves
from rlx.members.axis import Members
from rlx.policy import Obs, PolicyBase, StepOutput
from rlx.core.compiling import WarmProgram
from rlx.core.normalization import RewardScaler
from rlx.core.stats import Stats

__all__ = ["Rollout", "VALUE_PASS_ROWS", "envs_start_afresh"]

#: Rows per value pass on a CPU (and per actor pass in collect's T loop): the fastest per
#: row for 64- to 256-wide MLPs measured with ``benchmarks/cpu_rows.py`` (larger passes
#: spill out of cache). CUDA runs one pass of up to 2**20 rows.
VALUE_PASS_ROWS = 2048

ActFn = Callable[..., StepOutput]


class Rollout(RolloutValues):
    """The buffer and the T loop of one algorithm.

    Args:
        env: The env instance (``B`` sub-envs).
        policy: The policy that acts.
        horizon: ``T``, env steps per collect.
        device: Where the buffer lives.
        act_fn, value_fn: What the T loop calls to act and to value (defaults: the
            policy's :meth:`~rlx.policy.PolicyBase.act_step` and
            :meth:`~rlx.policy.PolicyBase.value_step`; PPO may pass compiled ones).
        graphed: Capture the T loop and the tail (:meth:`phase`) in one CUDA graph (a
            graph-safe env on CUDA only).
        compile_steps: Run the T loop (acting, the env step, the buffer writes) as
            compiled programs of several steps (:mod:`rlx.collect.compiled_loop`; a
            graph-safe env: it returns the same keys on every step).
    """

    def __init__(
        self,
        env: Any,
        policy: PolicyBase,
        horizon: int,
        device: torch.device,
        *,
        act_fn: ActFn | None = None,
        value_fn: ValueFn | None = None,
        graphed: bool = False,
        members: Members | None = None,
        compile_steps: bool = False,
    ) -> None:
        self.env, self.policy, self.device = env, policy, device
        self.members = members or Members(1, device)  # rows i*B:(i+1)*B for member i
        self.num_envs, self.horizon = env.num_envs, horizon
        self.act_fn = act_fn or policy.act_step
        self.value_fn = value_fn or policy.value_step
        self.graphed = graphed
        #: ``compile_steps``: the compiled T loop, made with the buffer.
        self.compiled_loop: CompiledTLoop | None = None
        self._compile_steps = compile_steps
        #: :meth:`tail_program` compiled, with ``compile_steps``.
        self.tail_warm = WarmProgram(self.tail_program, device=device) if compile_steps else None
        # A warm program: the buffer keeps its shapes, the Python values it reads are checked.
        self._tail = functools.partial(self.tail_warm, None) if self.tail_warm is not None else self.tail_program
        # The program values with the policy's own function (a compiled value_fn inside it
        # would be a program in a program).
        self._tail_value_fn = policy.value_step if compile_steps else self.value_fn
        self.buffer: TensorDict | None = None
        self.terminates = self.truncates = False
        # Per-env partial-episode return and length carried across collects (float64:
        # long infinite-horizon episodes must not lose precision).
        self.episode_return = torch.zeros(self.num_envs, dtype=torch.float64, device=device)
        self.episode_length = torch.zeros(self.num_envs, dtype=torch.float64, device=device)
        # One graph of run()'s phase per mode (sampling, deterministic), made on first use
        # (an algorithm passes the same reward scaler, or none, to every collect).
        self.graphs: dict[bool, GraphedCall[Stats]] = {}
        self._reset_all = False

    # -- build -------------------------------------------------------------------------

    def validate(self) -> None:
        """Reset the env, probe the policy, act once, step once (unless the env lists its
        ``step_output_keys``), check every output against the specs, then allocate the buffer.

        Raises:
            EnvOutputError: naming the offending key, its shape and the expected one.
        """
        env, policy, B = self.env, self.policy, self.num_envs
        name = type(env).__name__
        obs_spec, action_spec = env.observation_spec, env.action_spec
        obs = env.reset()
        check_obs(obs, obs_spec, B, where=f"{name}.reset()")
        check_devices(obs, self.device, where=f"{name}.reset()")
        policy.probe(obs)
        with torch.no_grad():
            resets = torch.ones(B, 1, dtype=torch.bool, device=self.device)
            act = policy.act_step(obs, policy.initial_state(B), resets)
        expected = (B, *action_spec.shape)
        if tuple(act.actions.shape) != expected or act.actions.dtype != action_spec.dtype:
            raise EnvOutputError(
                f"policy 'actions' have shape {list(act.actions.shape)} and dtype {act.actions.dtype}, "
                f"expected {list(expected)} and {action_spec.dtype}"
            )
        if tuple(act.logp.shape) != (B, 1):
            raise EnvOutputError(f"policy 'logp' has shape {list(act.logp.shape)}, expected {[B, 1]}")
        if not action_spec.is_in(act.env_actions):
            raise EnvOutputError(f"policy env actions fall outside {name}.action_spec")
        keys = getattr(env, "step_output_keys", None)  # an adapter that must not step outside training says
        if keys is None:
            out = env.step(act.env_actions)
            check_step_output(out, obs_spec, B, where=f"{name}.step()")
            check_devices(out, self.device, where=f"{name}.step()")
            keys = out.keys()
        self.terminates, self.truncates = TERMINATED in keys, TRUNCATED in keys
        if self.buffer is None:
            self._allocate()

    def _allocate(self) -> None:
        B, T, env = self.num_envs, self.horizon, self.env
        self.buffer = buf = make_buffer(
            env.observation_spec, env.action_spec, B, T, device=self.device, with_final_obs=self.truncates
        )
        with torch.no_grad():
            state = self.policy.initial_state(B)
        # A policy with a state keeps it in the buffer: column t holds the state before
        # step t, and whether step t begins an episode. A stateless one has [B, T+1, 0].
        self.stateful = state[0].numel() > 0
        states = torch.zeros(B, T + 1, *state.shape[1:], dtype=torch.float32, device=self.device)
        resets = torch.zeros(B, T + 1, 1, dtype=torch.bool, device=self.device)
        if self.stateful:
            buf.set(HIDDEN, states)
            buf.set(RESETS, resets)
            states, resets = buf.get(HIDDEN), buf.get(RESETS)
            states[:, T].copy_(state)
            resets[:, T].fill_(True)

        def cols(x: Any) -> list[Any]:
            return [x[:, t] for t in range(T + 1)]

        # Views of every column, made once: the T loop only copies into them.
        self.obs, self.actions, self.logp = cols(buf.get(OBS)), cols(buf.get(ACTIONS)), cols(buf.get(LOGP))
        self.values, self.rewards = cols(buf.get(VALUES)), cols(buf.get(REWARDS))
        self.terminated, self.truncated = cols(buf.get(TERMINATED)), cols(buf.get(TRUNCATED))
        self.final_obs = cols(buf.get(FINAL_OBS)) if self.truncates else None
        # (key, declared at validation): an undeclared key the env returns later is refused.
        self._episode_ends = ((TERMINATED, self.terminates), (TRUNCATED, self.truncates))
        self.states, self.resets = cols(states), cols(resets)
        final = self.final_obs or [None] * (T + 1)
        #: Each step's views, the inputs of :meth:`write_step`.
        self.columns = [
            StepColumns(self.obs[t], self.states[t], self.resets[t], self.actions[t], self.logp[t], self.values[t],
                        self.states[t + 1], self.rewards[t], self.terminated[t], self.truncated[t], final[t],
                        self.obs[t + 1], self.resets[t + 1])
            for t in range(T)
        ]
        self._state_columns, self._no_resets = states, torch.zeros(B * T, 1, dtype=torch.bool, device=self.device)
        self._time_index = torch.arange(T, device=self.device)
        # Truncated steps valued per collect without a fallback: every sub-env can reach
        # its time limit at most ceil(T / limit) times in T steps (once, for an env that
        # does not declare max_episode_steps); more falls back to valuing every step.
        limit = getattr(env, "max_episode_steps", None)
        per_env = -(-T // limit) if isinstance(limit, int) and limit > 0 else 1
        self.set_truncation_capacity(B * per_env)
        if self._compile_steps:
            self.compiled_loop = CompiledTLoop(self)

    def set_truncation_capacity(self, capacity: int) -> None:
        """Value at most ``capacity`` truncated steps per collect without a fallback (with
        S members, ``capacity / S``, rounded up, of each member's). Drops the captured
        collect graphs: the next collects capture again."""
        S = self.members.size  # the same capacity in every member (a pass takes equal blocks)
        per_member = min(self.num_envs // S * self.horizon, max(1, -(-capacity // S)))
        self.truncation_capacity = S * per_member
        self._truncation_ranks = torch.arange(1, per_member + 1, device=self.device)
        self.graphs.clear()

    # -- one collect ---------------------------------------------------------------------

    def begin(self, reset_all: bool, env_config: dict[str, Any] | None = None) -> None:
        """Put column 0 in place: fresh resets, or the last observation and state carried
        over from the previous collect."""
        T = self.horizon
        self._reset_all = reset_all
        if reset_all:
            self.obs[0].copy_(self.env.reset(config=env_config))
            self.episode_return.zero_()
            self.episode_length.zero_()
            if self.stateful:
                self.states[0].copy_(self.policy.initial_state(self.num_envs))
                self.resets[0].fill_(True)
        else:
            self.obs[0].copy_(self.obs[T])
            if self.stateful:  # the live state and the last step's episode ends
                self.states[0].copy_(self.states[T])
                self.resets[0].copy_(self.resets[T])

    def run(self, deterministic: bool, scaler: RewardScaler | None = None) -> Stats:
        """All of collect's device work once column 0 is in place (:meth:`phase`: the T
        loop and the tail), replayed as one CUDA graph when ``graphed``; then what the host
        adds: a reward-scaler merge across ranks and the env's logged scalars.

        Returns:
            The collect's statistics on the device, by name (a new :class:`Stats` each
            call; a replay rewrites the tensors it holds).
        """
        if self.graphed and self.device.type == "cuda":
            graph = self.graphs.get(deterministic)
            if graph is None:
                graph = self.graphs[deterministic] = GraphedCall(lambda: self.phase(deterministic, scaler), self.device)
            stats = graph().copy()
        else:
            stats = self.phase(deterministic, scaler)
        if scaler is not None and scaler.stats.merges_across_ranks:  # a collective: after the program
            scaler.record(scaler.scratch(self.horizon)[0])
        pop_logs = getattr(self.env, "pop_log_stats", None)  # an env's own logged scalars
        for name, value in (pop_logs() if callable(pop_logs) else {}).items():
            stats.add(f"env/{name}", value)
        return stats

    def phase(self, deterministic: bool, scaler: RewardScaler | None = None) -> Stats:
        """The T loop (:meth:`steps`) and the tail (:meth:`tail`): everything collect runs
        on the device between putting column 0 in place and the one transfer. The host
        decides nothing inside it, so one CUDA graph holds it whole."""
        self.steps(deterministic)
        return self.tail(scaler)

    def steps(self, deterministic: bool) -> None:
        """The T loop: act, step the env, and write every column into the buffer.

        Column 0 is in place when it starts. Everything it touches lives at fixed
        addresses (the buffer's column views, the policy's parameters and normalizer
        statistics, a graph-safe env's state), which is what lets it replay as one CUDA
        graph, and lets ``compile_steps`` run it as compiled programs of several steps
        (:mod:`rlx.collect.compiled_loop`).
        """
        if self.compiled_loop is not None:  # a graph-safe env
            self.compiled_loop(deterministic)
            return
        for t in range(self.horizon):
            out = self.write_step(self.columns[t], deterministic)
            for key, declared in self._episode_ends:
                if not declared and key in out.keys():
                    raise EnvOutputError(
                        f"{type(self.env).__name__}.step() returned '{key}' at step {t} but not "
                        "when validated; an env must return the same keys on every step"
                    )

    def write_step(self, c: StepColumns, deterministic: bool) -> Any:
        """One step of the T loop on column ``c``: act, step the env, write the outputs
        into the column (``c.put``: its views, or by index in a compiled program of
        several steps, :mod:`rlx.collect.compiled_loop`); returns the env's output. The
        one step function of every T loop: eager, graphed and compiled."""
        step = self.act_fn(c.obs, c.state, c.reset, deterministic=deterministic)
        # Into the buffer before the env sees them: an env may modify its actions in
        # place (a clamp_), and the buffer must keep what logp was computed for.
        c.put("actions", step.actions)
        c.put("logp", step.logp)
        if step.values is not None:
            c.put("values", step.values)
        if self.stateful:
            c.put("next_state", step.state)
        out = self.env.step(step.env_actions)
        c.put("rewards", out.get(REWARDS))
        if self.terminates:
            c.put("terminated", out.get(TERMINATED))
        if self.truncates:
            c.put("truncated", out.get(TRUNCATED))
            c.put("final_obs", out.get(FINAL_OBS))
        c.put("next_obs", out.get(OBS))
        if self.stateful:  # whether step t + 1 begins an episode: this one ended it
            ends = [out.get(key) for key, declared in self._episode_ends if declared]
            c.put("next_reset", torch.logical_or(*ends) if len(ends) == 2 else ends[0] if ends else
                  torch.zeros_like(c.reset))
        return out

    # -- statistics -------------------------------------------------------------------------

    def rewards_and_dones(self) -> tuple[Tensor, Tensor]:
        """``[B, T, 1]`` rewards and ``[B, T, 1]`` bool episode ends of this rollout."""
        T, buf = self.horizon, self.buffer
        return buf.get(REWARDS)[:, :T], buf.get(TERMINATED)[:, :T] | buf.get(TRUNCATED)[:, :T]

    def tail(self, scaler: RewardScaler | None) -> Stats:
        """collect's work after the T loop, in one program with ``compile_steps``
        (:meth:`tail_program`): the values the T loop left out, the reward scaler's
        running returns through the rollout (``scaler``; ``None`` without reward scaling)
        and, on one process, their merge into its statistics, and this rollout's
        statistics (carrying the unfinished episodes into the next collect), stacked for
        the one transfer.

        Returns:
            The collect's statistics, by name, on the device; ``rollout/truncation_overflow``
            says whether :meth:`finish` must value every step.
        """
        scratch = scaler.scratch(self.horizon) if scaler is not None else None
        # The scaler's new moments come out of the program (set in one op after it); under
        # torch.distributed its merge is a collective, which run() makes after the phase.
        in_program = scaler is not None and not scaler.stats.merges_across_ranks
        stats, moments = self._tail(scaler, scratch, in_program)
        if moments is not None:
            scaler.stats.assign_(moments)
        return stats

    def tail_program(self, scaler: RewardScaler | None, scratch: tuple[Tensor, Tensor] | None,
                     merge: bool) -> tuple[Stats, tuple[Tensor, Tensor, Tensor] | None]:
        """:meth:`tail`'s tensor work: the collect's statistics and the scaler's new
        moments (``merge``, else ``None``). One function, which eager runs and
        ``compile_steps`` compiles; it changes none of its arguments, so that program's
        later calls can be checked against them."""
        stats = Stats()
        overflow = self.values_after_steps(self._tail_value_fn)
        rewards, dones = self.rewards_and_dones()
        moments = None
        if scaler is not None:
            scaler.advance(rewards[..., 0], dones[..., 0], *scratch, scaler.returns, scaler.gamma, scaler.gamma_rows)
            if merge:
                moments = scaler.recorded(scratch[0])
        leaves = [leaf for _, leaf in float_leaves(self.buffer.get(OBS)) + self._truncated_final_obs_leaves()]
        tail = rollout_statistics(rewards, dones, self.episode_return, self.episode_length, self._time_index,
                                  self.members.size, leaves)
        for name in ("returns/min", "returns/max", "rewards/min", "rewards/max"):
            stats.add(name, tail[name], name[-3:])  # "min" or "max"
        stats.add_std("returns/std", "returns/mean", tail["returns/std"], tail["returns/mean"])
        stats.add_std("rewards/std", "rewards/mean", tail["rewards/std"], tail["rewards/mean"])
        add = self.members.stats(stats)
        for name in ("episodes/count", "episodes/return_sum", "episodes/length_sum"):
            add(name, tail[name].reshape(self.members.lead), "sum")  # [S] each member's, their sum
        stats.add("rollout/finite", tail["rollout/finite"], "min")
        stats.add("rollout/truncation_overflow", overflow, "max")
        stats.pack()
        return stats, moments

    def finish(self, host: dict[str, float]) -> None:
        """After the collect's transfer: value every step if the truncation capacity
        overflowed, and name the first non-finite reward or observation if any."""
        if host["rollout/truncation_overflow"]:
            # More truncations than the capacity (an env that truncates for other reasons
            # than its time limit): value every step, as a plain pass would.
            self.buffer.get(FINAL_VALUES)[:, : self.horizon] = self.all_final_values()
        if host["rollout/finite"] < 1.0:
            self._raise_nonfinite()

    def report(self, host: dict[str, float], world_size: int) -> dict[str, float]:
        """``collect()``'s public statistics from the transferred ones."""
        B, T = self.num_envs, self.horizon
        count = host["episodes/count"]
        keys = ("returns/min", "returns/max", "returns/mean", "returns/std", "rewards/min", "rewards/max", "rewards/mean", "rewards/std")
        per_seed = {}
        for prefix in self.members.prefixes:  # a single run has none: its plain names follow
            n = host[f"{prefix}episodes/count"]
            per_seed[f"{prefix}episodes/count"] = n
            per_seed[f"{prefix}episodes/return_mean"] = host[f"{prefix}episodes/return_sum"] / n if n else math.nan
            per_seed[f"{prefix}episodes/length_mean"] = host[f"{prefix}episodes/length_sum"] / n if n else math.nan
        return {
            **{k: host[k] for k in keys},
            **{k: v for k, v in host.items() if k.startswith("env/")},  # an env's logged scalars
            **per_seed,
            "episodes/count": count,
            "episodes/return_mean": host["episodes/return_sum"] / count if count else math.nan,
            "episodes/length_mean": host["episodes/length_sum"] / count if count else math.nan,
            "env/resets": count + (B * world_size if self._reset_all else 0),
            "env/steps": float(B * T * world_size),
        }

    def _truncated_final_obs_leaves(self) -> list[tuple[str, Tensor]]:
        return truncated_final_obs_leaves(self.buffer, self.horizon) if self.truncates else []

    def _raise_nonfinite(self) -> None:
        """Name the first non-finite reward or observation (an error path: syncs freely)."""
        T = self.horizon
        checks = [(REWARDS, self.buffer.get(REWARDS)[:, :T])]
        checks += float_leaves(self.buffer.get(OBS))
        checks += self._truncated_final_obs_leaves()
        raise_first_nonfinite(checks, type(self.env).__name__)

    # -- state ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The carried partial episodes, the last observation and (for a stateful policy)
        the live states and reset flags; aliases live tensors (the caller copies)."""
        T = self.horizon
        state: dict[str, Any] = {
            "episode_return": self.episode_return,
            "episode_length": self.episode_length,
            "last_obs": _to_plain(self.obs[T]) if self.buffer is not None else None,
        }
        if self.buffer is not None and self.stateful:
            state["recurrent"] = {"hidden": self.states[T], "resets": self.resets[T]}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (into a validated rollout)."""
        T = self.horizon
        self.episode_return.copy_(state["episode_return"])
        self.episode_length.copy_(state["episode_length"])
        if state.get("last_obs") is not None:
            _load_into(self.obs[T], state["last_obs"])
        recurrent = state.get("recurrent")
        if recurrent is not None and self.stateful:
            self.states[T].copy_(recurrent["hidden"])
            self.resets[T].copy_(recurrent["resets"])

    def restart_episodes(self) -> None:
        """Forget the carried partial episodes (a resume that cannot continue them)."""
        self.episode_return.zero_()
        self.episode_length.zero_()


def envs_start_afresh(state: dict[str, Any], num_envs: int, world_size: int) -> bool:
    """Whether a run loading the checkpoint ``state`` restarts its envs' per-env state
    (partial episodes, running returns) rather than continuing it: under torchrun, or
    where the checkpoint's envs were not ``num_envs`` (a play script's few)."""
    saved = state.get("episode_return")
    return world_size > 1 or (isinstance(saved, Tensor) and saved.shape[0] != num_envs)


def _to_plain(x: Obs) -> Tensor | dict[str, Any]:
    """A tensor, or a TensorDict as nested dicts of tensors (safe for weights_only loads)."""
    return x.clone() if isinstance(x, Tensor) else x.to_dict()


def _load_into(dst: Obs, src: Tensor | dict[str, Any]) -> None:
    if isinstance(dst, Tensor):
        dst.copy_(src)
    else:
        dst.copy_(TensorDict(src, batch_size=dst.batch_size, device=dst.device))
