"""How ten conjugate-gradient iterations amplify rounding in the natural step (#41).

Builds NPG on Pendulum as tests/members/test_member_hparams.py's member 0 does (damping
0.01, float64 model), takes the dense (F + λI) of its first step from the Fisher-vector
products, and prints its spectrum, g's weight on it, pAp per iteration, and how far a
1e-15 relative change of g moves each float64 CG iterate.

    python benchmarks/experiments/cg_sensitivity.py
"""

from __future__ import annotations

import torch

import rlx.algorithms.npg as npg
from rlx import NPGConfig
from rlx.envs import Pendulum

captured: dict[str, torch.Tensor] = {}
_cg = npg.conjugate_gradient


def _capture(fvp, g, **kwargs):
    P = g.shape[1]
    captured["A"] = torch.stack([fvp(e.unsqueeze(0))[0] for e in torch.eye(P, dtype=g.dtype)], 1)
    captured["g"] = g[0].clone()
    return _cg(fvp, g, **kwargs)


def _iterates(A: torch.Tensor, b: torch.Tensor, iters: int) -> list[tuple[torch.Tensor, float]]:
    """Plain CG from x = 0: each iterate and its pAp."""
    x, r, p = torch.zeros_like(b), b.clone(), b.clone()
    rr, out = r @ r, []
    for _ in range(iters):
        Ap = A @ p
        pAp = p @ Ap
        alpha = rr / pAp
        x, r = x + alpha * p, r - alpha * Ap
        rr_new = r @ r
        p, rr = r + rr_new / rr * p, rr_new
        out.append((x.clone(), pAp.item()))
    return out


def main() -> None:
    npg.conjugate_gradient = _capture
    algo = NPGConfig(num_envs=8, horizon=16, device="cpu", seed=0, optimizer_cls=torch.optim.SGD,
                     optimizer_config={"lr": 0.0125}, model_config={"hiddens": [16, 16], "activation_fn": "tanh"},
                     fvp_subsample=1.0, optim_critic_iters=2, damping=0.01, max_kl=0.001, gae_lambda=0.8).build(Pendulum)
    algo.policy.double()
    algo.collect()
    algo.step()
    npg.conjugate_gradient = _cg
    A, g = captured["A"], captured["g"]
    A = (A + A.T) / 2
    eig, vecs = torch.linalg.eigh(A)
    at_damping = int((eig < 0.01 * (1 + 1e-6)).sum())
    print(f"P = {len(g)}: {at_damping} eigenvalues at the damping, {len(g) - at_damping} above; "
          f"kappa = {(eig.max() / eig.min()).item():.0f}")
    print("g's weight on the 6 largest eigenvalues:", [f"{c:.2g}" for c in (vecs.T @ g)[-6:].abs().tolist()])
    torch.manual_seed(0)
    nudged = g * (1 + 1e-15 * torch.randn_like(g))
    for i, ((x, pAp), (y, _)) in enumerate(zip(_iterates(A, g, 12), _iterates(A, nudged, 12))):
        print(f"iteration {i + 1:2d}: pAp {pAp:.2e}   |x' - x| / |x| = {((y - x).norm() / x.norm()).item():.1e}")


if __name__ == "__main__":
    main()
