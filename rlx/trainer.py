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

import dataclasses
import functools
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from rlx import __version__
from rlx import distributed as rdist
from rlx._sync import allowed_sync
from rlx.config import (
    AlgorithmConfig,
    CommonConfig,
    ConfigError,
    NPGConfig,
    RecurrentAlgorithmConfig,
    config_dataclass,
    config_from_dict,
    config_to_dict,
    import_object,
    object_path,
)
from rlx.env import OBS, TERMINATED, TRUNCATED, REWARDS
from rlx.policy import RecurrentPolicy

if TYPE_CHECKING:
    from rlx.algorithms.base import Algorithm

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

#: Algorithm names usable in a run config, and their config classes.
ALGORITHMS: dict[str, type[CommonConfig]] = {
    "ppo": AlgorithmConfig,
    "npg": NPGConfig,
    "recurrent_ppo": RecurrentAlgorithmConfig,
}
CHECKPOINT_FORMAT = 1


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
        for field in ("stop_at", "stop_below"):
            value = getattr(self, field)
            if value is not None and (
                not isinstance(value, dict)
                or not all(isinstance(k, str) and isinstance(v, (int, float)) for k, v in value.items())
            ):
                raise ConfigError(f"TrainerConfig.{field}: must map metric names to numbers, got {value!r}")


# -- stop conditions ----------------------------------------------------------------------


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
    """Stop once ``metrics[key]`` is at least (``above=True``) or at most ``threshold``."""

    key: str
    threshold: float
    above: bool = True

    def __call__(self, trainer: Trainer, metrics: dict[str, float]) -> str | None:
        value = metrics.get(self.key)
        if value is None or math.isnan(value):
            return None
        hit = value >= self.threshold if self.above else value <= self.threshold
        return f"{self.key} = {value:.4g} {'>=' if self.above else '<='} {self.threshold:g}" if hit else None


@dataclasses.dataclass
class MetricPlateau:
    """Stop when ``metrics[key]`` has not risen by ``min_delta`` for ``patience`` reports."""

    key: str
    patience: int
    min_delta: float = 0.0
    best: float = -math.inf
    since_best: int = 0

    def __call__(self, trainer: Trainer, metrics: dict[str, float]) -> str | None:
        value = metrics.get(self.key)
        if value is None or math.isnan(value):
            return None
        if value > self.best + self.min_delta:
            self.best, self.since_best = value, 0
            return None
        self.since_best += 1
        if self.since_best >= self.patience:
            return f"{self.key} has not improved on {self.best:.4g} for {self.patience} iterations"
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "since_best": self.since_best}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.since_best = state["best"], state["since_best"]


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


# -- evaluation ---------------------------------------------------------------------------


