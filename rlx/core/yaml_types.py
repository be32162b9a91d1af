"""Plain data (YAML) to and from typed config dataclasses.

:func:`config_from_dict` checks every value of a mapping against the dataclass field's
annotation (import paths become classes, lists become tuples, ints become floats) and
names the key of anything that does not fit; :func:`config_to_dict` writes a config
back as plain data. Stands alone: it knows annotations, not rlx's configs.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import importlib
import re
import types
import typing
from typing import Any

from torch import nn

from rlx.core.config_fields import ConfigError, did_you_mean, foreign_field_hint

__all__ = ["import_object", "object_path", "config_from_dict", "config_to_dict", "load_yaml"]

# YAML 1.1 (PyYAML) reads a number without a dot, like ``3e-4`` or ``1e6``, as a string;
# YAML 1.2 and every user read it as a number. Floats by 1.2's rule, ints and the rest by 1.1's.
_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


def _loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
    return Loader


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that reads every number a person writes as a number:
    ``3e-4``, ``1e6`` and ``1.0e+6`` included (PyYAML alone reads the first two as strings).

    Raises:
        yaml.YAMLError: ``text`` is not valid YAML.
    """
    import yaml

    return yaml.load(text, Loader=_loader())


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
        hint = ""
        if isinstance(e, ModuleNotFoundError) and e.name and module_name.startswith(e.name):
            hint = (
                f"; to make {module_name!r} importable, run rlx from the directory that holds "
                f"{e.name.split('.')[0]!r}, add that directory to PYTHONPATH, or pip install its package"
            )
        raise ConfigError(f"{where}: cannot import module {module_name!r} ({type(e).__name__}: {e}){hint}") from e
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
    if origin is collections.abc.Callable:
        if isinstance(value, str):
            value = import_object(value, where=where)
        if not callable(value):
            raise ConfigError(f"{where}: must be a function or an import path to one, got {value!r}")
        return value
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
        if isinstance(value, float) and value.is_integer():  # 1e6, 1.0e+6
            return int(value)
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
            hint = foreign_field_hint(cls, key)
            raise ConfigError(f"{where}.{key}: {hint}" if hint else f"{where}.{key}: unknown key{did_you_mean(key, fields)}")
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
        if isinstance(value, nn.Module) or callable(value):  # an instance: no import path
            return repr(value)
        return value

    return {f.name: plain(getattr(config, f.name)) for f in dataclasses.fields(config) if f.init}
