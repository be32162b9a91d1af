"""A graph pass for rlx's compiled CPU programs: a product with a narrow result computed
the other way round.

A weight gradient of a layer with few inputs, ``gᵀ x`` with ``g`` the ``[K, M]`` gradient
of its outputs and ``x`` its ``[K, N]`` inputs (``N``: CartPole's 4 or Pendulum's 3
observations), is a product ``[M, K] x [K, N]`` whose result has a handful of columns.
MKL computes that shape an order of magnitude slower than the same product transposed,
``(xᵀ g)ᵀ``, which has a handful of rows (one thread, AMD EPYC Zen 3, MKL as torch 2.13
ships it; ``python benchmarks/experiments/narrow_products.py``): 49 against 12 us for
``[64, 512] x [512, 4]`` (the first layer of vs_jax's CartPole minibatch), 609 against
56 us for ``[64, 4096] x [4096, 4]``, 1469 against 144 us for ``[256, 2048] x [2048, 4]``
(a 256-wide network's pass of 2048 rows). Products with one column (a matrix-vector
product) gain nothing; with 16, 1.1-1.4x where ``g`` is a view and 0.7-0.9x where it is
contiguous: both are left alone. Measured on that CPU only (MKL takes other code paths
on Intel's).

:class:`NarrowProducts` rewrites each such ``aten.mm`` in a graph inductor compiles for a
CPU (after autograd's partition, before lowering) into ``permute(mm(bᵀ, aᵀ))``: the same
sums of the same products, in the order MKL's other kernel adds them (as any change of
kernel reorders a float32 sum). Transposes are views: nothing is copied.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

__all__ = ["NarrowProducts", "is_narrow"]

_mm = torch.ops.aten.mm.default
_permute = torch.ops.aten.permute.default


def is_narrow(m: Any, n: Any) -> bool:
    """Whether a product with an ``[m, n]`` result is computed transposed: 2 to 8 columns
    and at least four times as many rows (static sizes only)."""
    return isinstance(m, int) and isinstance(n, int) and 2 <= n <= 8 and m >= 4 * n


class NarrowProducts(CustomGraphPass):
    """Inductor's ``post_grad_custom_post_pass`` for CPU programs: ``mm(a, b)`` with a
    narrow result (:func:`is_narrow`) as ``mm(bᵀ, aᵀ)ᵀ`` (the module docstring)."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target is not _mm:
                continue
            a, b = node.args
            out, a_val, b_val = (getattr(x, "meta", {}).get("val") for x in (node, a, b))
            if out is None or a_val is None or b_val is None or not is_narrow(*out.shape):
                continue
            with graph.inserting_before(node):
                bt = graph.call_function(_permute, (b, [1, 0]))
                at = graph.call_function(_permute, (a, [1, 0]))
                product = graph.call_function(_mm, (bt, at))
                result = graph.call_function(_permute, (product, [1, 0]))
            bt.meta["val"], at.meta["val"] = b_val.t(), a_val.t()
            product.meta["val"] = torch.mm(b_val.t(), a_val.t())
            result.meta["val"] = product.meta["val"].t()
            node.replace_all_uses_with(result)
            graph.erase_node(node)

    def uuid(self) -> Any:
        return get_hash_for_files((__file__,))
