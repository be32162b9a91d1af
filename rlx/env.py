"""The batched, torch-native environment protocol and checks on what envs return.

An rlx env simulates ``B`` independent sub-environments at once, on one device, and
exchanges whole batches of tensors with the algorithm:

* ``reset(*, config=None)`` returns the first observations, ``[B, *obs]`` (a tensor, or
  a TensorDict with batch size ``[B]`` for a ``Composite`` observation spec).
* ``step(actions)`` takes ``[B, *action]`` actions and returns a TensorDict with batch
  size ``[B]`` holding:

  ========== ============== ======== =====================================================
  key        shape          required meaning
  ========== ============== ======== =====================================================
  obs        ``[B, *obs]``  yes      next observation; for a sub-env that just ended, the
                                     FIRST observation of its next episode (auto-reset)
  rewards    ``[B, 1]``     yes      reward of this transition
  terminated ``[B, 1]`` bool no      ended in a terminal state: no bootstrap
  truncated  ``[B, 1]`` bool no      cut short (time limit): bootstrap from V(final_obs)
  final_obs  ``[B, *obs]``  see note the true last observation of an episode that ended;
                                     required whenever ``truncated`` is returned
  ========== ============== ======== =====================================================

An env that returns neither ``terminated`` nor ``truncated`` is an infinite-horizon env,
as in rl8's protocol, and runs unchanged. rlx never requires an env to subclass
:class:`Env`: any class with this constructor, these attributes and these two methods
works (duck typing), so envs written for rl8 plug in as they are.

Optional extras an env may provide:

* ``max_num_envs`` / ``max_horizon`` class attributes: checked at build, with an error.
* ``state_dict()`` / ``load_state_dict(state)``: the env's full simulator state, so that a
  checkpoint resumes exactly. Without them a resumed run starts from fresh resets.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Protocol

import torch
from tensordict import TensorDictBase
from torchrl.data import Composite, TensorSpec

from rlx.core.yaml_types import import_object, object_path

__all__ = [
    "Env",
    "EnvFactory",
    "EnvOutputError",
    "OBS",
    "REWARDS",
    "TERMINATED",
    "TRUNCATED",
    "FINAL_OBS",
    "ACTION_MASK",
    "check_device_available",
    "check_env_limits",
    "load_state_tensors",
    "check_obs",
    "check_devices",
    "canonical_device",
    "resolve_device",
    "env_record",
    "OBS_GROUPS",
    "group_spec",
    "check_obs_groups",
    "select_rows",
    "bound_env_class",
    "resolve_make_env",
    "check_step_output",
    "env_is_graph_safe",
]

OBS = "obs"
REWARDS = "rewards"
TERMINATED = "terminated"
TRUNCATED = "truncated"
FINAL_OBS = "final_obs"
#: Entry of a ``Composite`` observation holding a boolean mask of valid discrete actions.
ACTION_MASK = "action_mask"


class EnvOutputError(ValueError):
    """An env returned something that does not match its specs or the protocol."""


class Env(ABC):
    """Base class for batched torch-native environments (optional to subclass).

    Args:
        num_envs: Number of independent sub-environments ``B`` simulated at once.
        horizon: Number of steps the algorithm takes per collect, for envs that want to
            know it; ``None`` when unknown.
        device: Device of every tensor the env returns.

    Raises:
        ValueError: ``num_envs`` exceeds the class's ``max_num_envs`` or ``horizon``
            exceeds its ``max_horizon``.
    """

    #: Spec of ONE sub-env's observation (a ``Composite`` for dict observations).
    observation_spec: TensorSpec
    #: Spec of ONE sub-env's action.
    action_spec: TensorSpec
    #: Optional limit on ``num_envs``; checked at construction and at build.
    max_num_envs: ClassVar[int]
    #: Optional limit on ``horizon``; checked at construction and at build.
    max_horizon: ClassVar[int]
    #: The env's ``step`` may be captured in a CUDA graph and replayed (``AlgorithmConfig(
    #: cudagraphs=True)`` then captures collect's whole T loop). Declare it only if
    #: ``step``: keeps its state in tensors that it updates in place (``copy_``, ``add_``;
    #: never rebinding an attribute to a new tensor, which a replay would not see), never
    #: syncs with the host, has no Python-side state that changes from step to step, and
    #: returns the same keys, shapes and dtypes on every call. A replay then runs exactly
    #: what an eager step would. The built-in envs declare it; the default is False.
    graph_safe: ClassVar[bool] = False

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        device: torch.device | str = "cpu",
    ) -> None:
        check_env_limits(type(self), num_envs, horizon)
        self.num_envs = num_envs
        self.horizon = horizon
        self.device = torch.device(device)

    @abstractmethod
    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor | TensorDictBase:
        """Reset every sub-env and return the first observations, ``[B, *obs]``."""

    @abstractmethod
    def step(self, actions: torch.Tensor) -> TensorDictBase:
        """Advance every sub-env by one step (see the module docstring for the keys)."""


class EnvFactory(Protocol):
    """Anything that builds an env: an env class, or a function with its signature."""

    def __call__(
        self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu"
    ) -> Env: ...


def env_is_graph_safe(env: Any) -> bool:
    """Whether ``env`` (an instance or class) declares ``graph_safe = True``.

    Duck-typed envs that never subclass :class:`Env` are not graph safe unless they say
    so; a truthy non-bool (a mock, a string) does not count.
    """
    return getattr(env, "graph_safe", False) is True


def check_env_limits(env_cls: Any, num_envs: int, horizon: int | None) -> None:
    """Check ``num_envs`` and ``horizon`` against an env class's declared limits.

    Raises:
        ValueError: naming the field, the value and the limit. Limits are never clamped
            silently.
    """
    name = getattr(env_cls, "__name__", repr(env_cls))
    max_num_envs = getattr(env_cls, "max_num_envs", None)
    if max_num_envs is not None and num_envs > max_num_envs:
        raise ValueError(
            f"num_envs={num_envs} exceeds {name}.max_num_envs={max_num_envs}; "
            f"lower num_envs to at most {max_num_envs}"
        )
    max_horizon = getattr(env_cls, "max_horizon", None)
    if max_horizon is not None and horizon is not None and horizon > max_horizon:
        raise ValueError(
            f"horizon={horizon} exceeds {name}.max_horizon={max_horizon}; "
            f"lower horizon to at most {max_horizon}"
        )


def _check_tensor(
    name: str, value: Any, shape: tuple[int, ...], dtype: torch.dtype | None, where: str
) -> None:
    if not isinstance(value, torch.Tensor):
        raise EnvOutputError(f"{where}: '{name}' must be a torch.Tensor, got {type(value).__name__}")
    if tuple(value.shape) != tuple(shape):
        raise EnvOutputError(
            f"{where}: '{name}' has shape {list(value.shape)}, expected {list(shape)}"
        )
    if dtype is not None and value.dtype != dtype:
        raise EnvOutputError(f"{where}: '{name}' has dtype {value.dtype}, expected {dtype}")


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` is CUDA when present, else CPU; anything else is honoured as given."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def check_device_available(device: torch.device | str, *, where: str = "device") -> torch.device:
    """``device`` (resolved), or an error saying why this machine cannot use it.

    Raises:
        ValueError: a CUDA device with a torch built without CUDA, with no GPU visible, or
            with an index past the GPUs there are, naming ``where``.
    """
    device = resolve_device(device)
    if device.type != "cuda":
        return device
    if torch.version.cuda is None:
        raise ValueError(
            f"{where}: {str(device)!r}, but this torch ({torch.__version__}) is a CPU-only build; use "
            "device 'cpu' (or 'auto', which picks CUDA when there is one), or install a CUDA build of torch"
        )
    count = torch.cuda.device_count()
    if count == 0 or (device.index is not None and device.index >= count):
        raise ValueError(
            f"{where}: {str(device)!r}, but {count} CUDA device(s) are visible; use device 'cpu' or 'auto', "
            "or check CUDA_VISIBLE_DEVICES and the driver (nvidia-smi)"
        )
    return device


def canonical_device(device: torch.device | str) -> torch.device:
    """One spelling per device: ``cpu`` for ``cpu:0``, ``cuda:<current>`` for ``cuda``, so
    comparing devices compares where tensors live, not how the device was named."""
    device = torch.device(device)
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device


def check_devices(x: Any, device: torch.device | str, *, where: str) -> None:
    """Raise unless every tensor of ``x`` (a tensor or TensorDict) is on ``device``: an
    env's outputs on another device would be copied (and synchronised) every step.

    Raises:
        EnvOutputError: naming the first key on another device and both devices.
    """
    expected = canonical_device(device)
    leaves = x.items(include_nested=True, leaves_only=True) if isinstance(x, TensorDictBase) else [("obs", x)]
    for key, value in leaves:
        if isinstance(value, torch.Tensor) and canonical_device(value.device) != expected:
            name = ".".join(key) if isinstance(key, tuple) else key
            raise EnvOutputError(
                f"{where}: '{name}' is on {value.device}, expected {expected} (the algorithm's device; "
                "an env builds its tensors on the device it is given)"
            )


def check_obs(
    obs: Any, spec: TensorSpec, num_envs: int, *, where: str, name: str = OBS
) -> None:
    """Check a batch of observations against one sub-env's observation spec.

    Args:
        obs: ``[B, *obs]`` tensor, or a TensorDict with batch size ``[B]`` whose entries
            match a ``Composite`` spec.
        spec: Spec of one sub-env's observation.
        num_envs: Expected batch size ``B``.
        where: Where the observation came from, for the message (``"env.reset()"``).
        name: Key path for the message.

    Raises:
        EnvOutputError: naming the key, the shape it got and the shape expected.
    """
    if isinstance(spec, Composite):
        if not isinstance(obs, TensorDictBase):
            raise EnvOutputError(
                f"{where}: '{name}' must be a TensorDict for a Composite observation spec, "
                f"got {type(obs).__name__}"
            )
        for key, sub_spec in spec.items():
            if key not in obs.keys():
                raise EnvOutputError(f"{where}: '{name}.{key}' is missing")
            check_obs(obs.get(key), sub_spec, num_envs, where=where, name=f"{name}.{key}")
        return
    _check_tensor(name, obs, (num_envs, *spec.shape), spec.dtype, where)


def check_step_output(
    out: Any, observation_spec: TensorSpec, num_envs: int, *, where: str = "env.step()"
) -> None:
    """Check one ``env.step`` output against the protocol (see the module docstring).

    Raises:
        EnvOutputError: naming the missing or malformed key and the shapes involved.
    """
    if not isinstance(out, TensorDictBase):
        raise EnvOutputError(f"{where} must return a TensorDict, got {type(out).__name__}")
    for key in (OBS, REWARDS):
        if key not in out.keys():
            raise EnvOutputError(
                f"{where}: required key '{key}' is missing (got keys {sorted(out.keys())})"
            )
    check_obs(out.get(OBS), observation_spec, num_envs, where=where)
    rewards = out.get(REWARDS)
    _check_tensor(REWARDS, rewards, (num_envs, 1), None, where)
    if not rewards.is_floating_point():
        raise EnvOutputError(f"{where}: 'rewards' must be floating point, got {rewards.dtype}")
    for key in (TERMINATED, TRUNCATED):
        if key in out.keys():
            _check_tensor(key, out.get(key), (num_envs, 1), torch.bool, where)
    if TRUNCATED in out.keys():
        if FINAL_OBS not in out.keys():
            raise EnvOutputError(
                f"{where}: returns 'truncated' but no 'final_obs'; an env that can "
                "truncate must return the true last observation as 'final_obs'"
            )
        check_obs(out.get(FINAL_OBS), observation_spec, num_envs, where=where, name=FINAL_OBS)


def load_state_tensors(env: Any, state: dict[str, torch.Tensor], names: tuple[str, ...]) -> None:
    """Copy checkpointed tensors into an env's state buffers, in place, shape-checked.

    In place keeps the buffers' addresses (a captured CUDA graph keeps reading them);
    the shape check refuses a checkpoint from another ``num_envs``, which ``copy_``
    would otherwise broadcast silently.

    Raises:
        ValueError: naming the entry, its shape and the expected one.
    """
    for name in names:
        buffer, value = getattr(env, name), state[name]
        if tuple(value.shape) != tuple(buffer.shape):
            raise ValueError(
                f"load_state_dict: '{name}' has shape {list(value.shape)}, expected "
                f"{list(buffer.shape)}; was the checkpoint saved with another num_envs?"
            )
        buffer.copy_(value)


def _plain(value: Any) -> Any:
    """``value`` if it is plain data (YAML-safe, alike in every process), else its type's name:
    a repr would hold a per-process address."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return type(value).__qualname__


