"""Runners with other libraries' interfaces over rlx's algorithms: rsl_rl's
:class:`OnPolicyRunner` (:mod:`rlx.runners.on_policy`) and :class:`DistillationRunner`
(:mod:`rlx.runners.distillation`), from their ``train_cfg``
(:mod:`rlx.runners.rsl_rl_cfg`)."""

from __future__ import annotations

from rlx.runners.distillation import DistillationRunner
from rlx.runners.on_policy import OnPolicyRunner
from rlx.runners.rsl_rl_cfg import algorithm_config_from_rsl_rl, distillation_config_from_rsl_rl
from rlx.runners.switch import use_rlx_runners

__all__ = ["DistillationRunner", "OnPolicyRunner", "algorithm_config_from_rsl_rl", "distillation_config_from_rsl_rl",
           "use_rlx_runners"]
