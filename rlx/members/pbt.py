"""Population-based training (Jaderberg et al., 2017, https://arxiv.org/abs/1711.09846) on
the member axis: no restart, no checkpoint round trip, one process.

Every ``every`` iterations the members are ranked by a metric (each member's mean of the
metric over the iterations since its last ranking, from the statistics the trainer
already has on the host). Each member of the bottom ``fraction`` then takes a random
top-``fraction`` member's state (*exploit*: :func:`copy_members_`, device copies of the
member's slice of every parameter, optimizer moment and step count, observation and
reward normalizer, LR factor, liveness and hyperparameter) and perturbs the explored
hyperparameters (*explore*: each multiplied by a random choice of ``perturb``, or with
probability ``resample`` drawn afresh from its search space). Who copied whom, when, with
which hyperparameters, is the *lineage*, one JSON line per copy in ``lineage.jsonl``.

A copy is exact: the copied member's next update equals its source's on the same data
(``tests/members/test_pbt.py``). A diverged (frozen) member is the worst-ranked and is
revived by a copy of a live one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from rlx.core import distributed as rdist
from rlx.core._sync import allowed_sync
from rlx.core.config_fields import ConfigError, settings_from_dict
from rlx.members.axis import member_key

if TYPE_CHECKING:
    from rlx.algorithms.base import Algorithm

__all__ = ["PBT", "PBTConfig", "SearchSpace", "copy_members_", "initial_population", "parse_space"]

#: Bounds a perturbed value is clamped to (a value outside them is not a valid setting).
_BOUNDS = {"gamma": (0.0, 1.0), "gae_lambda": (0.0, 1.0), "entropy_coeff": (0.0, math.inf),
           "vf_coeff": (0.0, math.inf), "damping": (0.0, math.inf)}


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """One hyperparameter's distribution: ``loguniform(a, b)``, ``uniform(a, b)`` or
    ``choice(v1, v2, ...)``."""

    kind: str
    args: tuple[float, ...]

    def sample(self, rng: random.Random) -> float:
        if self.kind == "loguniform":
            return math.exp(rng.uniform(math.log(self.args[0]), math.log(self.args[1])))
        if self.kind == "uniform":
            return rng.uniform(*self.args)
        return rng.choice(self.args)

    def __str__(self) -> str:
        return f"{self.kind}({', '.join(f'{a:g}' for a in self.args)})"


def parse_space(text: str, *, where: str = "space") -> SearchSpace:
    """``"loguniform(1e-4, 1e-2)"`` -> :class:`SearchSpace` (errors name ``where``)."""
    m = re.fullmatch(r"\s*(loguniform|uniform|choice)\s*\((.*)\)\s*", text)
    if not m:
        raise ConfigError(f"{where}: {text!r} is not loguniform(a,b), uniform(a,b) or choice(v1,v2,...)")
    kind = m.group(1)
    try:
        args = tuple(float(a) for a in m.group(2).split(",") if a.strip())
    except ValueError:
        raise ConfigError(f"{where}: {text!r} has a value that is not a number") from None
    if kind != "choice" and (len(args) != 2 or not args[0] < args[1]):
        raise ConfigError(f"{where}: {kind} needs two bounds a < b, got {text!r}")
    if kind == "loguniform" and args[0] <= 0:
        raise ConfigError(f"{where}: loguniform needs positive bounds, got {text!r}")
    if kind == "choice" and not args:
        raise ConfigError(f"{where}: choice needs at least one value, got {text!r}")
    return SearchSpace(kind, args)


@dataclasses.dataclass
class PBTConfig:
    """The settings of population-based training (``trainer.pbt`` in a run config, or
    ``rlx train --pbt members=16,every=10,metric=...``)."""

    #: Members in the population (the algorithm's ``num_seeds``).
    members: int = 16
    #: Iterations between two rankings.
    every: int = 10
    #: The metric ranked (higher is better), per member ``member{i}/<metric>``.
    metric: str = "episodes/return_mean"
    #: The bottom and top share of the population (at least one member each).
    fraction: float = 0.25
    #: The factors a copied hyperparameter is multiplied by (one drawn per value).
    perturb: tuple[float, ...] = (0.8, 1.25)
    #: Probability of drawing a copied hyperparameter afresh from its space instead.
    resample: float = 0.0
    #: The explored hyperparameters; default: the keys of ``space``, else ``["lr"]``.
    hparams: list[str] | None = None
    #: Search spaces (``{"lr": "loguniform(1e-4, 1e-2)"}``): the initial population is
    #: drawn from them, and ``resample`` draws from them.
    space: dict[str, str] | None = None
    #: Seed of PBT's own draws (partners, factors, resamples).
    seed: int = 0

    def __post_init__(self) -> None:
        def bad(field: str, message: str) -> None:
            raise ConfigError(f"trainer.pbt.{field}: {message}")

        for field in ("members", "every"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < (2 if field == "members" else 1):
                bad(field, f"must be an int >= {2 if field == 'members' else 1}, got {value!r}")
        if not isinstance(self.metric, str) or not self.metric:
            bad("metric", f"must be a metric name, got {self.metric!r}")
        if not 0 < self.fraction <= 0.5:
            bad("fraction", f"must be in (0, 0.5], got {self.fraction!r}")
        self.perturb = tuple(float(f) for f in self.perturb)
        if not self.perturb or any(f <= 0 for f in self.perturb):
            bad("perturb", f"must be positive factors, got {self.perturb!r}")
        if not 0 <= self.resample <= 1:
            bad("resample", f"must be a probability, got {self.resample!r}")
        if self.space is not None:
            if not isinstance(self.space, Mapping):
                bad("space", f"must map hyperparameters to distributions, got {self.space!r}")
            for name, text in self.space.items():
                parse_space(str(text), where=f"trainer.pbt.space.{name}")
        if self.hparams is None:
            self.hparams = list(self.space) if self.space else ["lr"]
        if self.resample > 0:
            missing = [h for h in self.hparams if h not in (self.space or {})]
            if missing:
                bad("resample", f"draws from a space, and {missing} have none: add them to trainer.pbt.space")

    @classmethod
    def from_dict(cls, data: Any) -> PBTConfig:
        return settings_from_dict(cls, data, "trainer.pbt")

    def spaces(self) -> dict[str, SearchSpace]:
        return {k: parse_space(str(v), where=f"trainer.pbt.space.{k}") for k, v in (self.space or {}).items()}


def _member_tensors(algo: Algorithm) -> list[Tensor]:
    """Every tensor with a leading member dim that a member's training state lives in."""
    S = algo.num_seeds
    tensors: list[Tensor] = [p.data for p in algo.policy.model.parameters()]
    tensors += [b for b in algo.policy.model.buffers() if b.dim() and b.shape[0] == S]
    for rms in algo.policy.obs_normalizers.values():
        tensors += [rms.mean, rms.var]
    tensors += [algo.reward_scaler.stats.mean, algo.reward_scaler.stats.var]
    for p in algo.policy.model.parameters():
        for value in algo.optimizer.state.get(p, {}).values():
            if isinstance(value, Tensor) and value.dim() and value.shape[0] == S:
                tensors.append(value)
    tensors += [algo.members.alive, algo.members.lr_factor]
    return tensors