def env_record(env_cls: Any) -> tuple[str, dict[str, Any]]:
    """``(import path, env_kwargs)`` that rebuild an env class or factory, where possible.

    Handles plain classes, ``functools.partial`` factories and classes made by a
    ``factory()`` classmethod that records its arguments in ``factory_kwargs`` (such as
    :meth:`rlx.envs.GymnasiumEnv.factory`). Arguments that are not plain data are named by
    their type, so the record is the same on every rank that built the same env.
    """
    if isinstance(env_cls, functools.partial):
        return object_path(env_cls.func), _plain(dict(env_cls.keywords))
    factory_kwargs = getattr(env_cls, "factory_kwargs", None)
    if factory_kwargs:
        base = next(c for c in env_cls.__mro__[1:] if not getattr(c, "factory_kwargs", None) or c.factory_kwargs != factory_kwargs)
        return object_path(base), _plain(dict(factory_kwargs))
    return object_path(env_cls), {}


#: The observation groups a model reads: ``{"actor": [keys], "critic": [keys]}``.
OBS_GROUPS = ("actor", "critic")


def group_spec(observation_spec: TensorSpec, keys: list[str] | None) -> TensorSpec:
    """The part of a ``Composite`` observation spec that a group of top-level ``keys``
    names (``action_mask`` kept, since it shapes the distribution); the whole spec when
    ``keys`` is ``None``."""
    if keys is None:
        return observation_spec
    kept = [*keys, *([ACTION_MASK] if ACTION_MASK in observation_spec.keys() and ACTION_MASK not in keys else [])]
    return Composite({k: observation_spec[k] for k in kept}, device=observation_spec.device)


