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


copy_strided = torch.ops.prims.copy_strided.default


def _two_steps(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A layer applied at two steps, as a T loop's program does: ``Wᵀ`` taken at each."""
    return torch.nn.functional.linear(x, w, b) + torch.nn.functional.linear(y, w, b) * 0.5


def test_a_transposed_weight_is_copied_once_and_the_products_read_the_copy() -> None:
    """``x @ Wᵀ`` at two steps: one contiguous copy of ``Wᵀ`` (a ``[k, n]`` buffer of
    strides ``(n, 1)``), which both products read; the result is the same sums of the same
    products (float64, two orders: within 2·γ_K·Σ|x||W| per element, then the exact
    halving and one rounded addition)."""
    torch.manual_seed(0)
    x, y = torch.randn(64, 64, dtype=torch.float64), torch.randn(64, 64, dtype=torch.float64)
    w, b = torch.randn(32, 64, dtype=torch.float64), torch.randn(32, dtype=torch.float64)
    gm = make_fx(_two_steps, tracing_mode="fake")(x, y, w, b)
    NarrowProducts()(gm.graph)
    gm.graph.lint()
    gm.recompile()
    copies = [n for n in gm.graph.nodes if n.target is copy_strided]
    assert len(copies) == 1 and copies[0].meta["val"].stride() == (32, 1)
    products = [n for n in gm.graph.nodes if n.target in (torch.ops.aten.addmm.default, mm)]
    assert len(products) == 2 and all(n.args[-1] is copies[0] for n in products)
    out, reference = gm(x, y, w, b), _two_steps(x, y, w, b)
    u = 2.0**-53
    scale = (x.abs() @ w.abs().t() + b.abs()) + (y.abs() @ w.abs().t() + b.abs()) * 0.5
    assert ((out - reference).abs() <= 2 * (66 * u) * scale + 2 * u * reference.abs()).all()


def _actor(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(torch.tanh(torch.nn.functional.linear(x, w1, b1)), w2, b2)


@pytest.mark.parametrize("rows, left", [(1, [(4, 64)]), (64, []), (512, []), (513, [(4, 64), (64, 2)])])
def test_the_smallest_products_become_sums_up_to_the_row_limit(rows, left) -> None:
    """A 4-input first layer (a sum of 4 broadcast products over the contiguous copy of
    ``Wᵀ``, so from :data:`MIN_ROWS` rows) and a 2-output head (dot products of 64 terms)
    are written as sums, up to :data:`SMALL_ROWS` rows; each result
    is the same sum in another order: within 2·γ_K·Σ|a||b| of the direct one per element
    (float64), the first layer's difference carried through tanh (1-Lipschitz) and the head."""
    from rlx.core.narrow_products import MIN_ROWS, SMALL_ROWS

    assert MIN_ROWS <= 64 and SMALL_ROWS == 512
    torch.manual_seed(1)
    x = torch.randn(rows, 4, dtype=torch.float64)
    w1, b1 = torch.randn(64, 4, dtype=torch.float64), torch.randn(64, dtype=torch.float64)
    w2, b2 = torch.randn(2, 64, dtype=torch.float64) / 8, torch.randn(2, dtype=torch.float64)
    gm = make_fx(_actor, tracing_mode="fake")(x, w1, b1, w2, b2)
    NarrowProducts()(gm.graph)
    gm.graph.lint()
    gm.recompile()
    assert [tuple(n.args[-1].meta["val"].shape) for n in gm.graph.nodes
            if n.target in (torch.ops.aten.addmm.default, mm)] == left
    out, reference = gm(x, w1, b1, w2, b2), _actor(x, w1, b1, w2, b2)
    u = 2.0**-53
    first = 2 * 6 * u * (x.abs() @ w1.abs().t() + b1.abs())  # 4 products and the bias: γ_5
    hidden = torch.tanh(torch.nn.functional.linear(x, w1, b1)).abs()
    bound = first @ w2.abs().t() + 2 * 66 * u * (hidden.abs() + first) @ w2.abs().t() + 2 * 66 * u * b2.abs()
    assert ((out - reference).abs() <= bound).all()


def test_compiled_cpu_programs_multiply_contiguous_weights_and_sum_the_smallest_products() -> None:
    """In a compiled CPU program of 64 rows (a T loop's step), the 4 -> 64 -> 64 -> 2
    actor calls MKL once (the hidden layer, on a contiguous copy of ``Wᵀ``), the first
    layer and the head fused into inductor's kernels; it equals eager in float64 within
    the bound of the summation orders (each layer's sums within 2·γ_65 relative to its
    absolute sums, carried through the 1-Lipschitz tanh)."""
    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 2)).double()
    x = torch.randn(64, 4, dtype=torch.float64)

    @torch.no_grad()
    def act(x: torch.Tensor) -> torch.Tensor:
        return net(x)

    program = compiled(act, device="cpu")
    with torch._inductor.config.patch(force_disable_caches=True):
        out, code = run_and_get_code(program, x)
    source = "\n".join(code)
    assert source.count("_cpu_addmm_out(") + source.count("_cpu_mm_out(") == 1
    # The hidden product reads a [64, 64] buffer of strides (64, 1), not the weight's view.
    assert "reinterpret_tensor_wrapper(arg" not in source.split("addmm_out(")[1].split(";")[0]
    reference = act(x)
    gamma = 2 * 66 * 2.0**-53  # two orders of at most 65 terms (64 products and the bias)
    error, h = torch.zeros(64, 4, dtype=torch.float64), x
    for i, layer in enumerate((net[0], net[2], net[4])):
        w, b = layer.weight.abs(), layer.bias.abs()
        error = error @ w.t() + gamma * (h.abs() @ w.t() + b)  # tanh is 1-Lipschitz: errors pass through
        h = torch.tanh(layer(h)) if i < 2 else None
    assert ((out - reference).abs() <= error).all(), ((out - reference).abs() / error).max()
