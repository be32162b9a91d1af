"""What every rlx config dataclass is made of: the error type, the constructor that
rejects unknown fields, and the field checks whose messages name the field.

A leaf module: it imports nothing else from rlx but the schedule check.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any

from rlx.core.schedulers import check_schedule

__all__ = ["ConfigError", "config_dataclass", "did_you_mean", "foreign_field_hint", "fail", "check_int", "check_float", "check_bool", "check_mode", "check_schedule_field", "settings_from_dict"]


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
        for name in unknown:
            hint = foreign_field_hint(cls, name)
            if hint:
                raise ConfigError(f"{cls.__name__}.{name}: {hint}")
        if unknown:
            raise ConfigError(f"{cls.__name__}.{unknown[0]}: unknown field{did_you_mean(unknown[0], names)}")
        init(self, *args, **kwargs)

    checked_init.__doc__ = init.__doc__
    checked_init.__wrapped__ = init  # type: ignore[attr-defined]
    cls.__init__ = checked_init
    return cls



def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """``"; did you mean 'num_envs'?"`` with the valid names closest to a mistyped
    ``name``; ``"; valid: ..."`` (all of them) when none is close."""
    valid = sorted(valid)
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; valid: {', '.join(valid)}"


def foreign_field_hint(cls: type, name: str) -> str | None:
    """Why ``name`` is not a field of the config class ``cls``, when the class says (its
    ``foreign_fields`` class attribute maps fields of other algorithms to a reason)."""
    return getattr(cls, "foreign_fields", {}).get(name)


def fail(owner: Any, field: str, message: str) -> None:
    raise ConfigError(f"{type(owner).__name__}.{field}: {message}")


def check_schedule_field(owner: Any, field: str) -> None:
    """:func:`check_schedule` on ``owner.<field>`` and its ``<field>_kind``, its errors
    prefixed with the config class like every other field's."""
    try:
        check_schedule(getattr(owner, field), getattr(owner, f"{field}_kind"), name=field)
    except ValueError as e:
        raise ConfigError(f"{type(owner).__name__}.{e}") from None


def check_int(owner: Any, field: str, *, minimum: int | None = 1, allow_none: bool = False) -> None:
    value = getattr(owner, field)
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        fail(owner, field, f"must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        fail(owner, field, f"must be >= {minimum}, got {value}")


def check_float(
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
        fail(owner, field, f"must be a finite number, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        fail(owner, field, f"must be {'>' if low_open else '>='} {low}, got {value}")
    if high is not None and value > high:
        fail(owner, field, f"must be <= {high}, got {value}")


def check_bool(owner: Any, field: str) -> None:
    if not isinstance(getattr(owner, field), bool):
        fail(owner, field, f"must be a bool, got {getattr(owner, field)!r}")


def check_mode(owner: Any, field: str) -> None:
    """A mode field: ``True``, ``False`` or ``"auto"`` (rlx picks at build)."""
    value = getattr(owner, field)
    if not (isinstance(value, bool) or value == "auto"):
        fail(owner, field, f"must be true, false or 'auto', got {value!r}")


def settings_from_dict(cls: type, data: Any, where: str) -> Any:
    """The settings dataclass ``cls`` from a mapping of its fields (``data`` itself when it
    already is one); an unknown key is refused naming ``where``, the keys and the valid ones."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: must be a mapping of settings, got {data!r}")
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; keys are {sorted(fields)}")
    return cls(**data)