def check_obs_groups(obs_groups: dict[str, list[str]] | None, observation_spec: TensorSpec) -> None:
    """Refuse groups that name no key, a key the observation lacks, or a tensor observation.

    Raises:
        ValueError: naming the group and key, and listing the keys the env has.
    """
    if obs_groups is None:
        return
    if not isinstance(observation_spec, Composite):
        raise ValueError(
            f"obs_groups: needs a Composite observation (groups name its top-level keys), got "
            f"{type(observation_spec).__name__}{list(observation_spec.shape)}"
        )
    have = sorted(observation_spec.keys())
    for group, keys in obs_groups.items():
        if not keys:
            raise ValueError(f"obs_groups.{group}: is empty; the env's observation keys are {have}")
        for key in keys:
            if key not in have:
                raise ValueError(f"obs_groups.{group}: {key!r} is not an observation key; the env's keys are {have}")


def select_rows(rows: torch.Tensor, a: Any, b: Any) -> Any:
    """``a`` where ``rows`` (``[B]`` bool), else ``b``: tensors ``[B, ...]``, or TensorDicts
    entry by entry (``b``'s entries that ``a`` lacks are kept). Adapters use it to take the
    true last observation only where an episode ended."""
    if isinstance(b, torch.Tensor):
        return torch.where(rows.view(-1, *([1] * (b.dim() - 1))), a, b)
    out = {k: select_rows(rows, a.get(k), b.get(k)) if k in a.keys() else b.get(k) for k in b.keys()}
    return type(b)(out, batch_size=b.batch_size, device=b.device)


def bound_env_class(cls: type, target: Any, factory_kwargs: dict[str, Any]) -> type:
    """A subclass of the adapter ``cls`` with ``factory_kwargs`` bound (what an adapter's
    ``factory()`` returns): ``env_cls(num_envs, horizon, device=...)`` like any env class,
    named after ``target`` (an env id, import path or function)."""
    name = target if isinstance(target, str) else getattr(target, "__name__", "custom")
    return type(f"{cls.__name__}[{name}]", (cls,),
                {"factory_kwargs": factory_kwargs, "__module__": cls.__module__, "__doc__": cls.__doc__})


def resolve_make_env(make_env: Any, where: str) -> Any:
    """``make_env`` itself, or the function its import path (``"pkg.mod:fn"``) names.

    Raises:
        ValueError: no ``make_env`` was given (naming ``where``).
    """
    if make_env is None:
        raise ValueError(f"{where}: make_env is required (the adapter's factory(make_env), or env_kwargs.make_env)")
    return import_object(make_env, where=where) if isinstance(make_env, str) else make_env
