"""Runners with other libraries' interfaces over rlx's algorithms: rsl_rl's
:class:`OnPolicyRunner` (:mod:`rlx.runners.on_policy`), from its ``train_cfg``
(:mod:`rlx.runners.rsl_rl_cfg`)."""

from __future__ import annotations

from rlx.runners.on_policy import OnPolicyRunner
from rlx.runners.rsl_rl_cfg import algorithm_config_from_rsl_rl

__all__ = ["OnPolicyRunner", "algorithm_config_from_rsl_rl"]
