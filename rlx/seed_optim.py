"""Per-seed optimizer state, now in :mod:`rlx.members.optim` (re-exported here)."""

from __future__ import annotations

from rlx.members.optim import *  # noqa: F401,F403
from rlx.members.optim import KERNEL_FLAGS, __all__  # noqa: F401
