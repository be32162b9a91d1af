"""rlx.core.narrow_products: products with a narrow result, computed transposed in CPU programs."""

from __future__ import annotations

import pytest
import torch
from torch._inductor.utils import run_and_get_code
from torch.fx.experimental.proxy_tensor import make_fx

from rlx.core.compiling import NARROW_PRODUCTS, compiled
from rlx.core.narrow_products import NarrowProducts, is_narrow

mm = torch.ops.aten.mm.default


def _weight_gradient(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.mm(g.t(), x) * 2.0  # a consumer of the product: the rewrite must feed it


def _products(graph: torch.fx.Graph) -> list[tuple]:
    """Each mm's operands as (shape, is a transposed view of a placeholder)."""
    out = []
    for node in graph.nodes:
        if node.target is mm:
            out.append(tuple(tuple(a.meta["val"].shape) for a in node.args))
    return out


@pytest.mark.parametrize("rows, outputs, inputs, narrow", [
    (512, 64, 4, True), (37, 64, 2, True), (512, 64, 8, True),  # the first layer's weight gradient
    (512, 64, 1, False),  # a matrix-vector product: MKL is fast
    (512, 64, 16, False), (512, 6, 2, False),  # wide enough, or hardly taller than wide
])
def test_a_narrow_product_is_computed_transposed_and_equals_the_direct_one(rows, outputs, inputs, narrow) -> None:
    """The pass rewrites ``mm(a, b)`` with a ``[M, N]`` result of 2 <= N <= 8 <= M / 4 into
    ``mm(bᵀ, aᵀ)ᵀ`` and leaves other products alone. In float64 both are sums of the same
    K products in some order, each within γ_K·Σ|a_ik b_kj| < (K + 1)·u·Σ|a_ik b_kj| of the
    exact sum (u = 2^-53): within twice that of each other, per element."""
    g = torch.randn(rows, outputs, dtype=torch.float64)
    x = torch.randn(rows, inputs, dtype=torch.float64)
    gm = make_fx(_weight_gradient, tracing_mode="fake")(g, x)
    assert _products(gm.graph) == [((outputs, rows), (rows, inputs))]
    NarrowProducts()(gm.graph)
    gm.graph.lint()
    gm.recompile()
    expected = [((inputs, rows), (rows, outputs))] if narrow else [((outputs, rows), (rows, inputs))]
    assert _products(gm.graph) == expected
    assert is_narrow(outputs, inputs) == narrow
    out = gm(g, x)
    reference = _weight_gradient(g, x)
    assert out.shape == reference.shape
    # Two sums' errors, then the consumer's exact doubling.
    bound = 2 * 2 * (rows + 1) * 2.0**-53 * (g.abs().t() @ x.abs())
    assert ((out - reference).abs() <= bound).all()


def test_compiled_cpu_programs_run_the_pass_and_match_eager() -> None:
    """rlx's CPU programs carry the pass (inductor's ``post_grad_custom_post_pass``): a
    compiled Linear layer's forward and backward with 4 inputs computes its weight
    gradient (the narrow product) transposed, and equals eager's in float64 to the bound
    of two summation orders."""
    assert NARROW_PRODUCTS
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 64, dtype=torch.float64)
    x = torch.randn(512, 4, dtype=torch.float64)

    def weight_gradient(x: torch.Tensor) -> torch.Tensor:
        return torch.autograd.grad(layer(x).square().sum(), layer.weight)[0]

    program = compiled(weight_gradient, device="cpu")
    with torch._inductor.config.patch(force_disable_caches=True):  # compiled here, the pass run
        out, code = run_and_get_code(program, x)
    # The C++ wrapper's product takes x's transposed view, [4, 512] (without the pass: gᵀ, [64, 512]).
    assert "{4L, 512L}" in "\n".join(code) and "{64L, 512L}" not in "\n".join(code)
    reference = weight_gradient(x)
    # The output gradient 2y is the same in both (the forward pass is the same addmm, the
    # doubling exact); its product with x sums 512 terms in two orders, each within
    # γ_512·Σ|g||x| < 513·u·Σ|g||x| of the exact sum.
    g = 2 * layer(x).detach()
    bound = 2 * 513 * 2.0**-53 * (g.abs().t() @ x.abs())
    assert ((out - reference).abs() <= bound).all(), ((out - reference).abs() / bound).max()
