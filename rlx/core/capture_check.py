"""What a CUDA graph capture needs of a piece of code, checked on any device.

A CUDA graph replays the kernels it recorded. Whatever the host decided, read or copied
in while it was captured is frozen into it: a value read back to the host (``.item()``,
``nonzero``, a boolean mask's indexing) is read once and never again, a tensor made
from host data (``torch.tensor(...)``) is uploaded once, and every tensor the code reads
from outside is read at the address it had during the capture. :class:`CaptureCheck`
records, op by op, what code run inside it would break of this, so it can be tested on
a CPU (rlx tests its captured phases, and a graph-safe env's step, with it).

Example:
    >>> import torch
    >>> x = torch.ones(3)
    >>> with CaptureCheck() as check:
    ...     y = x * 2
    ...     n = int(y.sum())
    >>> sorted(check.host_ops)
    ['aten._local_scalar_dense']
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["CaptureCheck", "NOT_CAPTURABLE"]

#: The aten ops no captured region may run: reads of device values on the host, and
#: tensors made from host data.
NOT_CAPTURABLE = frozenset({
    "aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.unique", "aten._unique2",
    "aten.lift_fresh", "aten.lift_fresh_copy",
})


class CaptureCheck(TorchDispatchMode):
    """Record what the code run inside would break of a CUDA graph capture.

    Attributes:
        ops: Every aten op run inside, by name (``"aten.add"``).
        host_ops: The ops run inside that a capture cannot hold (:data:`NOT_CAPTURABLE`).
        external: The storages (their data pointers) that ops inside read and that no op
            inside made: what a replay reads at the addresses of the capture. Code that
            runs twice with the same ``external`` reads the same tensors both times.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()
        self.external: set[int] = set()
        self._made: set[int] = set()

    @property
    def host_ops(self) -> set[str]:
        return self.ops & NOT_CAPTURABLE

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.ops.add(str(func.overloadpacket))
        for ptr in _storages((args, kwargs)):
            if ptr not in self._made:
                self.external.add(ptr)
        out = func(*args, **(kwargs or {}))
        self._made.update(_storages(out))
        return out


def _storages(tree: Any) -> list[int]:
    """The data pointers of the tensors in ``tree`` that own memory (a functorch wrapper,
    under ``vmap`` or ``grad``, has none: the tensor it wraps is dispatched on its own)."""
    ptrs = []
    for x in tree_leaves(tree):
        if isinstance(x, torch.Tensor):
            try:
                ptrs.append(x.untyped_storage().data_ptr())
            except RuntimeError:
                continue
    return ptrs
