"""The old import paths of modules that moved into packages, kept importable.

Checkpoints and YAML configs record import paths (``rlx.distributions:SquashedNormal``),
and users' code imports modules by the paths rlx once documented. An old path imports
the module at its new place: ``import rlx.gae`` gives the very module object
``rlx.core.gae`` (one module, so patching either name patches both).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

__all__ = ["MOVED", "install"]

#: Old module path -> new module path.
MOVED = {
    "rlx.gae": "rlx.core.gae",
    "rlx.distributions": "rlx.core.distributions",
    "rlx.normalization": "rlx.core.normalization",
    "rlx.schedulers": "rlx.core.schedulers",
    "rlx.natural_gradient": "rlx.core.natural_gradient",
    "rlx.stats": "rlx.core.stats",
    "rlx._sync": "rlx.core._sync",
    "rlx.cuda_graphs": "rlx.core.cuda_graphs",
    "rlx.distributed": "rlx.core.distributed",
    "rlx.seed_stats": "rlx.core.seed_stats",
    "rlx.config_fields": "rlx.core.config_fields",
    "rlx.yaml_types": "rlx.core.yaml_types",
    "rlx.buffer": "rlx.collect.buffer",
    "rlx.episodes": "rlx.collect.episodes",
    "rlx.rollout": "rlx.collect.rollout",
    "rlx.evaluation": "rlx.collect.evaluation",
    "rlx.config_base": "rlx.config.base",
    "rlx.run_config": "rlx.config.run",
    "rlx.checkpoint": "rlx.run.checkpoint",
    "rlx.stopping": "rlx.run.stopping",
    "rlx.trainer": "rlx.run.trainer",
    "rlx.export": "rlx.run.export",
    "rlx.plotting": "rlx.run.plotting",
    "rlx.bench": "rlx.run.bench",
    "rlx.cli": "rlx.run.cli",
    "rlx.threads": "rlx.run.threads",
    "rlx.seeds": "rlx.members",
    "rlx.stacked": "rlx.members.stacked",
    "rlx.seed_optim": "rlx.members.optim",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at its new path is already imported."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Make the old paths importable (once per process)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
