"""``matmul_precision``: the precision of float32 matmuls, by rlx's names for torch's."""

from __future__ import annotations

import torch

__all__ = ["MATMUL_PRECISIONS", "apply_matmul_precision", "resolve_matmul_precision"]

#: ``matmul_precision`` -> ``torch.set_float32_matmul_precision``'s name (``None``: leave it).
MATMUL_PRECISIONS: dict[str | None, str | None] = {None: None, "fp32": "highest", "tf32": "high", "bf16": "medium"}
#: What ``matmul_precision="auto"`` (the default) is on each device type: TF32 on CUDA,
#: where the shipped CartPole config's seeds 0-2 solved with it as with float32 (H100,
#: 2026-11-27, ``tests/test_gpu.py``) and JAX multiplies float32 matrices in TF32 too;
#: elsewhere torch's setting is left as it is (``None``).
AUTO_MATMUL_PRECISION: dict[str, str | None] = {"cuda": "tf32"}


def resolve_matmul_precision(name: str | None, device: torch.device) -> str | None:
    """``name`` with ``"auto"`` resolved for ``device`` (:data:`AUTO_MATMUL_PRECISION`)."""
    return AUTO_MATMUL_PRECISION.get(device.type) if name == "auto" else name


def apply_matmul_precision(name: str | None) -> None:
    """Set torch's process-wide float32 matmul precision for ``name`` (``None``: leave it)."""
    precision = MATMUL_PRECISIONS[name]
    if precision is not None:
        torch.set_float32_matmul_precision(precision)
