"""Seed-stacked models, now in :mod:`rlx.members.stacked` (re-exported here)."""

from __future__ import annotations

from rlx.members.stacked import *  # noqa: F401,F403
from rlx.members.stacked import __all__  # noqa: F401
