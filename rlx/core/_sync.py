"""Marking the deliberate host syncs, so tests can forbid every other one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["allowed_sync"]


@contextmanager
def allowed_sync() -> Iterator[None]:
    """Run a documented host sync even under ``torch.cuda.set_sync_debug_mode("error")``.

    rlx's hot paths have a few deliberate syncs (the one stats transfer per ``collect()``
    and per ``step()``, one per epoch for KL early stopping). Wrapping them here lets the
    ``gpu`` tests run everything else in "error" mode, so any new sync fails loudly.
    """
    if not torch.cuda.is_available():
        yield
        return
    mode = torch.cuda.get_sync_debug_mode()
    if mode:
        torch.cuda.set_sync_debug_mode(0)
    try:
        yield
    finally:
        if mode:
            torch.cuda.set_sync_debug_mode(mode)
