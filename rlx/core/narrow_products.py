"""A graph pass for rlx's compiled CPU programs: small products laid out, or written, the
way a CPU computes them fastest.

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

Two more rewrites, for products of 16 to :data:`SMALL_ROWS` rows (a T loop's step, a
minibatch update at small B). A linear layer multiplies ``x Wᵀ``, whose second operand is
a transposed view, and MKL takes a slower kernel for that layout (one thread, Intel Xeon,
timed alone: 13.4 against 7.2 us for ``[64, 64] x [64, 64]``, 41.9 against 35.8 us at 512
rows; ``python benchmarks/experiments/product_layouts.py --part products``):
:func:`copy_transposed_operands` gives the product a contiguous copy of ``Wᵀ``, one per
program. And a product whose MKL call costs more than its arithmetic (a 4-input first
layer, 7 us at 512 rows; a 2-output head, 14 us) becomes elementwise products and a sum
(:func:`sum_small_products`), which inductor fuses with the bias, the ``tanh`` and the
log-softmax around it. vs_jax's B = 64 iteration ran 1.07x faster with both
(``product_layouts.py --part iteration``); larger products ran slower with them
(docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

__all__ = ["NarrowProducts", "is_narrow"]

_mm = torch.ops.aten.mm.default
_addmm = torch.ops.aten.addmm.default
# Not aten.clone: inductor lowers a clone without fixing its layout, and the product then
# reads a copy laid out as the view was.
_copy_strided = torch.ops.prims.copy_strided.default
_unsqueeze = torch.ops.aten.unsqueeze.default
_mul = torch.ops.aten.mul.Tensor
_sum = torch.ops.aten.sum.dim_IntList
_add = torch.ops.aten.add.Tensor
#: :func:`sum_small_products`' limits: result columns (and the terms of their dot
#: products), and terms of a sum of broadcast products.
SUMMED_COLUMNS, SUMMED_COLUMN_TERMS, SUMMED_TERMS = 2, 256, 8
#: The most rows of a product that :func:`copy_transposed_operands` and
#: :func:`sum_small_products` rewrite: vs_jax's B = 1024 iteration, whose products have
#: 1024 to 4096 rows, ran slower with either (docs/benchmarks.md), though MKL alone
#: multiplies those shapes faster with a contiguous ``Wᵀ``.
SMALL_ROWS = 512
#: The fewest rows a product needs for its transposed operand to be copied: at a few
#: rows MKL is as fast or faster on the view (``[2, 512] x [512, 64]``: 4.5 against 5.3 us).
MIN_ROWS = 16
_permute = torch.ops.aten.permute.default


def is_narrow(m: Any, n: Any) -> bool:
    """Whether a product with an ``[m, n]`` result is computed transposed: 2 to 8 columns
    and at least four times as many rows (static sizes only)."""
    return isinstance(m, int) and isinstance(n, int) and 2 <= n <= 8 and m >= 4 * n


class NarrowProducts(CustomGraphPass):
    """Inductor's ``post_grad_custom_post_pass`` for CPU programs: ``mm(a, b)`` with a
    narrow result (:func:`is_narrow`) as ``mm(bᵀ, aᵀ)ᵀ``, then, with
    :attr:`contiguous_weights`, each transposed second operand copied contiguous (the
    module docstring)."""

    #: Whether a product's second operand that is a transposed view (a linear layer's
    #: ``Wᵀ``) is copied into a contiguous buffer first (:func:`copy_transposed_operands`).
    contiguous_weights = True

    #: Whether products with at most :data:`SUMMED_COLUMNS` result columns or
    #: :data:`SUMMED_TERMS` terms are written as sums (:func:`sum_small_products`).
    summed_products = True

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.transpose_narrow(graph)
        if self.summed_products:
            sum_small_products(graph, columns=True)
        if self.contiguous_weights:
            copy_transposed_operands(graph)
        if self.summed_products:
            sum_small_products(graph, columns=False)

    @staticmethod
    def transpose_narrow(graph: torch.fx.Graph) -> None:
        """Each ``mm`` with a narrow result as ``mm(bᵀ, aᵀ)ᵀ``."""
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
        return get_hash_for_files((__file__,)), self.contiguous_weights, self.summed_products


def sum_small_products(graph: torch.fx.Graph, *, columns: bool) -> None:
    """Each ``mm``/``addmm`` whose MKL call costs more than its arithmetic, written as
    elementwise products and a sum, which inductor fuses with what reads and writes them.
    ``columns``: a result of at most :data:`SUMMED_COLUMNS` columns from a second operand
    whose columns are contiguous (a head's ``Wᵀ``), as row-by-row dot products; else a
    contraction of at most :data:`SUMMED_TERMS` terms over a second operand with
    contiguous rows (a first layer's copied ``Wᵀ``, a head's ``W`` in the backward pass),
    as a sum of broadcast products."""
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (_mm, _addmm) or node.kwargs:
            continue
        a, b = node.args[-2:]
        a_val, b_val = (getattr(x, "meta", {}).get("val") for x in (a, b))
        if a_val is None or b_val is None or not all(isinstance(s, int) for s in (*a_val.shape, *b_val.shape,
                                                                                  *b_val.stride())):
            continue
        if a_val.shape[0] > SMALL_ROWS:
            continue
        k, n = b_val.shape
        if columns and n <= SUMMED_COLUMNS and b_val.stride()[0] == 1 and k <= SUMMED_COLUMN_TERMS:
            terms = (_call(graph, node, _unsqueeze, a, 1), _call(graph, node, _permute, b, [1, 0]))
            terms = (terms[0], _call(graph, node, _unsqueeze, terms[1], 0))
            dim = 2  # [m, n, k]: each row of a times each column of b
        elif not columns and k <= SUMMED_TERMS and n > 1 and b_val.stride() == (n, 1):
            terms = (_call(graph, node, _unsqueeze, a, 2), _call(graph, node, _unsqueeze, b, 0))
            dim = 1  # [m, k, n]: each term of the sum a row of b scaled
        else:
            continue
        result = _call(graph, node, _sum, _call(graph, node, _mul, *terms), [dim])
        if node.target is _addmm:
            result = _call(graph, node, _add, result, node.args[0])
        node.replace_all_uses_with(result)
        graph.erase_node(node)


def _call(graph: torch.fx.Graph, before: torch.fx.Node, op: Any, *args: Any) -> torch.fx.Node:
    with graph.inserting_before(before):
        node = graph.call_function(op, args)
    node.meta["val"] = op(*(x.meta["val"] if isinstance(x, torch.fx.Node) else x for x in args))
    return node


def copy_transposed_operands(graph: torch.fx.Graph) -> None:
    """Give each ``mm``/``addmm`` of at least :data:`MIN_ROWS` rows whose second operand
    is a transposed view of a ``[n, k]`` tensor (``n >= 2``) a contiguous copy of it
    instead, one copy per operand however many products read it."""
    copies: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (_mm, _addmm) or node.kwargs:
            continue
        a, b = node.args[-2:]
        a_val, b_val = (getattr(x, "meta", {}).get("val") for x in (a, b))
        if a_val is None or b_val is None or not is_transposed(b_val) or not _rows_within(a_val.shape[0], MIN_ROWS):
            continue
        # The same view taken at each use (each step of a T loop's program) is one operand.
        key = (b.target, *b.args) if b.op == "call_function" and not b.kwargs else b
        if key not in copies:
            with graph.inserting_after(b):
                copies[key] = graph.call_function(_copy_strided, (b, [b_val.shape[1], 1]))
            copies[key].meta["val"] = b_val.contiguous()
        node.replace_input_with(b, copies[key])


def is_transposed(t: Any) -> bool:
    """Whether ``t`` is a 2-D transposed view of a contiguous tensor with static sizes,
    at least 2 columns and 2 rows (a ``[k, n]`` view of an ``[n, k]`` tensor)."""
    if t.dim() != 2 or not all(isinstance(s, int) for s in (*t.shape, *t.stride())):
        return False
    k, n = t.shape
    return k >= 2 and n >= 2 and t.stride() == (1, k)


def _rows_within(size: Any, least: int) -> bool:
    return isinstance(size, int) and least <= size <= SMALL_ROWS
