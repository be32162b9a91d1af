"""The training loop: stop conditions, evaluation, checkpoints, metrics and progress.

``Trainer(algo, TrainerConfig(...), run_dir=...).run()`` repeats ``collect()`` /
``step()`` until a stop condition holds, evaluating the deterministic policy on a
separate env every ``eval_every`` iterations and checkpointing every
``checkpoint_every``. A run directory holds::

    config.yaml        the resolved run config (env, algorithm, its fields, trainer)
    metrics.jsonl      one JSON line per iteration: every stat, env_steps, iteration, wall_s
    checkpoints/       ckpt_<iteration>.pt, the last ``keep_checkpoints`` of them
    tensorboard/       event files, when the ``tensorboard`` extra is installed

Checkpoints are written atomically (temp file, fsync, rename) and hold the whole
algorithm state, the trainer's state and the resolved config; they load with
``torch.load(..., weights_only=True)``. A resumed run continues exactly: on CPU it
produces the same stats and parameters as the run that was never interrupted.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlx import __version__
from rlx.core import distributed as rdist
from rlx.core._sync import allowed_sync
from rlx.run.checkpoint import (
    CHECKPOINT_FORMAT,
    RESUME_MUST_MATCH,
    config_differences,
    latest_checkpoint,
    load_checkpoint,
    load_resumable,
    newest_readable_checkpoint,
    save_checkpoint_atomic,
)
from rlx.env import env_record
from rlx.collect.evaluation import evaluate_policy
from rlx.members.pbt import PBT, PBTConfig
from rlx.config.run import ALGORITHMS, RunConfig, TrainerConfig, env_factory, load_run_config
from rlx.run.stopping import (
    MaxEnvSteps,
    MaxIterations,
    MaxWallTime,
    MetricPlateau,
    MetricThreshold,
    StopCondition,
    StopSignals,
    signal_reason,
    stop_conditions_from_config,
)
from rlx.run.threads import AutoThreads
from rlx.core.yaml_types import config_to_dict

if TYPE_CHECKING:
    from rlx.algorithms.base import Algorithm

# The names below the Trainer were public here before checkpoints, run configs, stop
# conditions and evaluation got modules of their own; they stay importable from here.
__all__ = [
    "ALGORITHMS",
    "MaxEnvSteps",
    "MaxIterations",
    "MaxWallTime",
    "MetricPlateau",
    "MetricThreshold",
    "RunConfig",
    "StopCondition",
    "Trainer",
    "TrainerConfig",
    "evaluate_policy",
    "latest_checkpoint",
    "load_checkpoint",
    "load_run_config",
    "save_checkpoint_atomic",
    "env_factory",
    "env_record",
]


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Trainer:
    """Runs an algorithm until a stop condition holds, with eval, checkpoints and logs.

    Args:
        algorithm: A built algorithm (``AlgorithmConfig(...).build(env_cls)``).
        config: The trainer's settings.
        run_dir: Where metrics, checkpoints and the config go; ``None`` keeps nothing on
            disk (no checkpoints, no metrics file).
        run_config: The resolved run config to record in ``config.yaml`` and in every
            checkpoint (what ``rlx train`` passes); by default one is derived from the
            algorithm.
        stop_conditions: Extra conditions, on top of those ``config`` asks for.
        cpu_threads: Keeps torch's CPU threads off the cores other processes use
            (:class:`~rlx.run.threads.AutoThreads`, what ``rlx train`` passes unless told a
            thread count); ``None`` leaves them as they are.
    """

    def __init__(
        self,
        algorithm: Algorithm,
        config: TrainerConfig | None = None,
        *,
        run_dir: str | Path | None = None,
        run_config: RunConfig | None = None,
        stop_conditions: Iterable[StopCondition] = (),
        cpu_threads: AutoThreads | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.config = config or TrainerConfig()
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.run_config = run_config
        self.stop_conditions = stop_conditions_from_config(self.config) + list(stop_conditions)
        self.cpu_threads = cpu_threads
        self.iteration = 0
        self.wall_s = 0.0
        self.last_metrics: dict[str, float] = {}
        self.stop_reason: str | None = None
        #: The signal that stopped the last :meth:`run` (SIGTERM, SIGINT), else ``None``.
        self.interrupted_by: int | None = None
        #: What to do to go on, when :meth:`run` stopped at once (a goal already met).
        self.stop_hint: str | None = None
        self._eval_env: Any = None
        self._session_start = (0, 0, 0.0)  # env steps, iteration and training time when run() began
        self._last_episodes: dict[str, float] = {}
        self._writer: Any = None
        self._tty = sys.stdout.isatty()
        # Under torchrun every rank trains; rank 0 alone evaluates, writes and prints.
        self.is_writer = rdist.rank() == 0
        #: Population-based training of the members (``config.pbt``), else ``None``.
        self.pbt: PBT | None = None
        if self.config.pbt is not None:
            # Under torchrun every rank ranks rank 0's scores with the same random stream:
            # every rank copies and perturbs alike, and rank 0 writes the lineage.
            self.pbt = PBT(algorithm, PBTConfig.from_dict(self.config.pbt), self.run_dir if self.is_writer else None)

    # -- config record -----------------------------------------------------------------

    def resolved_config(self) -> dict[str, Any]:
        """The run config as plain data (env, algorithm, its fields, the trainer's)."""
        if self.run_config is not None:
            return self.run_config.to_dict()
        algo_config = self.algorithm.config
        name = next((k for k, v in ALGORITHMS.items() if type(algo_config) is v), type(algo_config).__name__)
        env, env_kwargs = env_record(self.algorithm.env_cls)
        return {
            "env": env,
            **({"env_kwargs": env_kwargs} if env_kwargs else {}),
            "algorithm": name,
            "config": config_to_dict(algo_config),
            "trainer": config_to_dict(self.config),
        }

    # -- checkpoints ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The trainer's own state: iteration, training time, stop-condition state and the
        last iteration's metrics."""
        return {
            "iteration": self.iteration,
            "wall_s": self.wall_s,
            "stop_conditions": [c.state_dict() for c in self.stop_conditions],
            "last_metrics": dict(self.last_metrics),
            **({"pbt": self.pbt.state_dict()} if self.pbt is not None else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = state["iteration"]
        self.wall_s = state["wall_s"]
        self.last_metrics = dict(state.get("last_metrics", {}))
        for condition, s in zip(self.stop_conditions, state["stop_conditions"]):
            condition.load_state_dict(s)
        if self.pbt is not None and "pbt" in state:
            self.pbt.load_state_dict(state["pbt"])

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/ckpt_<iteration>.pt`` atomically and prune old ones."""
        if self.run_dir is None:
            raise ValueError("Trainer.save_checkpoint needs a run_dir")
        payload = {
            "format": CHECKPOINT_FORMAT,
            "rlx_version": __version__,
            "algorithm": self.algorithm.state_dict(),
            "trainer": self.state_dict(),
            "config": self.resolved_config(),
        }
        path = save_checkpoint_atomic(payload, self.run_dir / "checkpoints" / f"ckpt_{self.iteration:08d}.pt")
        for old in sorted(path.parent.glob("ckpt_*.pt"))[: -self.config.keep_checkpoints]:
            old.unlink()
        return path

    def resume(self, checkpoint: str | Path | None = None) -> Path:
        """Load a checkpoint (default: the newest readable one in ``run_dir``) and
        continue from it.

        Without ``checkpoint``, an unreadable newest file (a damaged disk, a bad copy)
        is skipped with a warning for the one before it. The checkpoint's env, algorithm
        and the fields in :data:`RESUME_MUST_MATCH` must equal this run's; other changed
        algorithm fields (say a new ``lr``) are allowed with a warning, since the run
        then continues but not as the uninterrupted one would. Metrics lines written
        after the checkpoint (by a run that crashed later) are dropped, so
        ``metrics.jsonl`` stays one line per iteration.

        Raises:
            FileNotFoundError: no checkpoint to resume from.
            ValueError: no readable checkpoint, or one from an incompatible config
                (naming each field, its saved and its current value).
        """
        if checkpoint is None:
            if self.run_dir is None:
                raise FileNotFoundError("Trainer.resume: no checkpoint given and no run_dir to look in")
            checkpoint, state = newest_readable_checkpoint(self.run_dir, load_resumable)
        else:
            state = load_resumable(checkpoint)
        self._check_resume_config(state, checkpoint)
        self.algorithm.load_state_dict(state["algorithm"])
        self.load_state_dict(state["trainer"])
        if self.run_dir is not None and self.is_writer:
            # Temp files of checkpoint writes that a killed process never renamed.
            for stale in Path(self.run_dir, "checkpoints").glob(".ckpt_*.pt.tmp-*"):
                stale.unlink(missing_ok=True)
            for name in ("metrics.jsonl", "lineage.jsonl"):
                lines = self.run_dir / name
                if lines.exists():
                    kept = [
                        line
                        for line in lines.read_text().splitlines()
                        if line.strip() and json.loads(line).get("iteration", 0) <= self.iteration
                    ]
                    tmp = lines.with_name(f".{lines.name}.tmp-{os.getpid()}")
                    tmp.write_text("".join(line + "\n" for line in kept))
                    os.replace(tmp, lines)  # a crash here leaves the old file whole
        return Path(checkpoint)

    def _check_resume_config(self, state: dict[str, Any], checkpoint: str | Path) -> None:
        saved = state.get("config")
        if not isinstance(saved, dict):
            return
        differences = config_differences(saved, self.resolved_config())
        fatal = {k: v for k, v in differences.items() if k in RESUME_MUST_MATCH}
        if fatal:
            listed = ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in fatal.items())
            raise ValueError(f"cannot resume from {checkpoint}: the run's config changed ({listed})")
        if differences:
            listed = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in differences.items())
            warnings.warn(
                f"resuming from {checkpoint} with changed settings ({listed}): training continues, "
                "but not as the uninterrupted run would have",
                stacklevel=3,
            )

    # -- evaluation ------------------------------------------------------------------------

    def evaluate(self) -> dict[str, float]:
        """Deterministic evaluation on a separate env instance (built on first use)."""
        algo = self.algorithm
        seeds = algo.num_seeds  # S members: eval_num_envs each, eval_episodes each
        if self._eval_env is None:
            self._eval_env = algo.env_cls(self.config.eval_num_envs * seeds, algo.horizon, device=algo.device)
        return evaluate_policy(
            algo.policy, self._eval_env, episodes=self.config.eval_episodes, max_steps=self.config.eval_max_steps,
            groups=seeds,
        )

    # -- the loop --------------------------------------------------------------------------

    def _open_outputs(self) -> None:
        if self.run_dir is None or not self.is_writer:
            return
        import yaml

        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(self.resolved_config(), sort_keys=False))
        if self.config.tensorboard and self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                self._writer = None
            else:
                # Scalars are logged at env steps: a resumed run drops what a crashed run
                # logged after its checkpoint, and keeps everything before.
                self._writer = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=self.algorithm.env_steps + 1)

    def _log(self, metrics: dict[str, float]) -> None:
        if not self.is_writer:
            return
        if self.run_dir is not None:
            with open(self.run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps({k: _json_value(v) for k, v in metrics.items()}) + "\n")
        if self._writer is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and math.isfinite(value) and key not in ("iteration",):
                    self._writer.add_scalar(key, value, self.algorithm.env_steps)

    def _budget_fraction(self, steps: int, iteration: int) -> float | None:
        """The share of the nearest budget (``max_env_steps``, ``max_iterations``) spent."""
        fractions = []
        if self.config.max_env_steps:
            fractions.append(steps / self.config.max_env_steps)
        if self.config.max_iterations:
            fractions.append(iteration / self.config.max_iterations)
        return min(max(fractions), 1.0) if fractions else None

    def _progress(self, metrics: dict[str, float], final: bool = False) -> None:
        if not self.config.progress or not self.is_writer:
            return
        steps = self.algorithm.env_steps
        # Speed of this process: a resumed run's earlier time and steps are not in it.
        start_steps, start_iter, start_wall = self._session_start
        rate = (steps - start_steps) / (self.wall_s - start_wall) if self.wall_s > start_wall else 0.0
        # The latest episodes that ended: an iteration in which none did keeps the last.
        for key in ("episodes/return_mean", "episodes/length_mean"):
            value = metrics.get(key, math.nan)
            if value == value:
                self._last_episodes[key] = value
        ret, length = (self._last_episodes.get(k) for k in ("episodes/return_mean", "episodes/length_mean"))
        line = (f"iter {self.iteration:5d} | env steps {steps:>10,d} | {rate:>9,.0f} steps/s | return "
                + (f"{ret:8.2f}" if ret is not None else f"{'-':>8}")
                + " | length " + (f"{length:7.1f}" if length is not None else f"{'-':>7}"))
        if "eval/return_mean" in metrics:
            line += f" | eval {metrics['eval/return_mean']:8.2f}"
        # Progress toward the nearest budget: env steps or iterations, and the time it
        # leaves at this process's speed. A metric goal may end the run sooner: then the
        # time left is an upper bound.
        done, done_at_start = self._budget_fraction(steps, self.iteration), self._budget_fraction(start_steps, start_iter)
        if done is not None and done > done_at_start and self.wall_s > start_wall:
            left = (self.wall_s - start_wall) * (1 - done) / (done - done_at_start)
            goal = any(isinstance(c, (MetricThreshold, MetricPlateau)) for c in self.stop_conditions)
            line += f" | {100 * done:3.0f}% of budget, " + (f"<= {left:.0f} s left" if goal else f"ETA {left:.0f} s")
        if self._tty:
            print("\r" + line, end="\n" if final else "", flush=True)
        elif final or self.iteration % self.config.log_every == 0:
            print(line, flush=True)

    def run(self) -> dict[str, float]:
        """Train until a stop condition holds, or SIGTERM / SIGINT asks to stop; return the
        last iteration's metrics.

        A signal lets the iteration in progress finish, then the run stops as for any
        other reason: a checkpoint is written atomically, the metrics line is on disk, and
        :attr:`interrupted_by` holds the signal's number (``rlx train`` then exits with
        ``128 + signal``). Under torchrun every rank stops at the same iteration.

        Raises:
            ValueError: no stop condition was given (the run would never end).
        """
        if not self.stop_conditions:
            raise ValueError(
                "Trainer.run: no stop condition; set max_env_steps, max_iterations, max_wall_s, stop_at, "
                "stop_below or plateau_metric"
            )
        self.stop_reason, self.interrupted_by, self.stop_hint = None, None, None
        # A budget already spent (a finished run resumed with the same limits) stops
        # before training another iteration. Metric conditions need new metrics.
        # A metric goal the last iteration already met (a finished run resumed) stops too,
        # saying how to go on.
        for condition in self.stop_conditions:
            if isinstance(condition, (MaxIterations, MaxEnvSteps, MaxWallTime)):
                reason = condition(self, self.last_metrics)
            elif isinstance(condition, MetricThreshold) and self.last_metrics:
                reason = condition(self, self.last_metrics)
                if reason is not None:
                    field = "stop_at" if condition.above else "stop_below"
                    reason = f"{reason}, met before this resume (iteration {self.iteration})"
                    self.stop_hint = f"to train on, raise the goal or drop it: --set trainer.{field}=null"
            else:
                continue
            if reason is not None:
                self.stop_reason = reason
                return self.last_metrics
        self._session_start = (self.algorithm.env_steps, self.iteration, self.wall_s)
        self._open_outputs()
        try:
            with StopSignals() as signals:
                while self.stop_reason is None:
                    self._iteration(signals)
        finally:
            if self._writer is not None:
                self._writer.flush()
        return self.last_metrics

    def _iteration(self, signals: StopSignals) -> None:
        """One collect and step, then evaluation, the stop decision, logs and checkpoint."""
        algo, cfg = self.algorithm, self.config
        if self.cpu_threads is not None:
            self.cpu_threads.update()
        # The first iteration of a compiled algorithm compiles its programs: say so, and
        # how long it took (inductor's on-disk cache makes a later run's much shorter).
        first = self.iteration == self._session_start[1] and self.is_writer and cfg.progress
        if first and algo.modes.notes:  # what "auto" chose, and why
            print(f"modes: {algo.modes.summary()}", flush=True)
        compiling = algo.compiles and first
        if compiling:
            print("compiling... (compile=True: the first collect and step compile their programs)", flush=True)
        start = time.perf_counter()
        metrics = {**algo.collect(), **algo.step()}
        if compiling:
            print(f"compiled: the first iteration took {time.perf_counter() - start:.1f} s", flush=True)
        self.iteration += 1
        if cfg.eval_every and self.iteration % cfg.eval_every == 0 and self.is_writer:
            metrics.update(self.evaluate())
        self.wall_s += time.perf_counter() - start
        metrics.update(iteration=self.iteration, env_steps=algo.env_steps, wall_s=self.wall_s)
        self._decide_stop(metrics, signals)
        if self.pbt is not None:  # exploit and explore, every pbt.every iterations
            metrics.update(self.pbt.step(self.iteration, metrics))
        final_eval = self.interrupted_by is None and cfg.eval_every and "eval/return_mean" not in metrics
        if self.stop_reason is not None and final_eval and self.is_writer:  # no evaluation when preempted
            metrics.update(self.evaluate())
        self._log(metrics)
        self.last_metrics = metrics
        due = cfg.checkpoint_every and self.iteration % cfg.checkpoint_every == 0
        if self.run_dir is not None and self.is_writer and (due or self.stop_reason is not None):
            self.save_checkpoint()
        self._progress(metrics, final=self.stop_reason is not None)

    def _decide_stop(self, metrics: dict[str, float], signals: StopSignals) -> None:
        """Set :attr:`stop_reason` (and :attr:`interrupted_by`): a signal first, then the
        stop conditions; under torchrun, whatever any rank decided, on every rank."""
        if signals.received is not None:
            self.stop_reason, self.interrupted_by = signals.reason, signals.received
        for condition in self.stop_conditions:
            reason = condition(self, metrics)
            if reason is not None and self.stop_reason is None:
                self.stop_reason = reason
        if self.algorithm.world_size == 1:
            return
        # Ranks must stop together (wall time and signals differ between them): 0 goes
        # on, 1 a stop condition held, 128 + n signal n arrived.
        if self.interrupted_by is not None:
            mine = 128.0 + self.interrupted_by
        else:
            mine = 0.0 if self.stop_reason is None else 1.0
        members = self.algorithm.members
        # A member done on any rank (rank 0's evaluation) is done on all.
        flag = torch.cat([torch.tensor([mine], device=self.algorithm.device), members.done.float()])
        flag = rdist.all_reduce_(flag, "max")
        with allowed_sync():
            flags = flag.tolist()  # SYNC: once per iteration
        decided = int(flags[0])
        members.mark_done([i for i, done in enumerate(flags[1:]) if done])
        if decided >= 128 and self.interrupted_by is None:
            self.interrupted_by = decided - 128
            self.stop_reason = f"another rank {signal_reason(decided - 128)}"
        elif decided and self.stop_reason is None:
            self.stop_reason = "another rank's stop condition held"

