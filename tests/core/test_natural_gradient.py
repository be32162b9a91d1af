"""Fisher-vector products and conjugate gradient against dense float64 references."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import functional_call
from torch.testing import assert_close
from torchrl.data import Bounded, Categorical as CategoricalSpec, MultiCategorical as MultiCategoricalSpec

from rlx.core.distributions import Categorical, MultiCategorical, Normal
from rlx.core.natural_gradient import conjugate_gradient, gauss_newton_fvp, kl_hessian_fvp



def _tiny_net(out: int, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, out)).double()


def _flat(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def _params_fn(net: torch.nn.Module, obs: torch.Tensor, extra: torch.Tensor | None = None):
    names = [n for n, _ in net.named_parameters()]
    shapes = [p.shape for p in net.parameters()]
    sizes = [p.numel() for p in net.parameters()]

    def f(theta: torch.Tensor) -> torch.Tensor:
        params = {n: c.view(s) for n, c, s in zip(names, torch.split(theta, sizes), shapes)}
        out = functional_call(net, params, (obs,))
        if extra is not None:  # a state-independent log-std, appended per sample
            out = torch.cat([out, extra.expand(out.shape[0], -1)], -1)
        return out

    return f


CASES = {
    "categorical": (CategoricalSpec(4), Categorical, 4, None),
    "multicategorical": (MultiCategoricalSpec([2, 3]), MultiCategorical, 5, None),
    "normal": (Bounded(-1.0, 1.0, shape=(2,)), Normal, 2, torch.tensor([-0.3, 0.2], dtype=torch.float64)),
}


def _dense_fisher(f, theta, dist_cls, spec) -> torch.Tensor:
    """Σ Jᵢᵀ Mᵢ Jᵢ / n with explicit Jacobians and explicit per-sample Fisher matrices."""
    out = f(theta)
    n, k = out.shape
    jac = torch.autograd.functional.jacobian(f, theta)  # [n, k, P]
    dist = dist_cls(out, spec)
    eye = torch.eye(k, dtype=torch.float64)
    # Column j of M is M e_j: build each sample's matrix from the analytic products.
    m = torch.stack([dist.fisher_product(eye[j].expand(n, k)) for j in range(k)], dim=-1)  # [n, k, k]
    return torch.einsum("nkp,nkl,nlq->pq", jac, m, jac) / n


def _explicit_m(dist_cls, out: torch.Tensor) -> torch.Tensor:
    """The textbook per-sample Fisher in the distribution parameters, built by hand."""
    n = out.shape[0]
    if dist_cls is Normal:
        mean, log_std = out.chunk(2, -1)
        diag = torch.cat([torch.exp(-2 * log_std), torch.full_like(log_std, 2.0)], -1)
        return torch.diag_embed(diag)
    blocks = [4] if dist_cls is Categorical else [2, 3]
    m = torch.zeros(n, out.shape[1], out.shape[1], dtype=out.dtype)
    start = 0
    for size in blocks:
        p = torch.softmax(out[:, start : start + size], -1)
        m[:, start : start + size, start : start + size] = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
        start += size
    return m


@pytest.mark.parametrize("case", sorted(CASES))
def test_gauss_newton_fvp_equals_an_explicit_fisher_in_float64(case: str) -> None:
    spec, dist_cls, out_dim, log_std = CASES[case]
    net = _tiny_net(out_dim)
    obs = torch.randn(7, 3, dtype=torch.float64)
    f = _params_fn(net, obs, log_std)
    theta = _flat(net)
    out = f(theta)
    jac = torch.autograd.functional.jacobian(f, theta)
    dense = torch.einsum("nkp,nkl,nlq->pq", jac, _explicit_m(dist_cls, out), jac) / out.shape[0]
    assert_close(_dense_fisher(f, theta, dist_cls, spec), dense, atol=1e-12, rtol=0)
    old = dist_cls(out.detach(), spec)
    fvp = gauss_newton_fvp(f, theta, old.fisher_product)
    for _ in range(3):
        v = torch.randn_like(theta)
        assert (fvp(v) - dense @ v).abs().max() < 1e-10


@pytest.mark.parametrize("case", sorted(CASES))
def test_kl_hessian_fallback_agrees_with_gauss_newton(case: str) -> None:
    spec, dist_cls, out_dim, log_std = CASES[case]
    net = _tiny_net(out_dim, seed=1)
    obs = torch.randn(9, 3, dtype=torch.float64)
    f = _params_fn(net, obs, log_std)
    theta = _flat(net)
    old = dist_cls(f(theta).detach(), spec)
    fallback = kl_hessian_fvp(lambda th: old.kl(dist_cls(f(th), spec)).mean(), theta, damping=0.3)
    gauss_newton = gauss_newton_fvp(f, theta, old.fisher_product, damping=0.3)
    # The Hessian of the mean KL at θ_old, formed densely, is the same matrix.
    hessian = torch.autograd.functional.hessian(lambda th: old.kl(dist_cls(f(th), spec)).mean(), theta)
    for _ in range(3):
        v = torch.randn_like(theta)
        assert (fallback(v) - gauss_newton(v)).abs().max() < 1e-10
        assert (fallback(v) - (hessian @ v + 0.3 * v)).abs().max() < 1e-10


def test_fisher_quadratic_form_is_never_negative() -> None:
    spec, dist_cls, out_dim, _ = CASES["categorical"]
    net = _tiny_net(out_dim, seed=2)
    f = _params_fn(net, torch.randn(11, 3, dtype=torch.float64))
    theta = _flat(net)
    fvp = gauss_newton_fvp(f, theta, dist_cls(f(theta).detach(), spec).fisher_product)
    for _ in range(20):
        v = torch.randn_like(theta) * 10
        assert v.dot(fvp(v)) >= -1e-12


def _spd(p: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(p, p, generator=g, dtype=torch.float64)
    a = q @ q.T / p + 0.1 * torch.eye(p, dtype=torch.float64)
    return a, torch.randn(p, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("p", [1, 5, 23])
def test_cg_solves_the_system_exactly_in_p_iterations(p: int) -> None:
    a, b = _spd(p, seed=p)
    result = conjugate_gradient(lambda v: a @ v, b, iters=p + 2, residual_tol=1e-30)
    assert_close(result.x, torch.linalg.solve(a, b), atol=1e-8, rtol=1e-8)
    assert result.residual_norm < 1e-8


@pytest.mark.parametrize("iters", [3, 12])
def test_cg_on_rows_solves_each_row_as_alone(iters: int) -> None:
    """[S, P] right-hand sides (S seeds, block-diagonal A): row i's iterates are a solve of
    row i alone, including a row that converges early (an identity block) and freezes
    while the others go on, and a zero row."""
    p = 6
    blocks = [_spd(p, seed=s)[0] for s in range(3)] + [2 * torch.eye(p, dtype=torch.float64), _spd(p, seed=9)[0]]
    b = torch.stack([_spd(p, seed=10 + s)[1] for s in range(len(blocks))])
    b[4] = 0.0
    stacked = torch.stack(blocks)
    result = conjugate_gradient(lambda v: torch.einsum("spq,sq->sp", stacked, v), b, iters=iters, residual_tol=1e-20)
    assert result.x.shape == b.shape and result.residual_norm.shape == (len(blocks),)
    for i, a in enumerate(blocks):
        alone = conjugate_gradient(lambda v: a @ v, b[i], iters=iters, residual_tol=1e-20)
        assert_close(result.x[i], alone.x, atol=1e-12, rtol=1e-12)
        assert_close(result.residual_norm[i], alone.residual_norm, atol=1e-12, rtol=1e-12)
    assert_close(result.x[3], b[3] / 2)  # the identity block: exact after one step, then frozen
    assert torch.equal(result.x[4], torch.zeros(p))


def test_cg_on_a_real_fisher_matches_a_dense_solve() -> None:
    spec, dist_cls, out_dim, _ = CASES["categorical"]
    net = _tiny_net(out_dim, seed=3)
    f = _params_fn(net, torch.randn(32, 3, dtype=torch.float64))
    theta = _flat(net)
    fvp = gauss_newton_fvp(f, theta, dist_cls(f(theta).detach(), spec).fisher_product, damping=0.1)
    dense = _dense_fisher(f, theta, dist_cls, spec) + 0.1 * torch.eye(theta.numel(), dtype=torch.float64)
    g = torch.randn_like(theta)
    result = conjugate_gradient(fvp, g, iters=theta.numel(), residual_tol=1e-30)
    assert_close(result.x, torch.linalg.solve(dense, g), atol=1e-6, rtol=1e-6)


def test_cg_objective_decreases_monotonically() -> None:
    a, b = _spd(30, seed=7)
    objective = []
    conjugate_gradient(
        lambda v: a @ v, b, iters=30, residual_tol=0.0,
        callback=lambda i, x: objective.append((0.5 * x @ a @ x - b @ x).item()),
    )
    assert all(later <= earlier + 1e-12 for earlier, later in zip(objective, objective[1:]))
    assert objective[-1] < objective[0]


def test_cg_freezes_once_converged_without_nans() -> None:
    a = torch.eye(4, dtype=torch.float64) * 2
    b = torch.ones(4, dtype=torch.float64)
    xs = []
    result = conjugate_gradient(lambda v: a @ v, b, iters=10, residual_tol=1e-20, callback=lambda i, x: xs.append(x))
    assert_close(result.x, b / 2)
    assert all(torch.equal(x, xs[0]) for x in xs)  # exact after one step, then frozen
    assert torch.isfinite(result.x).all() and result.residual_norm == 0


def test_cg_with_zero_right_hand_side_returns_zero() -> None:
    result = conjugate_gradient(lambda v: v, torch.zeros(3), iters=5)
    assert torch.equal(result.x, torch.zeros(3)) and not math.isnan(result.residual_norm.item())


def test_natural_step_is_invariant_to_a_linear_reparameterisation() -> None:
    """Linear-Gaussian policy: mean = W s. Reparameterise W = V A; natural steps agree."""
    torch.manual_seed(0)
    d, a_dim, n = 3, 2, 64
    obs = torch.randn(n, d, dtype=torch.float64)
    actions = torch.randn(n, a_dim, dtype=torch.float64)
    adv = torch.randn(n, 1, dtype=torch.float64)
    log_std = torch.full((a_dim,), -0.5, dtype=torch.float64)
    spec = Bounded(-10.0, 10.0, shape=(a_dim,))
    w0 = torch.randn(a_dim, d, dtype=torch.float64)
    reparam = torch.randn(d, d, dtype=torch.float64) + 2 * torch.eye(d, dtype=torch.float64)  # invertible A
    v0 = w0 @ torch.linalg.inv(reparam)

    def params_w(w_flat):
        mean = obs @ w_flat.view(a_dim, d).T
        return torch.cat([mean, log_std.expand(n, a_dim)], -1)

    def params_v(v_flat):
        return params_w((v_flat.view(a_dim, d) @ reparam).reshape(-1))

    def step(params_fn, theta, natural: bool):
        old = Normal(params_fn(theta).detach(), spec)
        old_logp = old.log_prob(actions)
        surrogate = lambda th: (torch.exp(Normal(params_fn(th), spec).log_prob(actions) - old_logp) * adv).mean()
        g = torch.func.grad(surrogate)(theta)
        if not natural:
            return theta + 0.1 * g
        fvp = gauss_newton_fvp(params_fn, theta, old.fisher_product)
        x = conjugate_gradient(fvp, g, iters=theta.numel() + 2, residual_tol=1e-30).x
        return theta + 0.1 * x

    for natural, same in ((True, True), (False, False)):
        w1 = step(params_w, w0.reshape(-1), natural).view(a_dim, d)
        v1 = step(params_v, v0.reshape(-1), natural).view(a_dim, d)
        close = torch.allclose(w1, v1 @ reparam, atol=1e-8, rtol=1e-8)
        assert close == same, f"natural={natural}"


def test_normal_fisher_matches_the_kl_hessian_on_and_beyond_the_log_std_clamp() -> None:
    # Raw log-stds on each clamp bound, beyond each, and inside. On a bound clamp's
    # gradient passes, so the Fisher keeps its log-std entry 2; beyond it, it is 0.
    from rlx.core.distributions import LOG_STD_MAX, LOG_STD_MIN

    spec = Bounded(-1.0, 1.0, shape=(1,))
    raw = [LOG_STD_MAX, LOG_STD_MIN, LOG_STD_MAX + 1.0, LOG_STD_MIN - 1.0, 0.3]
    for log_std in raw:
        params = torch.tensor([[0.2, log_std]], dtype=torch.float64)
        old = Normal(params, spec)
        hessian = torch.autograd.functional.hessian(lambda p: old.kl(Normal(p.view(1, 2), spec)).sum(), params.view(2))
        analytic = torch.stack([old.fisher_product(e.view(1, 2)).view(2) for e in torch.eye(2, dtype=torch.float64)], 1)
        assert_close(analytic, hessian, rtol=1e-12, atol=0, msg=f"raw log_std {log_std}")
