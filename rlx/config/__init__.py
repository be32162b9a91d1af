"""Configs: the algorithm config dataclasses (:mod:`rlx.config.algorithms`, on their
shared fields in :mod:`rlx.config.base`) and YAML run configs (:mod:`rlx.config.run`).

``from rlx.config import AlgorithmConfig`` and the other names below keep their paths.
"""

from __future__ import annotations

from rlx.config.algorithms import *  # noqa: F401,F403
from rlx.config.algorithms import __all__  # noqa: F401
