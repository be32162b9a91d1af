"""Piecewise schedules (learning rate, entropy coefficient) over env transitions.

A schedule is a list of ``(env_steps, value)`` milestones, where ``env_steps`` counts env
transitions: one ``collect()`` of B envs over a horizon of T adds ``B * T``. Counting
transitions rather than updates keeps a schedule meaning the same thing when
``num_envs`` or ``horizon`` change. The counts are host ints, so evaluating a schedule
never touches the device; the algorithm writes the value into its on-device tensors.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any, Literal, get_args

__all__ = ["Schedule", "ScheduleKind", "check_schedule"]

#: ``"step"`` holds each milestone's value until the next milestone; ``"interp"``
#: interpolates linearly between milestones.
ScheduleKind = Literal["step", "interp"]

_KINDS: tuple[str, ...] = get_args(ScheduleKind)


def check_schedule(schedule: Any, kind: Any, *, name: str) -> None:
    """Validate a schedule and its kind, raising an error that names the field.

    Args:
        schedule: The milestones: a non-empty sequence of ``(env_steps, value)`` pairs
            (tuples, or lists as YAML gives them) with ``env_steps`` an int ``>= 0``,
            strictly increasing, and ``value`` a finite number.
        kind: ``"step"`` or ``"interp"``.
        name: The config field holding the schedule, e.g. ``"lr_schedule"``; the kind is
            reported as ``f"{name}_kind"``.

    Raises:
        ValueError: Something above does not hold; the message starts with the field.
    """
    if kind not in _KINDS:
        raise ValueError(f"{name}_kind: must be one of {list(_KINDS)}, got {kind!r}")
    if isinstance(schedule, (str, bytes)) or not isinstance(schedule, Sequence):
        raise ValueError(
            f"{name}: must be a list of (env_steps, value) pairs, got {type(schedule).__name__}"
        )
    if len(schedule) == 0:
        raise ValueError(f"{name}: must hold at least one (env_steps, value) milestone")
    previous: int | None = None
    for i, entry in enumerate(schedule):
        if isinstance(entry, (str, bytes)) or not isinstance(entry, Sequence) or len(entry) != 2:
            raise ValueError(f"{name}[{i}]: must be an (env_steps, value) pair, got {entry!r}")
        steps, value = entry
        if isinstance(steps, bool) or not isinstance(steps, Integral) or steps < 0:
            raise ValueError(f"{name}[{i}]: env_steps must be an int >= 0, got {steps!r}")
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
            raise ValueError(f"{name}[{i}]: value must be a finite number, got {value!r}")
        if previous is not None and steps <= previous:
            raise ValueError(
                f"{name}[{i}]: env_steps must be strictly increasing, got {steps} after {previous}"
            )
        previous = int(steps)


class Schedule:
    """A value that changes with the number of env transitions collected so far.

    Args:
        schedule: ``(env_steps, value)`` milestones (see :func:`check_schedule`), or
            ``None`` for a constant ``initial``.
        kind: ``"step"``: the value of the last milestone at or before the current env
            step. ``"interp"``: linear interpolation between the two milestones around
            it. Either way the first value holds before the first milestone and the last
            value after the last one.
        initial: The constant value when ``schedule`` is ``None``.
        name: The config field the schedule came from, used in error messages.

    Raises:
        ValueError: The schedule or kind is invalid (the message names ``name``).

    Example:
        With 64 envs and a horizon of 32, one collect is 2048 env steps, so
        ``Schedule([(0, 3e-4), (4096, 1e-4)], initial=3e-4, name="lr_schedule")``
        switches to ``1e-4`` after exactly two collects.
    """

    def __init__(
        self,
        schedule: Sequence[tuple[int, float]] | None,
        kind: ScheduleKind = "step",
        *,
        initial: float,
        name: str,
    ) -> None:
        if schedule is None:
            if kind not in _KINDS:
                raise ValueError(f"{name}_kind: must be one of {list(_KINDS)}, got {kind!r}")
            self._steps: list[int] = []
            self._values: list[float] = []
        else:
            check_schedule(schedule, kind, name=name)
            self._steps = [int(steps) for steps, _ in schedule]
            self._values = [float(value) for _, value in schedule]
        self.kind: ScheduleKind = kind
        self.initial = float(initial)
        self.name = name

    def __repr__(self) -> str:
        milestones = list(zip(self._steps, self._values)) or None
        return (
            f"{type(self).__name__}({milestones!r}, {self.kind!r}, "
            f"initial={self.initial!r}, name={self.name!r})"
        )

    def value(self, env_steps: int) -> float:
        """The scheduled value after ``env_steps`` env transitions."""
        if not self._steps:
            return self.initial
        # Index of the first milestone strictly after env_steps, so that milestone i is
        # in force once env_steps reaches its own count exactly.
        after = bisect.bisect_right(self._steps, env_steps)
        if after == 0:
            return self._values[0]
        if after == len(self._steps) or self.kind == "step":
            return self._values[after - 1]
        x0, x1 = self._steps[after - 1], self._steps[after]
        y0, y1 = self._values[after - 1], self._values[after]
        fraction = (env_steps - x0) / (x1 - x0)
        return y0 + fraction * (y1 - y0)
