"""What rsl_rl's runner does around training, for :class:`rlx.runners.OnPolicyRunner`:
its ``logger`` object, its TensorBoard tags, its observation sets, and torchrun.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import torch

from rlx.core import distributed as rdist

__all__ = ["RunnerLogger", "join_torchrun", "obs_sets", "rsl_rl_tags", "TAGS"]

#: rlx's statistic -> rsl_rl's TensorBoard tag (rsl_rl 5's ``Logger.log``).
TAGS = {
    "losses/vf": "Loss/value",
    "losses/policy": "Loss/surrogate",
    "losses/entropy": "Loss/entropy",
    "losses/rnd": "Loss/rnd",
    "losses/mirror": "Loss/symmetry",
    "monitors/lr": "Loss/learning_rate",
    "episodes/return_mean": "Train/mean_reward",
    "episodes/length_mean": "Train/mean_episode_length",
}


class RunnerLogger:
    """rsl_rl's ``runner.logger``: what scripts read of it.

    Attributes:
        log_dir: The run's directory (a ``str``), or ``None``.
        writer: The TensorBoard ``SummaryWriter`` (or W&B run) on rank 0 once training
            logs; ``None`` without a ``log_dir``.
        git_status_repos: Files whose repositories' git state is stored at the start.
    """

    def __init__(self, log_dir: str | os.PathLike | None) -> None:
        self.log_dir = str(log_dir) if log_dir is not None else None
        self.writer: Any = None
        from rlx.runners import on_policy

        self.git_status_repos: list[str] = [on_policy.__file__]


def rsl_rl_tags(stats: dict[str, float], alg: Any, seconds: float) -> dict[str, float]:
    """One iteration's statistics under rsl_rl's TensorBoard tags (:data:`TAGS`;
    ``Policy/mean_std``, ``Perf/...``; the env's ``extras["log"]`` entries under their own
    name when it has a ``/``, ``Episode/<name>`` otherwise), and the statistics rsl_rl has
    no tag for under rlx's names. ``Train/mean_reward`` is the mean return of the
    episodes that ended in this iteration (rsl_rl's averages its last 100 episodes)."""
    out: dict[str, float] = {}
    for key, value in stats.items():
        if key in TAGS:
            out[TAGS[key]] = value
        elif key.startswith("env/") and key not in ("env/resets", "env/steps"):
            name = key[len("env/"):]
            out[name if "/" in name else f"Episode/{name}"] = value
        else:
            out[key] = value
    try:
        out["Policy/mean_std"] = float(alg.actor.output_std.mean())  # SYNC: once per iteration, logging
    except AttributeError:  # not a Gaussian
        pass
    collect_s, learn_s = stats.get("profiling/collect_ms", 0.0) / 1e3, stats.get("profiling/step_ms", 0.0) / 1e3
    out["Perf/collection_time"], out["Perf/learning_time"] = collect_s, learn_s
    steps = stats.get("env/steps", 0.0)
    if seconds > 0 and steps:
        out["Perf/total_fps"] = float(int(steps / seconds))
    return out


def obs_sets(cfg: dict[str, Any], groups: Iterable[str]) -> dict[str, list[str]]:
    """rsl_rl's observation sets: ``obs_groups``' ``actor`` and ``critic`` lists, each
    defaulting to ``["policy"]`` (rsl_rl's rule when the env has a ``policy`` group)."""
    sets = dict(cfg.get("obs_groups") or {})
    have = sorted(groups)
    default = ["policy"] if "policy" in have else have
    return {"actor": list(sets.get("actor") or sets.get("policy") or default),
            "critic": list(sets.get("critic") or sets.get("actor") or sets.get("policy") or default)}


def join_torchrun(device: str) -> None:
    """Under torchrun (``WORLD_SIZE > 1``), join the process group and take this rank's
    device, as rsl_rl's runner does; a CUDA ``device`` must be ``cuda:<LOCAL_RANK>``."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return
    kind = torch.device(device).type
    if kind == "cuda" and torch.device(device) != torch.device(f"cuda:{rdist.local_rank()}"):
        raise ValueError(f"OnPolicyRunner: device {device!r} under torchrun must be 'cuda:{rdist.local_rank()}' "
                         "(this rank's LOCAL_RANK), as rsl_rl requires")
    rdist.init_from_env(device_type=kind)
