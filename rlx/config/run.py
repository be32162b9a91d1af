"""Run configs: the YAML file ``rlx train`` reads, and the env factory it names.

A run config names an env (an import path, with keyword arguments to bind), an
algorithm (a key of :data:`ALGORITHMS`) with its config fields, and the trainer's
settings (:class:`TrainerConfig`)::

    env: rlx.envs:CartPole
    algorithm: ppo
    config: {num_envs: 32, horizon: 64}
    trainer: {max_env_steps: 200000, stop_at: {episodes/length_mean: 475}}
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlx.config import (
    A2CConfig,
    AlgorithmConfig,
    CommonConfig,
    DistillationConfig,
    NPGConfig,
    RecurrentA2CConfig,
    RecurrentAlgorithmConfig,
)
from rlx.core.config_fields import ConfigError, config_dataclass, did_you_mean
from rlx.core.yaml_types import config_from_dict, config_to_dict, import_object, load_yaml

__all__ = ["ALGORITHMS", "RunConfig", "TrainerConfig", "env_factory", "load_run_config"]

#: Algorithm names usable in a run config, and their config classes.
ALGORITHMS: dict[str, type[CommonConfig]] = {
    "ppo": AlgorithmConfig,
    "npg": NPGConfig,
    "recurrent_ppo": RecurrentAlgorithmConfig,
    "a2c": A2CConfig,
    "recurrent_a2c": RecurrentA2CConfig,
    "distillation": DistillationConfig,
}


@config_dataclass
class TrainerConfig:
    """How long to train, when to evaluate and checkpoint, and what to print."""

    #: Stop once this many env transitions have been collected (all envs together).
    max_env_steps: int | None = None
    #: Stop after this many iterations (one collect and one step each).
    max_iterations: int | None = None
    #: Stop after this many seconds of training (resumed runs count earlier time).
    max_wall_s: float | None = None
    #: Stop once a metric reaches a value: ``{"episodes/length_mean": 475}`` stops when
    #: the mean episode length of an iteration is at least 475.
    stop_at: dict[str, float] | None = None
    #: Stop once a metric is at most a value: ``{"losses/vf": 1e-3}``.
    stop_below: dict[str, float] | None = None
    #: Stop when this metric has not improved (increased) by ``plateau_min_delta`` for
    #: ``plateau_patience`` iterations in which it was reported.
    plateau_metric: str | None = None
    #: Iterations without improvement before a plateau stops the run.
    plateau_patience: int = 50
    #: Smallest increase that counts as an improvement.
    plateau_min_delta: float = 0.0
    #: Evaluate the deterministic policy every N iterations (and at the end); 0: never.
    eval_every: int = 0
    #: Sub-envs of the evaluation env (a separate instance).
    eval_num_envs: int = 16
    #: Complete episodes to average over in one evaluation.
    eval_episodes: int = 16
    #: Give up an evaluation after this many env steps (for envs that never end).
    eval_max_steps: int = 10_000
    #: Write a checkpoint every N iterations (and at the end); 0: only at the end.
    checkpoint_every: int = 10
    #: Checkpoints to keep (the newest).
    keep_checkpoints: int = 3
    #: Without a terminal, print a progress line every N iterations.
    log_every: int = 10
    #: Show progress on the console.
    progress: bool = True
    #: Write TensorBoard event files when ``torch.utils.tensorboard`` is available.
    tensorboard: bool = True
    #: Population-based training of the algorithm's members (:class:`rlx.members.pbt.PBTConfig`'s
    #: fields: ``{members: 16, every: 10, metric: episodes/return_mean, ...}``); ``None``: off.
    pbt: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for field in ("max_env_steps", "max_iterations"):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ConfigError(f"TrainerConfig.{field}: must be a positive int or null, got {value!r}")
        if self.max_wall_s is not None and not self.max_wall_s > 0:
            raise ConfigError(f"TrainerConfig.max_wall_s: must be positive, got {self.max_wall_s!r}")
        for field in ("eval_every", "checkpoint_every"):
            if isinstance(getattr(self, field), bool) or not isinstance(getattr(self, field), int) or getattr(self, field) < 0:
                raise ConfigError(f"TrainerConfig.{field}: must be an int >= 0, got {getattr(self, field)!r}")
        for field in ("eval_num_envs", "eval_episodes", "eval_max_steps", "keep_checkpoints", "log_every", "plateau_patience"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"TrainerConfig.{field}: must be a positive int, got {value!r}")
        if self.pbt is not None:
            from rlx.members.pbt import PBTConfig

            PBTConfig.from_dict(self.pbt)
        for field in ("stop_at", "stop_below"):
            value = getattr(self, field)
            if value is not None and (
                not isinstance(value, dict)
                or not all(isinstance(k, str) and isinstance(v, (int, float)) for k, v in value.items())
            ):
                raise ConfigError(f"TrainerConfig.{field}: must map metric names to numbers, got {value!r}")



def env_factory(env: str, env_kwargs: dict[str, Any] | None = None) -> Any:
    """The env class at import path ``env``, with ``env_kwargs`` bound when given.

    The bound factory keeps the class's ``max_num_envs`` / ``max_horizon`` limits, so
    they are still checked at build.
    """
    env_cls = import_object(env, where="env")
    if not env_kwargs:
        return env_cls
    bound = functools.partial(env_cls, **env_kwargs)
    for attr in ("max_num_envs", "max_horizon", "__name__"):
        if hasattr(env_cls, attr):
            setattr(bound, attr, getattr(env_cls, attr))
    return bound



@dataclasses.dataclass
class RunConfig:
    """A whole run: which env, which algorithm with which fields, and the trainer."""

    env: str  #: import path of the env class, ``"rlx.envs:CartPole"``
    algorithm: str  #: a key of :data:`ALGORITHMS`
    config: CommonConfig
    trainer: TrainerConfig
    #: Keyword arguments bound to the env class (``{env: CartPole-v1}`` for
    #: ``rlx.envs:GymnasiumEnv``).
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def env_cls(self) -> Any:
        return env_factory(self.env, self.env_kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as written to ``config.yaml``."""
        out: dict[str, Any] = {"env": self.env}
        if self.env_kwargs:
            out["env_kwargs"] = dict(self.env_kwargs)
        out.update(
            algorithm=self.algorithm, config=config_to_dict(self.config), trainer=config_to_dict(self.trainer)
        )
        return out

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "config") -> RunConfig:
        """Build from plain data, naming the place of any unknown or ill-typed key.

        Raises:
            ConfigError: an unknown key, a value of the wrong type, an unknown algorithm
                or an env that cannot be imported, with its place.
        """
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: must be a mapping with keys env, algorithm, config, trainer")
        valid = ["algorithm", "config", "env", "env_kwargs", "trainer"]
        unknown = sorted(set(data) - set(valid))
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: unknown top-level key{did_you_mean(unknown[0], valid)}")
        env_kwargs = data.get("env_kwargs") or {}
        if not isinstance(env_kwargs, dict):
            raise ConfigError(f"{where}.env_kwargs: must be a mapping of constructor arguments, got {env_kwargs!r}")
        if not isinstance(data.get("env"), str):
            raise ConfigError(f"{where}.env: must be an import path like 'rlx.envs:CartPole', got {data.get('env')!r}")
        algorithm = data.get("algorithm", "ppo")
        if algorithm not in ALGORITHMS:
            raise ConfigError(f"{where}.algorithm: must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
        run = cls(
            env=data["env"],
            algorithm=algorithm,
            config=config_from_dict(ALGORITHMS[algorithm], data.get("config"), where=f"{where}.config"),
            trainer=config_from_dict(TrainerConfig, data.get("trainer"), where=f"{where}.trainer"),
            env_kwargs=dict(env_kwargs),
        )
        run.env_cls  # import now: a bad env path fails before anything runs
        return run


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: {key!r} is not a mapping")
    node[keys[-1]] = value


def load_run_config(path: str | Path, overrides: Iterable[str] = ()) -> RunConfig:
    """Read a YAML run config and apply ``key=value`` overrides (``config.num_envs=64``).

    Values of overrides are parsed as YAML (``true``, ``1e-3``, ``[64, 64]``).

    Raises:
        FileNotFoundError: no such file.
        ConfigError: bad YAML, a bad override, or a bad key or value (see
            :meth:`RunConfig.from_dict`).
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no config file at {path}")
    try:
        data = load_yaml(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from e
    data = data if data is not None else {}
    for item in overrides:
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: must be a mapping")
        _set_dotted(data, *_parse_override(item))
    return RunConfig.from_dict(data, where=path.name)


def _parse_override(item: str) -> tuple[str, Any]:
    """``"config.num_envs=64"`` -> ``("config.num_envs", 64)``: the value parsed as YAML."""
    import yaml

    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected key=value, like config.num_envs=64")
    try:
        return key, load_yaml(raw)
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {item!r}: value is not valid YAML ({e})") from e