@torch.no_grad()
def copy_members_(algo: Algorithm, sources: Sequence[int], targets: Sequence[int]) -> None:
    """Give member ``targets[k]`` member ``sources[k]``'s whole training state, on the
    device (one gather and one scatter per tensor, no sync): parameters, optimizer
    state, normalizers, liveness, LR factor and varied hyperparameters. The envs, their
    episodes and the reward scaler's running returns stay the target's."""
    if not targets:
        return
    S = algo.num_seeds
    for i in (*sources, *targets):
        if not 0 <= i < S:
            raise IndexError(f"copy_members_: member {i} out of range for {S} members")
    src = torch.tensor(list(sources), device=algo.device)
    dst = torch.tensor(list(targets), device=algo.device)
    for t in _member_tensors(algo):
        t.index_copy_(0, dst, t.index_select(0, src))
    members = algo.members
    factors = members.lr_factors()
    done = [members._done_host[i] for i in range(S)]
    for s, d in zip(sources, targets):
        factors[d], done[d] = factors[s], done[s]
    members._lr_factor_host = factors
    members._done_host = done
    members.done.copy_(torch.tensor(done, device=algo.device))
    for name in algo.hparams.names:
        if name == "lr":
            continue
        values = algo.hparams.host(name)
        for s, d in zip(sources, targets):
            values[d] = values[s]
        algo.set_member_values(name, values)