@torch.no_grad()
def evaluate_policy(policy: Any, env: Any, *, episodes: int, max_steps: int, deterministic: bool = True) -> dict[str, float]:
    """Run the policy on ``env`` until ``episodes`` episodes have ended, in all sub-envs.

    Episodes that are still running when enough have ended are not counted, nor are
    those cut by ``max_steps``. Uses a fork of torch's RNG, so training continues with
    the same random numbers whether or not it evaluates.

    Returns:
        ``eval/return_mean``, ``eval/length_mean`` (NaN when no episode ended) and
        ``eval/episodes``.
    """
    devices = [env.device] if torch.device(env.device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        obs = env.reset()
        B = env.num_envs
        device = torch.device(env.device)
        ret = torch.zeros(B, dtype=torch.float64, device=device)
        length = torch.zeros(B, dtype=torch.float64, device=device)
        totals = torch.zeros(3, dtype=torch.float64, device=device)  # count, return sum, length sum
        recurrent = isinstance(policy, RecurrentPolicy)
        if recurrent:  # every sub-env starts from the initial state, and restarts at each end
            state = policy.initial_state(B)
            resets = torch.ones(B, dtype=torch.bool, device=device)
        for t in range(max_steps):
            if recurrent:
                act, state = policy.act_step(obs, state, resets, deterministic=deterministic)
            else:
                act = policy.act(obs, deterministic=deterministic)
            out = env.step(act.env_actions)
            ret += out.get(REWARDS).squeeze(-1).double()
            length += 1
            done = torch.zeros(B, dtype=torch.bool, device=device)
            for key in (TERMINATED, TRUNCATED):
                if key in out.keys():
                    done |= out.get(key).squeeze(-1)
            if recurrent:
                resets = done
            d = done.double()
            totals += torch.stack([d.sum(), (ret * d).sum(), (length * d).sum()])
            ret *= 1 - d
            length *= 1 - d
            obs = out.get(OBS)
            if t % 32 == 31:
                with allowed_sync():
                    if totals[0].item() >= episodes:  # SYNC: evaluation only, every 32 steps
                        break
        with allowed_sync():
            count, return_sum, length_sum = totals.tolist()  # SYNC: evaluation result
    return {
        "eval/return_mean": return_sum / count if count else math.nan,
        "eval/length_mean": length_sum / count if count else math.nan,
        "eval/episodes": count,
    }


# -- checkpoints --------------------------------------------------------------------------


def save_checkpoint_atomic(payload: dict[str, Any], path: str | Path) -> Path:
    """Write ``payload`` with ``torch.save`` so that ``path`` is never seen half-written.

    The bytes go to a temporary file in the same directory, which is flushed and
    fsync-ed, then renamed over ``path`` (atomic on POSIX), and the directory is
    fsync-ed so the rename survives a crash.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint safely (``weights_only=True``: tensors and plain data only).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is empty, truncated or not a torch file (names it).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises OSError, EOFError, RuntimeError, pickle errors...
        raise ValueError(f"checkpoint {path} is unreadable ({type(e).__name__}: {e})") from e
    return state


def _load_resumable(path: Path | str) -> dict[str, Any]:
    state = load_checkpoint(path)
    if not isinstance(state, dict) or not {"algorithm", "trainer"} <= state.keys():
        raise ValueError(f"checkpoint {path} is not a Trainer checkpoint (no 'algorithm' and 'trainer' entries)")
    return state


#: Config fields a resumed run must share with its checkpoint: they fix the shapes of the
#: saved tensors (policy, optimizer, normalizers, per-env state) or what they mean.
RESUME_MUST_MATCH = ("env", "env_kwargs", "algorithm", "config.num_envs", "config.model_config", "config.normalize_obs")


def _config_differences(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{"config.field": (saved, current)}`` for the env, algorithm and algorithm fields
    that differ. The trainer section may change freely on resume, and so may ``seed``: it
    seeds a fresh run only, as a resume restores the RNG states."""
    out: dict[str, tuple[Any, Any]] = {}
    for key in ("env", "env_kwargs", "algorithm"):
        if saved.get(key) != current.get(key):
            out[key] = (saved.get(key), current.get(key))
    saved_cfg, current_cfg = saved.get("config") or {}, current.get("config") or {}
    for key in sorted((saved_cfg.keys() | current_cfg.keys()) - {"seed"}):
        if saved_cfg.get(key) != current_cfg.get(key):
            out[f"config.{key}"] = (saved_cfg.get(key), current_cfg.get(key))
    return out


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest ``checkpoints/ckpt_*.pt`` of a run directory, or ``None``."""
    files = sorted(Path(run_dir, "checkpoints").glob("ckpt_*.pt"))
    return files[-1] if files else None


# -- run configs (YAML) -------------------------------------------------------------------


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


def env_record(env_cls: Any) -> tuple[str, dict[str, Any]]:
    """``(import path, env_kwargs)`` that rebuild an env class or factory, where possible.

    Handles plain classes, ``functools.partial`` factories and classes made by a
    ``factory()`` classmethod that records its arguments in ``factory_kwargs`` (such as
    :meth:`rlx.envs.GymnasiumEnv.factory`).
    """
    if isinstance(env_cls, functools.partial):
        return object_path(env_cls.func), dict(env_cls.keywords)
    factory_kwargs = getattr(env_cls, "factory_kwargs", None)
    if factory_kwargs:
        base = next(c for c in env_cls.__mro__[1:] if not getattr(c, "factory_kwargs", None) or c.factory_kwargs != factory_kwargs)
        plain = {k: (v if isinstance(v, (str, int, float, bool, list, dict, type(None))) else repr(v)) for k, v in factory_kwargs.items()}
        return object_path(base), plain
    return object_path(env_cls), {}


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
            raise ConfigError(f"{where}: unknown top-level key(s) {unknown}; valid keys are {valid}")
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
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from e
    data = data if data is not None else {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key=value, like config.num_envs=64")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {item!r}: value is not valid YAML ({e})") from e
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: must be a mapping")
        _set_dotted(data, key, value)
    return RunConfig.from_dict(data, where=path.name)


# -- the trainer --------------------------------------------------------------------------


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
    """

    def __init__(
        self,
        algorithm: Algorithm,
        config: TrainerConfig | None = None,
        *,
        run_dir: str | Path | None = None,
        run_config: RunConfig | None = None,
        stop_conditions: Iterable[StopCondition] = (),
    ) -> None:
        self.algorithm = algorithm
        self.config = config or TrainerConfig()
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.run_config = run_config
        self.stop_conditions = stop_conditions_from_config(self.config) + list(stop_conditions)
        self.iteration = 0
        self.wall_s = 0.0
        self.last_metrics: dict[str, float] = {}
        self.stop_reason: str | None = None
        self._eval_env: Any = None
        self._writer: Any = None
        self._tty = sys.stdout.isatty()
        # Under torchrun every rank trains; rank 0 alone evaluates, writes and prints.
        self.is_writer = rdist.rank() == 0

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
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = state["iteration"]
        self.wall_s = state["wall_s"]
        self.last_metrics = dict(state.get("last_metrics", {}))
        for condition, s in zip(self.stop_conditions, state["stop_conditions"]):
            condition.load_state_dict(s)

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
            candidates = sorted(Path(self.run_dir, "checkpoints").glob("ckpt_*.pt"), reverse=True)
            if not candidates:
                raise FileNotFoundError(f"no checkpoint to resume from in {self.run_dir}/checkpoints")
            errors = []
            for candidate in candidates:
                try:
                    state = _load_resumable(candidate)
                except ValueError as e:
                    errors.append(str(e))
                    warnings.warn(f"{e}; trying the checkpoint before it", stacklevel=2)
                    continue
                checkpoint = candidate
                break
            else:
                raise ValueError(f"no readable checkpoint in {self.run_dir}/checkpoints: {'; '.join(errors)}")
        else:
            state = _load_resumable(checkpoint)
        self._check_resume_config(state, checkpoint)
        self.algorithm.load_state_dict(state["algorithm"])
        self.load_state_dict(state["trainer"])
        if self.run_dir is not None and self.is_writer:
            # Temp files of checkpoint writes that a killed process never renamed.
            for stale in Path(self.run_dir, "checkpoints").glob(".ckpt_*.pt.tmp-*"):
                stale.unlink(missing_ok=True)
            metrics = self.run_dir / "metrics.jsonl"
            if metrics.exists():
                kept = [
                    line
                    for line in metrics.read_text().splitlines()
                    if line.strip() and json.loads(line).get("iteration", 0) <= self.iteration
                ]
                tmp = metrics.with_name(f".{metrics.name}.tmp-{os.getpid()}")
                tmp.write_text("".join(line + "\n" for line in kept))
                os.replace(tmp, metrics)  # a crash here leaves the old file whole
        return Path(checkpoint)

    def _check_resume_config(self, state: dict[str, Any], checkpoint: str | Path) -> None:
        saved = state.get("config")
        if not isinstance(saved, dict):
            return
        differences = _config_differences(saved, self.resolved_config())
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
        if self._eval_env is None:
            self._eval_env = algo.env_cls(self.config.eval_num_envs, algo.horizon, device=algo.device)
        return evaluate_policy(
            algo.policy, self._eval_env, episodes=self.config.eval_episodes, max_steps=self.config.eval_max_steps
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

    def _progress(self, metrics: dict[str, float], final: bool = False) -> None:
        if not self.config.progress or not self.is_writer:
            return
        steps = self.algorithm.env_steps
        rate = steps / self.wall_s if self.wall_s > 0 else 0.0
        ret = metrics.get("episodes/return_mean", math.nan)
        length = metrics.get("episodes/length_mean", math.nan)
        line = f"iter {self.iteration:5d} | env steps {steps:>10,d} | {rate:>9,.0f} steps/s | return {ret:8.2f} | length {length:7.1f}"
        if "eval/return_mean" in metrics:
            line += f" | eval {metrics['eval/return_mean']:8.2f}"
        # Progress toward the nearest budget: env steps or iterations (metric goals have none).
        fractions = []
        if self.config.max_env_steps:
            fractions.append(steps / self.config.max_env_steps)
        if self.config.max_iterations:
            fractions.append(self.iteration / self.config.max_iterations)
        if fractions and self.wall_s > 0:
            done = min(max(fractions), 1.0)
            line += f" | {100 * done:3.0f}% ETA {self.wall_s * (1 - done) / max(done, 1e-9):5.0f} s"
        if self._tty:
            print("\r" + line, end="\n" if final else "", flush=True)
        elif final or self.iteration % self.config.log_every == 0:
            print(line, flush=True)

    def run(self) -> dict[str, float]:
        """Train until a stop condition holds; return the last iteration's metrics.

        Raises:
            ValueError: no stop condition was given (the run would never end).
        """
        if not self.stop_conditions:
            raise ValueError(
                "Trainer.run: no stop condition; set max_env_steps, max_iterations, max_wall_s, stop_at, "
                "stop_below or plateau_metric"
            )
        algo, cfg = self.algorithm, self.config
        self.stop_reason = None
        # A budget already spent (a finished run resumed with the same limits) stops
        # before training another iteration. Metric conditions need new metrics.
        for condition in self.stop_conditions:
            if isinstance(condition, (MaxIterations, MaxEnvSteps, MaxWallTime)):
                reason = condition(self, self.last_metrics)
                if reason is not None:
                    self.stop_reason = reason
                    return self.last_metrics
        self._open_outputs()
        try:
            while self.stop_reason is None:
                start = time.perf_counter()
                metrics = {**algo.collect(), **algo.step()}
                self.iteration += 1
                if cfg.eval_every and self.iteration % cfg.eval_every == 0 and self.is_writer:
                    metrics.update(self.evaluate())
                self.wall_s += time.perf_counter() - start
                metrics.update(iteration=self.iteration, env_steps=algo.env_steps, wall_s=self.wall_s)
                for condition in self.stop_conditions:
                    reason = condition(self, metrics)
                    if reason is not None and self.stop_reason is None:
                        self.stop_reason = reason
                if algo.world_size > 1:
                    # Ranks must stop together (wall time differs between them).
                    flag = torch.tensor([float(self.stop_reason is not None)], device=algo.device)
                    if rdist.all_reduce_(flag, "max").item() > 0 and self.stop_reason is None:  # SYNC: once per iteration
                        self.stop_reason = "another rank's stop condition held"
                if self.stop_reason is not None and cfg.eval_every and "eval/return_mean" not in metrics and self.is_writer:
                    metrics.update(self.evaluate())
                self._log(metrics)
                self.last_metrics = metrics
                due = cfg.checkpoint_every and self.iteration % cfg.checkpoint_every == 0
                if self.run_dir is not None and self.is_writer and (due or self.stop_reason is not None):
                    self.save_checkpoint()
                self._progress(metrics, final=self.stop_reason is not None)
        finally:
            if self._writer is not None:
                self._writer.flush()
        return self.last_metrics
