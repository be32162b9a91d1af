"""``matmul_precision``: the precision of float32 matmuls, by rlx's names for torch's."""

from __future__ import annotations

import torch

__all__ = ["MATMUL_PRECISIONS", "apply_matmul_precision"]

#: ``matmul_precision`` -> ``torch.set_float32_matmul_precision``'s name (``None``: leave it).
MATMUL_PRECISIONS: dict[str | None, str | None] = {None: None, "fp32": "highest", "tf32": "high", "bf16": "medium"}


def apply_matmul_precision(name: str | None) -> None:
    """Set torch's process-wide float32 matmul precision for ``name`` (``None``: leave it)."""
    precision = MATMUL_PRECISIONS[name]
    if precision is not None:
        torch.set_float32_matmul_precision(precision)
