"""Schedules over env transitions: units, both kinds, edges and errors."""

from __future__ import annotations

import math

import pytest

from rlx.core.schedulers import Schedule, check_schedule

# With 64 envs and a horizon of 32, one collect adds 64 * 32 = 2048 env steps.
NUM_ENVS, HORIZON = 64, 32
STEPS_PER_COLLECT = NUM_ENVS * HORIZON


def test_schedule_counts_env_transitions_not_collects() -> None:
    schedule = Schedule([(0, 3e-4), (4096, 1e-4)], "step", initial=1.0, name="lr_schedule")
    seen = [schedule.value(collects * STEPS_PER_COLLECT) for collects in range(4)]
    # The milestone at 4096 env steps is reached after exactly two collects.
    assert seen == [3e-4, 3e-4, 1e-4, 1e-4]


def test_no_schedule_gives_the_initial_value_forever() -> None:
    schedule = Schedule(None, initial=0.01, name="entropy_coeff_schedule")
    assert [schedule.value(n) for n in (0, 1, 10**12)] == [0.01, 0.01, 0.01]


@pytest.mark.parametrize(
    ("env_steps", "expected"),
    [
        (0, 1.0),  # before the first milestone: its value
        (99, 1.0),
        (100, 1.0),
        (199, 1.0),
        (200, 0.5),  # a milestone takes effect at its own count exactly
        (299, 0.5),
        (300, 0.25),
        (10**9, 0.25),  # after the last milestone: its value
    ],
)
def test_step_schedule_holds_the_last_milestone_reached(env_steps: int, expected: float) -> None:
    schedule = Schedule([(100, 1.0), (200, 0.5), (300, 0.25)], "step", initial=9.0, name="lr_schedule")
    assert schedule.value(env_steps) == expected


@pytest.mark.parametrize(
    ("env_steps", "expected"),
    [
        (0, 1.0),  # before the first milestone: its value
        (100, 1.0),
        (150, 0.75),  # halfway from 1.0 to 0.5
        (175, 0.625),
        (200, 0.5),
        (250, 1.5),  # halfway from 0.5 up to 2.5
        (300, 2.5),
        (10**9, 2.5),  # after the last milestone: its value
    ],
)
def test_interp_schedule_interpolates_between_milestones(env_steps: int, expected: float) -> None:
    schedule = Schedule([(100, 1.0), (200, 0.5), (300, 2.5)], "interp", initial=9.0, name="lr_schedule")
    assert schedule.value(env_steps) == pytest.approx(expected, rel=1e-12, abs=0)


def test_interp_schedule_over_collects() -> None:
    # Linear decay from 1e-3 to 0 over ten collects, sampled after each collect.
    end = 10 * STEPS_PER_COLLECT
    schedule = Schedule([(0, 1e-3), (end, 0.0)], "interp", initial=1.0, name="lr_schedule")
    for collects in range(12):
        expected = 1e-3 * max(0.0, 1.0 - collects / 10)
        assert schedule.value(collects * STEPS_PER_COLLECT) == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("kind", ["step", "interp"])
def test_a_single_milestone_is_a_constant(kind: str) -> None:
    schedule = Schedule([(5000, 0.2)], kind, initial=1.0, name="lr_schedule")
    assert [schedule.value(n) for n in (0, 4999, 5000, 10**8)] == [0.2] * 4


def test_schedule_accepts_yaml_style_lists_and_integer_values() -> None:
    schedule = Schedule([[0, 1], [10, 3]], "interp", initial=0.0, name="lr_schedule")
    assert schedule.value(5) == 2.0
    assert isinstance(schedule.value(0), float)


def test_check_schedule_accepts_a_valid_schedule() -> None:
    check_schedule([(0, 1.0), (1, 0.0), (2048, -0.5)], "interp", name="entropy_coeff_schedule")


@pytest.mark.parametrize(
    ("schedule", "kind", "message"),
    [
        ([(0, 1.0)], "linear", r"^lr_schedule_kind: .*'linear'"),
        ([(0, 1.0)], None, r"^lr_schedule_kind: "),
        ([], "step", r"^lr_schedule: must hold at least one"),
        ("0:1.0", "step", r"^lr_schedule: must be a list"),
        ({0: 1.0}, "step", r"^lr_schedule: must be a list"),
        ([(0, 1.0, 2.0)], "step", r"^lr_schedule\[0\]: must be an \(env_steps, value\) pair"),
        ([0.5], "step", r"^lr_schedule\[0\]: must be an \(env_steps, value\) pair"),
        ([(-1, 1.0)], "step", r"^lr_schedule\[0\]: env_steps must be an int >= 0, got -1"),
        ([(0, 1.0), (1.5, 1.0)], "step", r"^lr_schedule\[1\]: env_steps must be an int"),
        ([(True, 1.0)], "step", r"^lr_schedule\[0\]: env_steps must be an int"),
        ([(0, math.nan)], "step", r"^lr_schedule\[0\]: value must be a finite number, got nan"),
        ([(0, math.inf)], "step", r"^lr_schedule\[0\]: value must be a finite number"),
        ([(0, "1e-3")], "step", r"^lr_schedule\[0\]: value must be a finite number"),
        ([(0, 1.0), (0, 2.0)], "step", r"^lr_schedule\[1\]: env_steps must be strictly increasing"),
        ([(10, 1.0), (5, 2.0)], "interp", r"^lr_schedule\[1\]: .*got 5 after 10"),
    ],
)
def test_invalid_schedules_raise_naming_the_field(schedule: object, kind: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_schedule(schedule, kind, name="lr_schedule")
    with pytest.raises(ValueError, match=message):
        Schedule(schedule, kind, initial=1.0, name="lr_schedule")  # type: ignore[arg-type]


def test_an_unknown_kind_is_rejected_even_without_a_schedule() -> None:
    with pytest.raises(ValueError, match=r"^entropy_coeff_schedule_kind: "):
        Schedule(None, "cosine", initial=1.0, name="entropy_coeff_schedule")  # type: ignore[arg-type]
