"""Hyperparameters that differ between members: a sweep or a population trained as one batch.

``member_hparams={"lr": [...], "entropy_coeff": [...]}`` on a config gives member ``i`` the
``i``-th value of each listed field (``num_seeds`` values each); every other field stays
the config's, shared. A field may differ when it changes no tensor's shape and no loop of
the update: the learning rate and the entropy coefficient (with their schedules), PPO's
clip parameters, value coefficient and KL target, the gradient-norm bound, gamma and
GAE's lambda, NPG's max KL and damping (:data:`MEMBER_FIELDS`, per config class).

:class:`MemberHparams` holds each varied value twice: on the host (a list, which the
trainer, PBT and the statistics read without a sync) and on the device (an ``[S]``
float64 tensor, from which every use derives its own dtype). Float64 keeps a member's
arithmetic a single run's: a single run passes Python floats (float64), which torch
casts to the tensor's dtype at each use; a member's value is cast the same way.

The learning rate is the members' LR factor (:attr:`rlx.members.Members.lr_factor`,
``lr_i / lr``): the LR schedule and the KL-adaptive rule move it as they move a single
run's. A member's entropy coefficient under ``entropy_coeff_schedule`` follows the
schedule scaled by ``entropy_coeff_i / schedule(0)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["MEMBER_FIELDS", "SHARED_FIELDS", "MemberHparams", "MemberValues", "check_member_hparams", "check_member_keys", "member_fields_of"]

#: The fields that may differ between members, by the config class that first has them.
#: ``lr`` is ``optimizer_config["lr"]``.
MEMBER_FIELDS: dict[str, tuple[str, ...]] = {
    "CommonConfig": ("lr", "gamma", "gae_lambda", "max_grad_norm"),
    "MinibatchConfig": ("entropy_coeff", "vf_coeff"),
    "AlgorithmConfig": ("clip_param", "vf_clip_param", "target_kl_div"),
    "NPGConfig": ("max_kl", "damping"),
}

#: Fields that stay shared, and why (what a sweep asking to vary them is told).
SHARED_FIELDS: dict[str, str] = {
    "num_envs": "it sets the env's and the buffer's shapes",
    "horizon": "it sets the buffer's shape",
    "model_config": "network widths set the stacked parameters' shapes",
    "sgd_minibatch_size": "every minibatch holds the same rows of each member",
    "num_sgd_iters": "the members' epochs run as one loop",
    "optim_critic_iters": "the members' critic epochs run as one loop",
    "num_seeds": "it is the number of members",
}

#: Fields whose value ``None`` disables a feature: a member cannot switch it on or off.
_NONE_DISABLES = ("max_grad_norm", "vf_clip_param", "target_kl_div")


def member_fields_of(config_cls: type) -> tuple[str, ...]:
    """The fields ``config_cls`` lets differ between members (:data:`MEMBER_FIELDS` of it
    and its bases)."""
    names = {c.__name__ for c in config_cls.__mro__}
    fields = [f for owner, fs in MEMBER_FIELDS.items() if owner in names for f in fs]
    return tuple(f for f in fields if f == "lr" or hasattr(config_cls, f))


def check_member_keys(config_cls: type, names: Sequence[str] | Mapping[str, Any]) -> None:
    """Raise a :class:`~rlx.core.config_fields.ConfigError` naming the first of ``names``
    that cannot differ between members of a ``config_cls``, and why."""
    from rlx.core.config_fields import ConfigError

    where = f"{config_cls.__name__}.member_hparams"
    allowed = member_fields_of(config_cls)
    for name in names:
        if name in SHARED_FIELDS:
            raise ConfigError(f"{where}: {name!r} cannot differ between members ({SHARED_FIELDS[name]}); "
                              f"fields that can: {list(allowed)}")
        if name not in allowed:
            raise ConfigError(f"{where}: {name!r} cannot differ between members of a {config_cls.__name__}; "
                              f"fields that can: {list(allowed)}")


def _check_value(config: Any, name: str, i: int, value: Any) -> float:
    where = f"{type(config).__name__}.member_hparams[{name!r}][{i}]"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: must be a finite number, got {value!r}")
    value = float(value)
    if name in ("gamma", "gae_lambda") and not 0.0 <= value <= 1.0:
        raise ValueError(f"{where}: {name} must be in [0, 1], got {value}")
    if name in ("entropy_coeff", "vf_coeff", "damping") and value < 0:
        raise ValueError(f"{where}: {name} must be >= 0, got {value}")
    if name in ("lr", "clip_param", "vf_clip_param", "target_kl_div", "max_kl", "max_grad_norm") and value <= 0:
        raise ValueError(f"{where}: {name} must be > 0, got {value}")
    return value


def check_member_hparams(config: Any) -> dict[str, list[float]]:
    """Validate ``config.member_hparams`` against the config (raises the config's
    :class:`~rlx.core.config_fields.ConfigError` naming the field) and return it with
    float values."""
    from rlx.core.config_fields import ConfigError

    where = f"{type(config).__name__}.member_hparams"
    spec = config.member_hparams
    if config.num_seeds < 2:
        raise ConfigError(f"{where}: needs num_seeds > 1 (one value per member), got num_seeds={config.num_seeds}")
    if not isinstance(spec, Mapping) or not spec:
        raise ConfigError(f"{where}: must map field names to lists of num_seeds values, got {spec!r}")
    check_member_keys(type(config), spec)
    out: dict[str, list[float]] = {}
    for name, values in spec.items():
        if not isinstance(values, Sequence) or isinstance(values, str) or len(values) != config.num_seeds:
            got = len(values) if isinstance(values, Sequence) and not isinstance(values, str) else repr(values)
            raise ConfigError(f"{where}[{name!r}]: needs one value per member, num_seeds={config.num_seeds}, got {got}")
        if name in _NONE_DISABLES and getattr(config, name) is None:
            raise ConfigError(f"{where}[{name!r}]: {name} is None in the config (off for every member): set it to "
                              "a number to let members differ in it")
        if name == "entropy_coeff" and config.entropy_coeff_schedule is not None and config.entropy_coeff_schedule[0][1] == 0:
            raise ConfigError(f"{where}['entropy_coeff']: each member scales entropy_coeff_schedule by its value over "
                              "the schedule's first, which is 0: start the schedule above 0")
        try:
            out[name] = [_check_value(config, name, i, v) for i, v in enumerate(values)]
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return out


class MemberHparams:
    """Each member's value of the varied hyperparameters (see the module docstring).

    Args:
        config: The algorithm's config (its ``member_hparams`` checked).
        device: Where the ``[S]`` tensors live.
    """

    def __init__(self, config: Any, device: torch.device) -> None:
        self.config = config
        self.size = config.num_seeds
        self.device = device
        spec = check_member_hparams(config) if config.member_hparams else {}
        #: Host values of each varied field (``lr`` included), member by member.
        self.values: dict[str, list[float]] = {k: list(v) for k, v in spec.items()}
        #: Device values, ``[S]`` float64 (``lr`` lives in ``Members.lr_factor``).
        self.tensors: dict[str, Tensor] = {
            k: torch.tensor(v, dtype=torch.float64, device=device) for k, v in spec.items() if k != "lr"
        }
        self._rows: dict[tuple[str, int, torch.dtype], Tensor] = {}

    @property
    def names(self) -> list[str]:
        """The varied fields."""
        return list(self.values)

    def varies(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str, dtype: torch.dtype = torch.float32) -> Any:
        """The config's value of ``name`` (shared), or each member's as an ``[S]`` tensor
        of ``dtype``."""
        if name not in self.tensors:
            return getattr(self.config, name)
        return self.tensors[name].to(dtype)

    def host(self, name: str) -> list[float]:
        """Each member's value of ``name`` (the config's for every member when shared)."""
        if name in self.values:
            return list(self.values[name])
        value = self.config.optimizer_kwargs["lr"] if name == "lr" else getattr(self.config, name)
        return [value] * self.size

    def per_env(self, name: str, envs_per_member: int) -> Tensor:
        """``[S * B, 1, 1]`` float64: each env's member's value (for the GAE and the reward
        scaler, whose rows are envs)."""
        key = (name, envs_per_member, torch.float64)
        if key not in self._rows:
            self._rows[key] = self.tensors[name].repeat_interleave(envs_per_member).view(-1, 1, 1)
        return self._rows[key]

    def set(self, name: str, values: Sequence[float]) -> None:
        """Give each member a new value of ``name`` (PBT's explore and exploit): in place
        on the device, so a captured graph reads the new values."""
        if name not in self.values:
            raise KeyError(f"{name!r} is not varied between members (member_hparams has {self.names})")
        self.values[name] = [float(v) for v in values]
        if name in self.tensors:
            self.tensors[name].copy_(torch.tensor(self.values[name], dtype=torch.float64))
            for (field, envs, _), rows in self._rows.items():
                if field == name:
                    rows.copy_(self.tensors[name].repeat_interleave(envs).view(-1, 1, 1))

    def state_dict(self) -> dict[str, Tensor]:
        return {k: torch.tensor(v, dtype=torch.float64) for k, v in self.values.items()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        for name, values in state.items():
            if name in self.values:
                self.set(name, values.tolist())  # SYNC: at load (host values, kept on the CPU)


class MemberValues:
    """What an algorithm answers about its members' hyperparameters (a base of
    :class:`rlx.algorithms.base.Algorithm`): their values, their change in place (PBT),
    their statistics, and each env's value for the GAE. Reads ``self.hparams``,
    ``self.members``, ``self.config`` and ``self.lr``."""

    hparams: MemberHparams
    members: Any
    config: Any
    lr: float

    def _per_env(self, name: str) -> float | Tensor:
        """The config's ``name``, or with members that differ in it each env's (``[B, 1, 1]``)."""
        if self.hparams.varies(name):
            return self.hparams.per_env(name, self.config.num_envs)
        return getattr(self.config, name)

    def member_values(self, name: str) -> list[float]:
        """Each member's current value of the hyperparameter ``name`` (``lr``: the LR the
        next update applies, schedule and KL-adaptive rule included), from host mirrors."""
        if name == "lr":
            return self.members.learning_rates(self.lr)
        return self.hparams.host(name)

    def set_member_values(self, name: str, values: list[float]) -> None:
        """Give each member a new value of a varied hyperparameter (PBT), in place on the
        device. ``lr`` sets each member's factor over the current base LR."""
        if name == "lr":
            if self.lr <= 0:
                raise ValueError("set_member_values('lr'): the base LR is 0 (annealed): member LRs are 0 too")
            self.members.set_lr_factors([v / self.lr for v in values])
            return
        self.hparams.set(name, values)
        self._hparams_changed(name)

    def _hparams_changed(self, name: str) -> None:
        """Refresh what derives from the member values of ``name`` (subclasses)."""

    def hparam_stats(self) -> dict[str, float]:
        """``member{i}/hparams/{name}``: each member's value of each varied hyperparameter."""
        out: dict[str, float] = {}
        for name in self.hparams.names:
            out.update(self.members.host_dict(f"hparams/{name}", self.member_values(name)))
        return out
