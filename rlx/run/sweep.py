"""Sweeps and PBT from the command line: ``rlx sweep`` and ``rlx train --pbt``.

A sweep is a population: each point of a grid (the cross product of ``--grid`` values)
or of a random search (``--random N`` draws from ``--space`` distributions) becomes
``--seeds K`` members with that point's hyperparameters (``member_hparams``), trained in
one process as one batch. ``sweep.json`` in the run directory says which member is which
point and seed; the end ranks the points by the IQM over their seeds of a metric, with a
95% bootstrap interval (:func:`sweep_table`), and ``rlx plot`` draws it
(:func:`rlx.run.sweep_plots.plot_sweep`).

Keys are the run config's dotted paths (``config.optimizer_config.lr``,
``config.entropy_coeff``) or the bare field names (``lr``, ``entropy_coeff``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlx.core.config_fields import ConfigError
from rlx.members.axis import member_metric
from rlx.members.pbt import PBTConfig, initial_population, parse_space

__all__ = [
    "best_member",
    "final_values",
    "hparam_key",
    "parse_grid",
    "parse_pbt",
    "pbt_run_config",
    "sweep_points",
    "sweep_run_config",
    "sweep_table",
    "write_sweep",
]

#: Iterations whose reported values make a member's final value (their mean): one
#: iteration's episodes are noisy.
FINAL_TAIL = 5


def hparam_key(path: str, *, where: str) -> str:
    """``config.optimizer_config.lr`` or ``lr`` -> ``lr``; ``config.entropy_coeff`` ->
    ``entropy_coeff``."""
    key = path.strip()
    key = key.removeprefix("config.")
    key = "lr" if key == "optimizer_config.lr" else key
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", key):
        raise ConfigError(f"{where}: {path!r} is not a config field a member can vary (such as "
                          "config.optimizer_config.lr or config.entropy_coeff)")
    return key


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def parse_grid(items: Sequence[str]) -> dict[str, list[float]]:
    """``["config.optimizer_config.lr=1e-4,3e-4", ...]`` -> ``{"lr": [1e-4, 3e-4], ...}``."""
    grid: dict[str, list[float]] = {}
    for item in items:
        where = f"--grid {item}"
        if "=" not in item:
            raise ConfigError(f"{where}: expected KEY=V1,V2,...")
        path, values = item.split("=", 1)
        key = hparam_key(path, where=where)
        try:
            grid[key] = [float(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise ConfigError(f"{where}: values must be numbers, got {values!r}") from None
        if not grid[key]:
            raise ConfigError(f"{where}: no values")
    return grid


def parse_spaces(items: Sequence[str]) -> dict[str, str]:
    """``["lr=loguniform(1e-4,1e-2)"]`` -> ``{"lr": "loguniform(1e-4,1e-2)"}`` (checked)."""
    spaces = {}
    for item in items:
        where = f"--space {item}"
        if "=" not in item:
            raise ConfigError(f"{where}: expected KEY=loguniform(a,b), uniform(a,b) or choice(v1,...)")
        path, text = item.split("=", 1)
        key = hparam_key(path, where=where)
        parse_space(text, where=where)
        spaces[key] = text
    return spaces


def sweep_points(grid: dict[str, list[float]], random_n: int | None, spaces: dict[str, str],
                 seed: int = 0) -> list[dict[str, float]]:
    """The sweep's points: the grid's cross product, each combined with ``random_n``
    draws from ``spaces`` (when given)."""
    if spaces and not random_n:
        raise ConfigError("--space needs --random N: the number of points to draw")
    if random_n and not spaces:
        raise ConfigError("--random needs at least one --space KEY=DIST to draw from")
    overlap = set(grid) & set(spaces)
    if overlap:
        raise ConfigError(f"{sorted(overlap)} given both as --grid and as --space: choose one")
    keys = list(grid)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))] or [{}]
    if random_n:
        rng = random.Random(seed)
        parsed = {k: parse_space(v, where=f"--space {k}") for k, v in spaces.items()}
        draws = [{k: space.sample(rng) for k, space in parsed.items()} for _ in range(random_n)]
        points = [{**p, **d} for p in points for d in draws]
    if points == [{}]:
        raise ConfigError("rlx sweep: nothing to sweep; give --grid KEY=V1,V2 or --random N --space KEY=DIST")
    return points


def _with_members(run: Any, num_members: int, member_hparams: dict[str, list[float]], trainer: Any = None) -> Any:
    """``run`` with ``num_members`` members and these hyperparameters (the config's own
    value of each set to member 0's, so a field that ``None`` disables is on)."""
    from rlx.members.hparams import check_member_keys

    config = run.config
    check_member_keys(type(config), member_hparams)  # before any field is set to a member's value
    first = {k: v[0] for k, v in member_hparams.items() if k != "lr"}
    optimizer_config = dict(config.optimizer_config or {})
    if "lr" in member_hparams:
        optimizer_config["lr"] = member_hparams["lr"][0]
    merged = {**(config.member_hparams or {}), **member_hparams}
    config = dataclasses.replace(config, num_seeds=num_members, member_hparams=merged or None,
                                 optimizer_config=optimizer_config or None, **first)
    return dataclasses.replace(run, config=config, trainer=trainer or run.trainer)


def sweep_run_config(run: Any, points: list[dict[str, float]], seeds: int) -> Any:
    """``run`` as a population of ``len(points) * seeds`` members: member ``p * seeds + k``
    is point ``p``, seed ``k`` (torch seed ``config.seed + member``)."""
    if seeds < 1:
        raise ConfigError(f"--seeds: must be >= 1, got {seeds}")
    keys = list(points[0])
    values = {k: [p[k] for p in points for _ in range(seeds)] for k in keys}
    return _with_members(run, len(points) * seeds, values)


def write_sweep(run_dir: Path, points: list[dict[str, float]], seeds: int, metric: str) -> None:
    """``sweep.json``: the points, the seeds per point, the metric, and which member is which."""
    members = [{"member": p * seeds + k, "point": p, "seed": k, **point}
               for p, point in enumerate(points) for k in range(seeds)]
    data = {"keys": list(points[0]), "points": points, "seeds": seeds, "metric": metric, "members": members}
    (run_dir / "sweep.json").write_text(json.dumps(data, indent=1))


def read_sweep(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / "sweep.json"
    return json.loads(path.read_text()) if path.is_file() else None


def final_values(rows: list[dict[str, Any]], metric: str, members: int, tail: int = FINAL_TAIL) -> list[float]:
    """Each member's final value of ``metric``: the mean of its last ``tail`` finite
    values (NaN if it never reported one)."""
    out = []
    for i in range(members):
        values = (member_metric(r, i, metric) if members > 1 else r.get(metric) for r in rows)
        seen = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
        out.append(sum(seen[-tail:]) / len(seen[-tail:]) if seen else math.nan)
    return out


def sweep_table(run_dir: str | Path, metric: str | None = None) -> tuple[str, list[dict[str, Any]]]:
    """The points of a sweep ranked by the IQM over their seeds of ``metric``'s final
    values (default: the sweep's), best first, each with a 95% bootstrap interval.

    Returns:
        ``(metric, rows)``; a row is ``{"point", "hparams", "values", "iqm", "ci"}``.
    """
    from rlx.core.seed_stats import bootstrap_ci, iqm
    from rlx.run.plotting import read_metrics

    sweep = read_sweep(run_dir)
    if sweep is None:
        raise FileNotFoundError(f"no sweep.json in {run_dir}: not a sweep's run directory")
    metric = metric or sweep["metric"]
    K, points = sweep["seeds"], sweep["points"]
    finals = final_values(read_metrics(run_dir), metric, len(points) * K)
    rows = []
    for p, point in enumerate(points):
        values = finals[p * K : (p + 1) * K]
        kept = [v for v in values if math.isfinite(v)]
        centre = iqm(kept) if kept else math.nan
        ci = bootstrap_ci(kept) if len(kept) > 1 else (centre, centre)
        rows.append({"point": p, "hparams": point, "values": values, "iqm": centre, "ci": ci})
    rows.sort(key=lambda r: -r["iqm"] if math.isfinite(r["iqm"]) else math.inf)
    return metric, rows


def format_table(metric: str, rows: list[dict[str, Any]]) -> str:
    """The ranked table as text (what ``rlx sweep`` prints and writes to ``sweep.md``)."""
    keys = list(rows[0]["hparams"]) if rows else []
    seeds = len(rows[0]["values"]) if rows else 0
    head = f"| rank | {' | '.join(keys)} | {metric} IQM [95% CI] over {seeds} seed(s) | per seed |"
    lines = [head, "|" + "---|" * (len(keys) + 3)]
    for rank, r in enumerate(rows, start=1):
        hp = " | ".join(f"{r['hparams'][k]:.4g}" for k in keys)
        per = ", ".join(f"{v:.1f}" for v in r["values"])
        lines.append(f"| {rank} | {hp} | {r['iqm']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}] | {per} |")
    return "\n".join(lines)


def best_member(run_dir: str | Path, metric: str | None = None) -> tuple[int, float, str]:
    """``(member, final value, metric)`` of the member with the best final value of
    ``metric`` (default: a sweep's metric, else ``eval/return_mean`` when the run
    evaluated, else ``episodes/return_mean``)."""
    from rlx.run.plotting import read_metrics

    rows = read_metrics(run_dir)
    sweep = read_sweep(run_dir)
    members = len({k.split("/", 1)[0] for r in rows for k in r if re.match(r"(member|seed)\d+/", k)}) or 1
    if metric is None:
        metric = sweep["metric"] if sweep else ("eval/return_mean" if any(
            member_metric(r, 0, "eval/return_mean") is not None or "eval/return_mean" in r for r in rows)
                                                else "episodes/return_mean")
    finals = final_values(rows, metric, members)
    if not any(math.isfinite(v) for v in finals):
        raise ValueError(f"--best: no member of {run_dir} reported {metric}")
    best = max((i for i in range(members) if math.isfinite(finals[i])), key=lambda i: finals[i])
    return best, finals[best], metric


def parse_pbt(text: str, spaces: dict[str, str]) -> PBTConfig:
    """``--pbt members=16,every=10,metric=episodes/return_mean,hparams=lr+entropy_coeff``
    (plus ``fraction``, ``resample``, ``perturb=0.8+1.25``, ``seed``) with ``--space``
    distributions -> :class:`~rlx.members.pbt.PBTConfig`."""
    kwargs: dict[str, Any] = {}
    for item in _split_top(text):
        if not item.strip():
            continue
        if "=" not in item:
            raise ConfigError(f"--pbt {text}: {item!r} is not KEY=VALUE")
        key, value = (s.strip() for s in item.split("=", 1))
        if key in ("members", "every", "seed"):
            try:
                kwargs[key] = int(value)
            except ValueError:
                raise ConfigError(f"--pbt {key}: must be an integer, got {value!r}") from None
        elif key in ("fraction", "resample"):
            try:
                kwargs[key] = float(value)
            except ValueError:
                raise ConfigError(f"--pbt {key}: must be a number, got {value!r}") from None
        elif key == "perturb":
            kwargs[key] = tuple(float(v) for v in value.split("+"))
        elif key == "hparams":
            kwargs[key] = [hparam_key(v, where="--pbt hparams") for v in value.split("+")]
        elif key == "metric":
            kwargs[key] = value
        else:
            raise ConfigError(f"--pbt: unknown key {key!r}; keys are members, every, metric, hparams, fraction, "
                              "resample, perturb, seed")
    if spaces:
        kwargs["space"] = spaces
    return PBTConfig(**kwargs)


def pbt_run_config(run: Any, pbt: PBTConfig) -> Any:
    """``run`` trained by PBT: ``pbt.members`` members, the explored hyperparameters
    drawn from their spaces (or the config's value for every member) and ``trainer.pbt``."""
    drawn = initial_population(pbt)
    values = {}
    for name in pbt.hparams or ():
        if name in drawn:
            values[name] = drawn[name]
        elif name == "lr":  # each member's LR reported (hparams/lr) from the start
            values[name] = [run.config.optimizer_kwargs["lr"]] * pbt.members
        else:
            current = getattr(run.config, name, None)
            if current is None:
                raise ConfigError(f"--pbt hparams: {name!r} is not set in the config: give it a value or a --space")
            values[name] = [current] * pbt.members
    settings = {**dataclasses.asdict(pbt), "perturb": list(pbt.perturb)}
    trainer = dataclasses.replace(run.trainer, pbt=settings)
    return _with_members(run, pbt.members, values, trainer)
