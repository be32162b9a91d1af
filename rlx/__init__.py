"""rlx: PPO and natural policy gradient for thousands of batched torch environments.

Build an algorithm from a config and an env class, then alternate ``collect()`` and
``step()``::

    from rlx import AlgorithmConfig
    from rlx.envs import CartPole

    algo = AlgorithmConfig(num_envs=64, horizon=64, gamma=0.99).build(CartPole)
    for _ in range(100):
        collect_stats = algo.collect()
        step_stats = algo.step()

Public names are imported on first use, so ``import rlx.env`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlx import _moved

__version__ = "0.1.0"

_moved.install()  # modules that moved into packages keep their old import paths

_EXPORTS = {
    "A2C": "rlx.algorithms.a2c",
    "A2CConfig": "rlx.config",
    "DistillationConfig": "rlx.config",
    "Algorithm": "rlx.algorithms.base",
    "PPO": "rlx.algorithms.ppo",
    "AlgorithmConfig": "rlx.config",
    "NPGConfig": "rlx.config",
    "NPG": "rlx.algorithms.npg",
    "RecurrentAlgorithmConfig": "rlx.config",
    "RecurrentA2CConfig": "rlx.config",
    "RecurrentA2C": "rlx.algorithms.a2c",
    "RecurrentPPO": "rlx.algorithms.recurrent_ppo",
    "CommonConfig": "rlx.config",
    "ConfigError": "rlx.config",
    "Env": "rlx.env",
    "EnvOutputError": "rlx.env",
    "generalized_advantage_estimate": "rlx.core.gae",
    "Trainer": "rlx.run.trainer",
    "TrainerConfig": "rlx.run.trainer",
    "load_policy": "rlx.run.export",
    "export_onnx": "rlx.run.export",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from rlx.algorithms.a2c import A2C, RecurrentA2C
    from rlx.algorithms.base import Algorithm
    from rlx.algorithms.npg import NPG
    from rlx.algorithms.ppo import PPO
    from rlx.algorithms.recurrent_ppo import RecurrentPPO
    from rlx.config import (
        A2CConfig,
        DistillationConfig,
        AlgorithmConfig,
        CommonConfig,
        ConfigError,
        NPGConfig,
        RecurrentA2CConfig,
        RecurrentAlgorithmConfig,
    )
    from rlx.env import Env, EnvOutputError
    from rlx.run.export import export_onnx, load_policy
    from rlx.core.gae import generalized_advantage_estimate
    from rlx.run.trainer import Trainer, TrainerConfig


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rlx' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
