"""Members of a population trained as one batch: seeds, a sweep's points, a PBT population.

* :mod:`rlx.members.axis`: :class:`Members`, the member axis every algorithm owns (S = 1
  included);
* :mod:`rlx.members.ops`: the per-member pieces of an update over seed-major rows;
* :mod:`rlx.members.optim`: optimizer state kept apart per member (:class:`SeedAdam`);
* :mod:`rlx.members.stacked`: S networks evaluated as one batched matmul per layer;
* :mod:`rlx.members.hparams`: hyperparameters that differ between members, ``[S]`` on
  the device;
* :mod:`rlx.members.pbt`: population-based training over the members.
"""

from __future__ import annotations

from rlx.members.axis import Members, MemberStats, member_key, member_metric
from rlx.members.ops import (
    clip_grad_norm_per_seed_,
    grad_norms_per_seed,
    normalize_per_seed,
    per_seed_mean,
    seed_major_permutation,
    seed_means,
    seed_minibatch_bounds,
)
from rlx.members.optim import SeedAdam, masked_step_, scale_steps_per_seed_, seed_optimizer
from rlx.members.stacked import (
    STACKED_MODELS,
    StackedLinear,
    StackedMLPActorCritic,
    StackedRecurrentActorCritic,
    StackedRNNCell,
    seed_rows,
    stacked_model_cls,
)

__all__ = [
    "Members",
    "MemberStats",
    "member_key",
    "member_metric",
    "STACKED_MODELS",
    "SeedAdam",
    "StackedLinear",
    "StackedMLPActorCritic",
    "StackedRNNCell",
    "StackedRecurrentActorCritic",
    "clip_grad_norm_per_seed_",
    "grad_norms_per_seed",
    "masked_step_",
    "normalize_per_seed",
    "per_seed_mean",
    "scale_steps_per_seed_",
    "seed_major_permutation",
    "seed_means",
    "seed_minibatch_bounds",
    "seed_optimizer",
    "seed_rows",
    "stacked_model_cls",
]

# The names of rlx.seeds, the member axis' old path (Members was SeedGroup).
SeedGroup = Members
SeedStats = MemberStats
