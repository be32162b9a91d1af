"""Many seeds in one process: the names this module always had, now in :mod:`rlx.members`."""

from __future__ import annotations

from rlx.members import (  # noqa: F401  (re-exported)
    StackedLinear,
    StackedMLPActorCritic,
    StackedRecurrentActorCritic,
    StackedRNNCell,
    clip_grad_norm_per_seed_,
    grad_norms_per_seed,
    normalize_per_seed,
    per_seed_mean,
    scale_steps_per_seed_,
    seed_major_permutation,
    seed_means,
    seed_minibatch_bounds,
    seed_rows,
)
from rlx.members import Members as SeedGroup  # noqa: F401
from rlx.members import MemberStats as SeedStats  # noqa: F401
