"""Stop conditions: when a training run ends (budgets, metric goals, plateaus, signals).

Each condition is called after every iteration with the trainer and that iteration's
metrics and returns a reason to stop or ``None``; conditions compose by "any". A
condition with memory (:class:`MetricPlateau`) saves it in the trainer's checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import threading
from typing import TYPE_CHECKING, Any, Protocol

from rlx.config.run import TrainerConfig
from rlx.members.axis import member_key

if TYPE_CHECKING:
    from rlx.run.trainer import Trainer

__all__ = [
    "MaxEnvSteps",
    "MaxIterations",
    "MaxWallTime",
    "MetricPlateau",
    "MetricThreshold",
    "StopCondition",
    "StopSignals",
    "signal_reason",
    "stop_conditions_from_config",
]


class StopCondition(Protocol):
    """Decides after each iteration whether training stops; conditions compose by "any"."""

    def __call__(self, trainer: Trainer, metrics: dict[str, float]) -> str | None:
        """The reason to stop, or ``None`` to go on."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class _Stateless:
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@dataclasses.dataclass
class MaxEnvSteps(_Stateless):
    """Stop once ``limit`` env transitions have been collected."""

    limit: int

    def __call__(self, trainer: Trainer, metrics: dict[str, float]) -> str | None:
        return f"reached {self.limit} env steps" if trainer.algorithm.env_steps >= self.limit else None


@dataclasses.dataclass
class MaxIterations(_Stateless):
    """Stop after ``limit`` iterations."""

    limit: int

    def __call__(self, trainer: Trainer, metrics: dict[str, float]) -> str | None:
        return f"reached {self.limit} iterations" if trainer.iteration >= self.limit else None


@dataclasses.dataclass
class MaxWallTime(_Stateless):
    """Stop after ``seconds`` of training time."""

    seconds: float

    def __call__(self, trainer: Trainer, metrics: dict[str, float]) -> str | None:
        return f"reached {self.seconds:g} s of training" if trainer.wall_s >= self.seconds else None


@dataclasses.dataclass
class MetricThreshold(_Stateless):
    """Stop once ``metrics[key]`` is at least (``above=True``) or at most ``threshold``.

    With ``num_seeds > 1`` and a per-member metric (``member{i}/key``), each member that meets
    it is marked done and stops updating (:meth:`rlx.members.Members.mark_done`); the
    run stops once every seed is done.
    """

    key: str
    threshold: float
    above: bool = True

    def _hit(self, value: float | None) -> bool:
        if value is None or math.isnan(value):
            return False
        return value >= self.threshold if self.above else value <= self.threshold

    def __call__(self, trainer: Trainer, metrics: dict[str, float]) -> str | None:
        op = ">=" if self.above else "<="
        if member_key(0, self.key) in metrics:  # S members: each is done on its own
            members = trainer.algorithm.members
            members.mark_done([i for i in range(members.size) if self._hit(metrics.get(member_key(i, self.key)))])
            return f"every seed reached {self.key} {op} {self.threshold:g}" if members.all_done() else None
        value = metrics.get(self.key)
        return f"{self.key} = {value:.4g} {op} {self.threshold:g}" if self._hit(value) else None


@dataclasses.dataclass
class MetricPlateau:
    """Stop when ``metrics[key]`` has not risen by ``min_delta`` for ``patience`` reports.

    With ``num_seeds > 1`` and a per-member metric (``member{i}/key``), each member keeps its own
    best and count: a seed that plateaus is marked done and stops updating
    (:meth:`rlx.members.Members.mark_done`); the run stops once every seed is done.
    """

    key: str
    patience: int
    min_delta: float = 0.0
    best: float = -math.inf
    since_best: int = 0
    #: Per seed (``num_seeds > 1``): each seed's best value and reports since it.
    seed_best: list[float] = dataclasses.field(default_factory=list)
    seed_since_best: list[int] = dataclasses.field(default_factory=list)

    def _improved(self, value: float, best: float) -> bool:
        return value > best + self.min_delta

    def __call__(self, trainer: Trainer, metrics: dict[str, float]) -> str | None:
        if member_key(0, self.key) in metrics:  # S members: each plateaus on its own
            return self._per_seed(trainer.algorithm.members, metrics)
        value = metrics.get(self.key)
        if value is None or math.isnan(value):
            return None
        if self._improved(value, self.best):
            self.best, self.since_best = value, 0
            return None
        self.since_best += 1
        if self.since_best >= self.patience:
            return f"{self.key} has not improved on {self.best:.4g} for {self.patience} iterations"
        return None

    def _per_seed(self, seeds, metrics: dict[str, float]) -> str | None:
        S = seeds.size
        if len(self.seed_best) != S:
            self.seed_best, self.seed_since_best = [-math.inf] * S, [0] * S
        plateaued = []
        for i in range(S):
            value = metrics.get(member_key(i, self.key))
            if value is None or math.isnan(value):
                continue
            if self._improved(value, self.seed_best[i]):
                self.seed_best[i], self.seed_since_best[i] = value, 0
                continue
            self.seed_since_best[i] += 1
            if self.seed_since_best[i] >= self.patience:
                plateaued.append(i)
        seeds.mark_done(plateaued)
        return f"every seed is done ({self.key} plateaued for {self.patience} iterations)" if seeds.all_done() else None

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "since_best": self.since_best, "seed_best": list(self.seed_best),
                "seed_since_best": list(self.seed_since_best)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.since_best = state["best"], state["since_best"]
        self.seed_best = list(state.get("seed_best", []))
        self.seed_since_best = list(state.get("seed_since_best", []))


def stop_conditions_from_config(config: TrainerConfig) -> list[StopCondition]:
    """The stop conditions a :class:`TrainerConfig` asks for."""
    conditions: list[StopCondition] = []
    if config.max_env_steps is not None:
        conditions.append(MaxEnvSteps(config.max_env_steps))
    if config.max_iterations is not None:
        conditions.append(MaxIterations(config.max_iterations))
    if config.max_wall_s is not None:
        conditions.append(MaxWallTime(config.max_wall_s))
    for key, value in (config.stop_at or {}).items():
        conditions.append(MetricThreshold(key, float(value), above=True))
    for key, value in (config.stop_below or {}).items():
        conditions.append(MetricThreshold(key, float(value), above=False))
    if config.plateau_metric is not None:
        conditions.append(MetricPlateau(config.plateau_metric, config.plateau_patience, config.plateau_min_delta))
    return conditions


class StopSignals:
    """Turns SIGTERM and SIGINT into a request to stop after the iteration in progress.

    A cluster that preempts a job sends SIGTERM; Ctrl-C sends SIGINT. While installed
    (``with StopSignals() as signals:``), the first of either only records itself in
    :attr:`received`: the training loop finishes its iteration, writes a checkpoint and
    returns. A second SIGINT interrupts at once (``KeyboardInterrupt``), as Ctrl-C
    twice does elsewhere. Installs nothing outside the main thread (Python delivers
    signals there only); the previous handlers come back on exit.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        #: The number of the first signal received, or ``None``.
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if self.received is None:
            self.received = signum

    @property
    def reason(self) -> str | None:
        """``"received SIGTERM"`` (or SIGINT) once a signal arrived, else ``None``."""
        return None if self.received is None else signal_reason(self.received)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()


def signal_reason(signum: int) -> str:
    """``"received SIGTERM"`` for ``signal.SIGTERM``."""
    return f"received {signal.Signals(signum).name}"
