"""rlx.members.optim: the optimizer of S stacked seeds against S separate torch optimizers, in float64."""

from __future__ import annotations

import math

import pytest
import torch

from rlx.members.optim import SeedAdam, masked_step_, seed_optimizer

S = 3
SHAPES = [(S, 4, 5), (S, 1, 5), (S, 3)]


def _masks(gen: torch.Generator, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random ``(update, factor)`` per step; a seed with ``factor > 0`` always updates."""
    out = []
    for _ in range(steps):
        update = (torch.rand(S, generator=gen) < 0.7).double()
        factor = torch.tensor([0.0, 0.5, 1.0, 2.0], dtype=torch.float64)[torch.randint(0, 4, (S,), generator=gen)] * update
        out.append((update, factor))
    out[0] = (torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64), torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))
    return out


def _stacked_and_singles(gen: torch.Generator):
    stacked = [torch.randn(shape, generator=gen, dtype=torch.float64).requires_grad_() for shape in SHAPES]
    singles = [[p.detach()[i].clone().requires_grad_() for p in stacked] for i in range(S)]
    return stacked, singles


def _step_both(stacked_opt, stacked, single_opts, singles, masks, gen, base_lr: float, lr_tensor: torch.Tensor | None):
    for update, factor in masks:
        grads = [torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in stacked]
        frozen = int(torch.nonzero(update == 0)[0]) if (update == 0).any() else None
        for p, g in zip(stacked, grads):
            p.grad = g.clone()
            if frozen is not None:
                p.grad[frozen] = float("nan")  # a frozen seed's gradient is never read
        if isinstance(stacked_opt, SeedAdam):
            stacked_opt.step(update=update, factor=factor)
        else:
            masked_step_(stacked_opt, stacked, update, factor)
        for i in range(S):
            if not update[i]:
                continue
            for p, g in zip(singles[i], grads):
                p.grad = g[i].clone()
            for group in single_opts[i].param_groups:
                group["lr"] = base_lr * float(factor[i])
            single_opts[i].step()
        if lr_tensor is not None:
            assert stacked_opt.param_groups[0]["lr"] is lr_tensor


@pytest.mark.parametrize(
    "optimizer_cls,options",
    [
        (torch.optim.Adam, {}),
        (torch.optim.Adam, {"weight_decay": 0.05, "betas": (0.8, 0.99), "eps": 1e-6}),
        (torch.optim.Adam, {"amsgrad": True}),
        (torch.optim.AdamW, {"weight_decay": 0.1}),
        (torch.optim.AdamW, {}),  # AdamW's own default weight decay
    ],
    ids=["adam", "adam-l2-betas-eps", "amsgrad", "adamw", "adamw-default-decay"],
)
@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float-lr", "tensor-lr"])
def test_seed_adam_is_s_adams_each_stepping_only_when_its_seed_does(optimizer_cls, options: dict, tensor_lr: bool) -> None:
    """Seed i's parameters, moments and step count are those of a single Adam stepped at
    ``lr * factor_i`` on the steps where ``update_i`` is set and not stepped otherwise
    (its NaN gradient then ignored), across random masks."""
    gen = torch.Generator().manual_seed(0)
    lr = 1e-2
    stacked, singles = _stacked_and_singles(gen)
    lr_value = torch.tensor(lr, dtype=torch.float64) if tensor_lr else lr
    opt = seed_optimizer(optimizer_cls, stacked, S, {"lr": lr_value, **options, "fused": False})
    assert isinstance(opt, SeedAdam)
    single_opts = [optimizer_cls(ps, lr=lr, foreach=False, **options) for ps in singles]
    masks = _masks(gen, 8)
    _step_both(opt, stacked, single_opts, singles, masks, gen, lr, lr_value if tensor_lr else None)
    steps = torch.stack([u for u, _ in masks]).sum(dim=0)
    for i in range(S):
        for p, q in zip(stacked, singles[i]):
            torch.testing.assert_close(p.detach()[i], q.detach(), rtol=1e-12, atol=1e-12)
            mine, theirs = opt.state[p], single_opts[i].state.get(q, {})
            assert float(mine["step"][i]) == float(theirs.get("step", 0.0)) == float(steps[i])
            if theirs:
                torch.testing.assert_close(mine["exp_avg"][i], theirs["exp_avg"], rtol=1e-12, atol=1e-14)
                torch.testing.assert_close(mine["exp_avg_sq"][i], theirs["exp_avg_sq"], rtol=1e-12, atol=1e-14)
    assert len(set(steps.tolist())) > 1  # the seeds' step counts went apart


def test_any_other_optimizer_keeps_the_held_seeds_momentum() -> None:
    """SGD with momentum through masked_step_: a seed not updating keeps its parameters
    and its momentum buffer, and one updating moves at its own LR."""
    gen = torch.Generator().manual_seed(1)
    lr = 0.05
    stacked, singles = _stacked_and_singles(gen)
    opt = seed_optimizer(torch.optim.SGD, stacked, S, {"lr": lr, "momentum": 0.9})
    assert type(opt) is torch.optim.SGD
    single_opts = [torch.optim.SGD(ps, lr=lr, momentum=0.9) for ps in singles]
    # SGD's first momentum step copies the gradient: every seed takes it together, so a
    # buffer exists to keep (a missing buffer is state masked_step_ cannot put back).
    masks = [(torch.ones(S, dtype=torch.float64), torch.ones(S, dtype=torch.float64))] + _masks(gen, 6)[1:]
    _step_both(opt, stacked, single_opts, singles, masks, gen, lr, None)
    for i in range(S):
        for p, q in zip(stacked, singles[i]):
            torch.testing.assert_close(p.detach()[i], q.detach(), rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(opt.state[p]["momentum_buffer"][i], single_opts[i].state[q]["momentum_buffer"],
                                       rtol=1e-12, atol=1e-14)


def test_seed_adam_state_round_trips_and_takes_a_single_step_count() -> None:
    gen = torch.Generator().manual_seed(2)
    stacked, _ = _stacked_and_singles(gen)
    opt = SeedAdam(stacked, S, lr=1e-3)
    for p in stacked:
        p.grad = torch.randn(p.shape, generator=gen, dtype=torch.float64)
    opt.step(update=torch.tensor([1.0, 0.0, 1.0]))
    state = opt.state_dict()
    fresh = SeedAdam([p.detach().clone().requires_grad_() for p in stacked], S, lr=1e-3)
    fresh.load_state_dict(state)
    for a, b in zip(opt.state.values(), fresh.state.values()):
        assert torch.equal(a["step"], b["step"]) and b["step"].tolist() == [1.0, 0.0, 1.0]
        assert torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])
    # A stacked torch Adam's checkpoint (one step count per tensor) loads as that count for every seed.
    legacy = torch.optim.Adam(stacked, lr=1e-3)
    legacy.step()
    saved = legacy.state_dict()
    saved["param_groups"][0].pop("amsgrad")
    fresh.load_state_dict(saved)
    assert all(s["step"].tolist() == [1.0] * S for s in fresh.state.values())
    assert fresh.param_groups[0]["decoupled"] is False and fresh.param_groups[0]["amsgrad"] is False
    for p in fresh.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    fresh.step()  # it goes on from there
    assert all(s["step"].tolist() == [2.0] * S for s in fresh.state.values())


def test_seed_optimizer_refuses_what_seed_adam_does_not_implement() -> None:
    params = [torch.zeros(S, 2, requires_grad=True)]
    with pytest.raises(ValueError, match=r"Adam\(maximize=True\) is not supported with num_seeds=3"):
        seed_optimizer(torch.optim.Adam, params, S, {"lr": 1e-3, "maximize": True})
    with pytest.raises(ValueError, match=r"AdamW options \['decoupled_weight_decay'\] are not supported with num_seeds=3"):
        seed_optimizer(torch.optim.AdamW, params, S, {"lr": 1e-3, "decoupled_weight_decay": True})
    with pytest.raises(ValueError, match=r"has no leading seed dim 3"):
        SeedAdam([torch.zeros(2, 2, requires_grad=True)], S)
    opt = seed_optimizer(torch.optim.AdamW, params, S, {"lr": 1e-3, "fused": True, "capturable": True})
    assert opt.param_groups[0]["weight_decay"] == 1e-2 and opt.param_groups[0]["decoupled"]


@pytest.mark.parametrize("optimizer_cls, options", [
    (torch.optim.Adam, {}), (torch.optim.Adam, {"weight_decay": 0.1}), (torch.optim.Adam, {"amsgrad": True}),
    (torch.optim.AdamW, {"weight_decay": 0.1}), (torch.optim.AdamW, {"weight_decay": 0.1, "amsgrad": True}),
], ids=["adam", "adam_l2", "amsgrad", "adamw", "adamw_amsgrad"])
@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float_lr", "tensor_lr"])
def test_adam_step_is_torchs_adam_on_the_optimizers_own_state(optimizer_cls, options: dict, tensor_lr: bool) -> None:
    """``adam_step_`` (every Adam step of PPO's update, eager and compiled) moves a single
    run's parameters and state as torch's own Adam/AdamW step does, on that optimizer's
    state, in float64: the same formulas in another association, so each of the 12
    steps rounds within a few 2^-53 of the parameter (held to 1e-13 absolute)."""
    from rlx.members.optim import adam_step_

    gen = torch.Generator().manual_seed(1)
    ours = [torch.randn(shape[1:], generator=gen, dtype=torch.float64) for shape in SHAPES]
    theirs = [p.clone() for p in ours]
    lr = torch.tensor(3e-3, dtype=torch.float64) if tensor_lr else 3e-3
    opt_ours = optimizer_cls(ours, lr=lr, foreach=False, **options)
    opt_theirs = optimizer_cls(theirs, lr=lr, foreach=False, **options)
    for _ in range(12):
        grads = [torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in ours]
        for p, g in zip(theirs, grads):
            p.grad = g.clone()
        opt_theirs.step()
        adam_step_(opt_ours, ours, grads)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)
        for key in opt_theirs.state[b]:
            torch.testing.assert_close(opt_ours.state[a][key].double(), opt_theirs.state[b][key].double(), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9, 0.999, 0.99999])
def test_bias_correction_power_matches_pow_within_its_rounding(beta: float) -> None:
    """Adam's ``beta ** t`` as ``exp(t log beta)`` (one exp a program when compiled, where
    a pow is recomputed per vector): against Python's ``beta ** t`` in float64. The
    rounding of ``log beta`` and of ``t log beta`` each move the exponent's argument by at
    most ``|t log beta| * 2^-53``, which moves the result by that much relatively; exp's
    own result and pow's are each within an ulp: a relative error of at most
    ``(2 |t log beta| + 2) * 2^-52``."""
    from rlx.members.optim import _power

    t = torch.tensor([1, 2, 3, 10, 100, 1000, 12345, 10**5, 10**6, 10**7], dtype=torch.float64)
    got = _power(beta, t)
    for ti, gi in zip(t.tolist(), got.tolist()):
        want = beta**ti
        arg = abs(ti * math.log(beta)) if beta > 0 else 0.0
        assert abs(gi - want) <= (2 * arg + 2) * 2.0**-52 * want, (beta, ti, gi, want)
    assert _power(beta, t.float()).dtype == torch.float32


@pytest.mark.parametrize("case", ["one_run", "one_run_gated", "members", "members_amsgrad_adamw"])
def test_dense_coefficients_step_exactly_as_broadcast_ones(case: str, monkeypatch) -> None:
    """``DENSE_COEFFICIENTS`` (CUDA's eager form: each per-tensor or per-member coefficient
    made a tensor shaped like its parameter, so that CUDA's multi-tensor kernels take a
    list in one launch) moves parameters and state bit for bit as the broadcast form a CPU
    and a compiled program use: the same products, element for element."""
    from rlx.members import optim

    S = 1 if case.startswith("one_run") else 3
    shapes = [(64, 4), (64,), (64, 64), (2,)]
    g = torch.Generator().manual_seed(1)

    def state():
        lead = () if S == 1 else (S,)
        params = [torch.randn(*lead, *shape, generator=g) for shape in shapes]
        grads = [torch.randn(*lead, *shape, generator=g) for shape in shapes]
        steps = [torch.full(lead, float(k + 1)) for k in range(len(shapes))]  # unequal counts
        m = [torch.randn(*lead, *shape, generator=g) * 0.1 for shape in shapes]
        v = [torch.rand(*lead, *shape, generator=g) * 0.01 for shape in shapes]
        vmax = [x * 2 for x in v] if "amsgrad" in case else None
        return params, grads, steps, m, v, vmax

    kwargs = {"lr": 3e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01 if "adamw" in case else 0.0,
              "decoupled": "adamw" in case}
    if case == "one_run_gated":
        kwargs |= {"update": torch.tensor(True), "factor": torch.tensor(0.5)}
    elif S > 1:
        kwargs |= {"update": torch.tensor([True, False, True]), "factor": torch.tensor([1.0, 0.3, 0.0])}
    first = state()
    second = [None if x is None else [t.clone() for t in x] for x in first]
    runs = []
    for devices, tensors in ((("cuda",), first), (("cpu",), second)):
        monkeypatch.setattr(optim, "DENSE_COEFFICIENTS", devices)
        for _ in range(3):
            optim.seed_adam_(*tensors, **kwargs)
        runs.append(tensors)
    for a, b in zip(*runs):
        for x, y in zip(a or [], b or []):
            assert torch.equal(x, y)