class PBT:
    """Population-based training of one algorithm's members (see the module docstring).

    Args:
        algo: The algorithm, ``num_seeds == config.members``.
        config: :class:`PBTConfig`.
        run_dir: Where ``lineage.jsonl`` goes (``None``: kept in :attr:`lineage` only).

    Raises:
        ConfigError: a member count that is not the algorithm's, or an explored
            hyperparameter the algorithm does not vary per member.
    """

    def __init__(self, algo: Algorithm, config: PBTConfig, run_dir: str | Path | None = None) -> None:
        self.algo, self.config = algo, config
        S = algo.num_seeds
        if config.members != S:
            raise ConfigError(f"trainer.pbt.members: {config.members}, but the algorithm has num_seeds={S}: set both alike "
                              "(rlx train --pbt members=N does)")
        for name in config.hparams or ():
            if name != "lr" and not algo.hparams.varies(name):
                raise ConfigError(f"trainer.pbt.hparams: explores {name!r}, which the config does not vary per member: "
                                  f"add it to config.member_hparams (rlx train --pbt does)")
        self.spaces = config.spaces()
        self.rng = random.Random(config.seed)
        self.path = Path(run_dir) / "lineage.jsonl" if run_dir is not None else None
        self._window: list[list[float]] = [[] for _ in range(S)]
        self._last = [-math.inf] * S
        self.rounds = 0
        #: Every copy so far: ``{"iteration", "env_steps", "member", "source", "score",
        #: "source_score", "hparams"}``.
        self.lineage: list[dict[str, Any]] = []

    def observe(self, metrics: Mapping[str, float]) -> None:
        """Record each member's metric of one iteration (NaN: none this iteration)."""
        for i in range(self.algo.num_seeds):
            value = metrics.get(member_key(i, self.config.metric), math.nan)
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._window[i].append(float(value))

    def scores(self) -> list[float]:
        """Each member's mean metric since its last ranking (its last score when it had
        none; -inf for a member that never had one, or that diverged)."""
        alive = self.algo.members.alive
        with allowed_sync():
            live = alive.tolist()  # SYNC: once per ranking
        out = []
        for i, window in enumerate(self._window):
            score = sum(window) / len(window) if window else self._last[i]
            out.append(score if live[i] else -math.inf)
        return out

    def step(self, iteration: int, metrics: Mapping[str, float]) -> dict[str, float]:
        """Observe an iteration's metrics; every ``every`` iterations, exploit and
        explore. Returns ``pbt/copies`` on a ranking iteration (nothing otherwise)."""
        self.observe(metrics)
        if iteration % self.config.every:
            return {}
        scores = self.scores()
        if rdist.world_size() > 1:  # rank 0's view decides (it alone evaluates): every rank copies alike
            agreed = rdist.broadcast_(torch.tensor(scores, dtype=torch.float64, device=self.algo.device))
            with allowed_sync():
                scores = agreed.tolist()  # SYNC: once per ranking, under torchrun
        self._last = scores
        self._window = [[] for _ in scores]
        S = len(scores)
        q = max(1, int(S * self.config.fraction))
        order = sorted(range(S), key=lambda i: (scores[i], -i), reverse=True)
        top, bottom = order[:q], order[S - q :]
        sources = [self.rng.choice(top) for _ in bottom]
        pairs = [(s, d) for s, d in zip(sources, bottom) if s != d and scores[d] < scores[s]]
        if not pairs:
            return {"pbt/copies": 0.0}
        algo = self.algo
        copy_members_(algo, [s for s, _ in pairs], [d for _, d in pairs])
        for name in self.config.hparams or ():
            values = algo.member_values(name)
            for _, d in pairs:
                values[d] = self._explore(name, values[d])
            algo.set_member_values(name, values)
        events = []
        for s, d in pairs:
            events.append({"iteration": iteration, "env_steps": algo.env_steps, "member": d, "source": s,
                           "score": scores[d], "source_score": scores[s],
                           "hparams": {n: algo.member_values(n)[d] for n in self.config.hparams or ()}})
        self.lineage += events
        self.rounds += 1
        if self.path is not None:
            with open(self.path, "a") as f:
                f.writelines(json.dumps(e) + "\n" for e in events)
        return {"pbt/copies": float(len(pairs))}

    def _explore(self, name: str, value: float) -> float:
        if self.config.resample and self.rng.random() < self.config.resample:
            return self.spaces[name].sample(self.rng)
        low, high = _BOUNDS.get(name, (0.0, math.inf))
        return min(max(value * self.rng.choice(self.config.perturb), low), high)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": _rng_state(self.rng), "window": [list(w) for w in self._window], "last": list(self._last),
                "rounds": self.rounds, "lineage": json.dumps(self.lineage)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self._window = [list(w) for w in state["window"]]
        self._last = list(state["last"])
        self.rounds = state["rounds"]
        self.lineage = json.loads(state["lineage"])


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def initial_population(config: PBTConfig) -> dict[str, list[float]]:
    """The initial values of the explored hyperparameters that have a space: drawn with
    PBT's seed (a fresh generator, so :class:`PBT` draws the same ones on resume)."""
    rng = random.Random(config.seed + 1)
    return {name: [space.sample(rng) for _ in range(config.members)] for name, space in config.spaces().items()}
