"""The seed-stacked pieces (rlx/seeds.py) against S separate single-seed computations, in float64."""

from __future__ import annotations

import pytest
import torch
from torchrl.data import Bounded, Categorical, Unbounded

from rlx.algorithms.ppo import ppo_losses
from rlx.models import MLPActorCritic
from rlx.members import (
    StackedMLPActorCritic,
    clip_grad_norm_per_seed_,
    normalize_per_seed,
    per_seed_mean,
    scale_steps_per_seed_,
    seed_major_permutation,
    seed_rows,
)

OBS = Unbounded(shape=(5,))
GAUSSIAN = (Bounded(-1.0, 1.0, shape=(3,)), (3, 3))  # means and free log-stds
DISCRETE = (Categorical(4), (4, 0))


def _single(model: MLPActorCritic, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A float64 model's outputs on float64 observations (``forward`` casts features to
    float32, as envs deliver them)."""
    x = obs.to(torch.float64)
    return model._params(x), model.critic(x)


def _models(S: int, action=GAUSSIAN, seed: int = 0, **kwargs) -> list[MLPActorCritic]:
    spec, num_params = action
    out = []
    for i in range(S):
        torch.manual_seed(seed + i)
        kwargs.setdefault("hiddens", [8, 8])
        kwargs.setdefault("activation_fn", "tanh")
        out.append(MLPActorCritic(OBS, spec, num_params=num_params, **kwargs).double())
    return out


@pytest.mark.parametrize("action", [GAUSSIAN, DISCRETE], ids=["gaussian", "discrete"])
@pytest.mark.parametrize("S,n", [(1, 1), (3, 1), (4, 7)])
def test_each_seeds_rows_go_through_its_own_network(action, S: int, n: int) -> None:
    models = _models(S, action, critic_hiddens=[6])
    stacked = StackedMLPActorCritic.from_models(models)
    obs = torch.randn(S * n, 5).double()  # float32 values: what flatten_obs passes on
    params, values = stacked(obs)
    for i, model in enumerate(models):
        p, v = _single(model, obs[i * n : (i + 1) * n])
        torch.testing.assert_close(params[i * n : (i + 1) * n], p, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(values[i * n : (i + 1) * n], v, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(stacked.value(obs)[i * n : (i + 1) * n], v, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(stacked.dist_params(obs)[i * n : (i + 1) * n], p, rtol=1e-12, atol=1e-12)


def test_built_seeds_are_the_single_seed_inits_and_leave_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    stacked = StackedMLPActorCritic(OBS, GAUSSIAN[0], num_params=GAUSSIAN[1], num_seeds=3, seed=10, hiddens=[8, 8])
    assert torch.equal(torch.random.get_rng_state(), before)
    obs = torch.randn(6, 5)
    params, values = stacked(obs)
    for i in range(3):
        torch.manual_seed(10 + i)
        single = MLPActorCritic(OBS, GAUSSIAN[0], num_params=GAUSSIAN[1], hiddens=[8, 8])
        p, v = single(obs[2 * i : 2 * i + 2])
        torch.testing.assert_close(params[2 * i : 2 * i + 2], p)
        torch.testing.assert_close(values[2 * i : 2 * i + 2], v)
        unstacked = stacked.unstack(i)
        for a, b in zip(unstacked.parameters(), single.parameters()):
            assert torch.equal(a, b)
    assert sum(p.numel() for p in stacked.parameters()) == 3 * sum(p.numel() for p in single.parameters())


def test_rows_that_do_not_split_evenly_and_bad_seed_counts_are_refused() -> None:
    stacked = StackedMLPActorCritic.from_models(_models(3))
    with pytest.raises(ValueError, match="7 rows do not split into 3 seeds"):
        stacked(torch.randn(7, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="num_seeds: must be a positive int, got 0"):
        StackedMLPActorCritic(OBS, GAUSSIAN[0], num_params=GAUSSIAN[1], num_seeds=0)
    with pytest.raises(IndexError, match="seed 3 is not in"):
        stacked.unstack(3)


def _ppo_total(logp, entropy, values, batch) -> torch.Tensor:
    return ppo_losses(logp, entropy, values, batch["logp"], batch["values"], batch["adv"], batch["ret"],
                      clip_param=0.2, dual_clip_param=None, vf_clip_param=10.0, vf_coeff=0.5, entropy_coeff=0.01).total


def _gaussian(params: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean, log_std = params.chunk(2, dim=-1)
    dist = torch.distributions.Normal(mean, log_std.exp())
    return dist.log_prob(actions).sum(-1, keepdim=True), dist.entropy().sum(-1, keepdim=True)


def _batch(N: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    kw = dict(dtype=torch.float64, generator=g)
    return {"obs": torch.randn(N, 5, generator=g).double(), "actions": torch.randn(N, 3, **kw), "logp": torch.randn(N, 1, **kw) - 3,
            "values": torch.randn(N, 1, **kw), "adv": torch.randn(N, 1, **kw), "ret": torch.randn(N, 1, **kw)}


@pytest.mark.parametrize("max_grad_norm", [None, 0.05])
def test_ppo_updates_of_the_stack_are_the_single_seed_updates(max_grad_norm: float | None) -> None:
    """Three Adam steps on S times the mean loss over all rows (= the sum of the seeds'
    mean losses), per-seed clipping and advantage normalization: each seed moves as a
    single-seed run on its rows."""
    S, n = 3, 10
    models = _models(S)
    stacked = StackedMLPActorCritic.from_models(_models(S))
    singles = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in models]
    opt = torch.optim.Adam(stacked.parameters(), lr=1e-2)
    batch = _batch(S * n)
    batch["adv"] = batch["adv"] * torch.arange(1, S + 1, dtype=torch.float64).repeat_interleave(n).unsqueeze(1)
    for _ in range(3):
        adv = normalize_per_seed(batch["adv"], S)
        params, values = stacked(batch["obs"])
        logp, ent = _gaussian(params, batch["actions"])
        loss = S * _ppo_total(logp, ent, values, {**batch, "adv": adv})
        opt.zero_grad()
        loss.backward()
        if max_grad_norm is not None:
            norms = clip_grad_norm_per_seed_(list(stacked.parameters()), max_grad_norm, S)
            assert (norms > max_grad_norm).all()  # the clip acted on every seed
        opt.step()
        for i, (model, single) in enumerate(zip(models, singles)):
            rows = {k: v[i * n : (i + 1) * n] for k, v in batch.items()}
            a = rows["adv"]
            std, mean = torch.std_mean(a, correction=0)
            rows["adv"] = (a - mean) / (std + 1e-8)
            p, v = _single(model, rows["obs"])
            lp, e = _gaussian(p, rows["actions"])
            single.zero_grad()
            _ppo_total(lp, e, v, rows).backward()
            if max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_grad_norm)
            single.step()
    for i, model in enumerate(models):
        for a, b in zip(stacked.unstack(i).parameters(), model.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mode", ["eager", "compiled-per-gradient", "compiled-foreach"])
def test_clip_grad_norm_clips_as_the_formula_eagerly_and_compiled_both_ways(mode: str, monkeypatch) -> None:
    """rlx's single-run clip: ``g * min(1, max_norm / (||g|| + 1e-6))``, the norm over
    every gradient, eagerly and compiled each way a program can take the norms (a
    reduction per gradient, as compiled for a CPU; ``_foreach_norm`` in the program, as on
    CUDA: ``PER_GRADIENT_NORMS``). Bound: the norm of n float32 squares summed in any
    order (two levels over k gradients included) is within (n + k) u / 2 + 2u of exact
    (u = 2^-24), and the add, divide and multiply after it add 3u."""
    from rlx.members import ops

    shapes = [(64, 4), (64,), (64, 64), (64,), (2, 64), (2,), (64, 4), (64,), (64, 64), (64,), (1, 64), (1,)]
    g = torch.Generator().manual_seed(3)
    params = [torch.nn.Parameter(torch.zeros(shape)) for shape in shapes]
    grads = [torch.randn(shape, generator=g) * (i + 1) for i, shape in enumerate(shapes)]
    n, k, u = sum(x.numel() for x in grads), len(grads), 2.0**-24
    total = torch.sqrt(sum(x.double().square().sum() for x in grads))
    max_norm = 0.1 * float(total)  # the clip acts
    expected = [x.double() * (max_norm / (total + 1e-6)) for x in grads]

    def clip(grads: list[torch.Tensor]) -> list[torch.Tensor]:
        for p, x in zip(params, grads):
            p.grad = x.clone()
        ops.clip_grad_norm_(params, max_norm)
        return [p.grad for p in params]

    if mode != "eager":
        monkeypatch.setattr(ops, "PER_GRADIENT_NORMS", ("cpu",) if mode == "compiled-per-gradient" else ())
        torch._dynamo.reset()
        clip = torch.compile(clip, fullgraph=True, dynamic=False)
    rtol = (n + k) * u / 2 + 2 * u + 3 * u
    for got, want in zip(clip(grads), expected):
        torch.testing.assert_close(got.double(), want, rtol=rtol, atol=0.0)


def test_the_per_seed_clip_with_dense_coefficients_is_the_broadcast_one_bit_for_bit(monkeypatch) -> None:
    """``DENSE_COEFFICIENTS`` (CUDA's eager form: each seed's clip coefficient as a tensor
    shaped like each gradient, one multi-tensor multiply) scales every gradient exactly as
    the broadcast ``mul_`` per gradient a CPU and a compiled program use."""
    from rlx.members import optim

    S, shapes = 3, [(64, 4), (64,), (64, 64), (2,)]
    g = torch.Generator().manual_seed(2)
    grads = [torch.randn(S, *shape, generator=g) * (i + 1) for i, shape in enumerate(shapes)]
    clipped, norms = [], []
    for devices in ((), ("cpu",)):
        monkeypatch.setattr(optim, "DENSE_COEFFICIENTS", devices)
        params = [torch.nn.Parameter(torch.zeros_like(x)) for x in grads]
        for p, x in zip(params, grads):
            p.grad = x.clone()
        norms.append(clip_grad_norm_per_seed_(params, 5.0, S))
        clipped.append([p.grad for p in params])
    assert (norms[0] > 5.0).all() and torch.equal(norms[0], norms[1])  # the clip acted on every seed
    for a, b in zip(*clipped):
        assert torch.equal(a, b)


def test_each_seeds_gradient_norm_takes_its_squares_at_once_eagerly_with_the_same_bits() -> None:
    """``grad_norms_per_seed`` squares the gradients eagerly as one multi-tensor product
    (one kernel on CUDA) and compiled as a square each, fused into its sum. Eagerly it is
    the square-each form bit for bit (x * x either way, summed alike); both ways within
    float32's bound of the float64 norm: n squares of seed i summed in any order, two
    levels over k gradients, (n + k) u / 2 + 2u relative."""
    from rlx.members.ops import grad_norms_per_seed

    S, shapes = 3, [(64, 4), (64,), (64, 64), (2,)]
    g = torch.Generator().manual_seed(4)
    grads = [torch.randn(S, *shape, generator=g) * 10.0**i for i, shape in enumerate(shapes)]
    eager = grad_norms_per_seed(grads, S)
    assert torch.equal(eager, torch.stack([x.flatten(1).square().sum(1) for x in grads]).sum(0).sqrt())
    torch._dynamo.reset()
    compiled = torch.compile(grad_norms_per_seed, fullgraph=True, dynamic=False)(grads, S)
    exact = torch.stack([x.double().flatten(1).square().sum(1) for x in grads]).sum(0).sqrt()
    n, k, u = sum(x[0].numel() for x in grads), len(grads), 2.0**-24
    for got in (eager, compiled):
        torch.testing.assert_close(got.double(), exact, rtol=(n + k) * u / 2 + 2 * u, atol=0.0)


def test_per_seed_learning_rates_and_gates_scale_each_seeds_adam_step() -> None:
    S, n = 3, 6
    lrs = [1e-2, 0.0, 3e-3]  # seed 1 gated (a KL early stop), seed 2 at its own LR
    models = _models(S)
    stacked = StackedMLPActorCritic.from_models(_models(S))
    opt = torch.optim.Adam(stacked.parameters(), lr=1e-2)
    batch = _batch(S * n)
    params, values = stacked(batch["obs"])
    (S * (params.square().mean() + values.square().mean())).backward()
    before = [p.detach().clone() for p in stacked.parameters()]
    opt.step()
    scale_steps_per_seed_(list(stacked.parameters()), before, torch.tensor(lrs, dtype=torch.float64) / 1e-2)
    for i, (model, lr) in enumerate(zip(models, lrs)):
        start = [p.detach().clone() for p in model.parameters()]
        p, v = _single(model, batch["obs"][i * n : (i + 1) * n])
        (p.square().mean() + v.square().mean()).backward()
        if lr:
            torch.optim.Adam(model.parameters(), lr=lr).step()
        for a, b, s in zip(stacked.unstack(i).parameters(), model.parameters(), start):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
            if not lr:
                assert torch.equal(a, s)


def test_a_diverged_seed_changes_no_other_seed() -> None:
    """NaN in seed 0's data: its gradient, norm and step are NaN, the others' are what
    they are without it, and a zero factor freezes seed 0 exactly where it was."""
    S, n = 3, 4
    results = []
    for poison in (False, True):
        stacked = StackedMLPActorCritic.from_models(_models(S))
        opt = torch.optim.Adam(stacked.parameters(), lr=1e-2)
        obs = _batch(S * n)["obs"]
        if poison:
            obs[1, 2] = float("nan")
        params, values = stacked(obs)
        (S * (params.square().mean() + values.square().mean())).backward()
        norms = clip_grad_norm_per_seed_(list(stacked.parameters()), 0.5, S)
        before = [p.detach().clone() for p in stacked.parameters()]
        opt.step()
        finite = torch.isfinite(norms)
        scale_steps_per_seed_(list(stacked.parameters()), before, finite.double())
        results.append((norms, [p.detach().clone() for p in stacked.parameters()], before))
    (norms, clean, _), (bad_norms, poisoned, before) = results
    assert torch.isnan(bad_norms[0]) and torch.equal(bad_norms[1:], norms[1:])
    for a, b, start in zip(clean, poisoned, before):
        assert torch.equal(a[1:], b[1:])
        assert torch.equal(b[0], start[0])


@pytest.mark.parametrize("S,n", [(1, 1), (1, 9), (4, 1), (3, 7)])
def test_normalize_per_seed_is_each_seeds_own_normalization(S: int, n: int) -> None:
    adv = torch.randn(S * n, 1, dtype=torch.float64) * 3 + torch.arange(S, dtype=torch.float64).repeat_interleave(n).unsqueeze(1)
    out = normalize_per_seed(adv, S)
    for i in range(S):
        a = adv[i * n : (i + 1) * n]
        std, mean = torch.std_mean(a, correction=0)
        torch.testing.assert_close(out[i * n : (i + 1) * n], (a - mean) / (std + 1e-8), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(per_seed_mean(adv, S), torch.stack([adv[i * n : (i + 1) * n].mean() for i in range(S)]))
    assert seed_rows(adv, S).shape == (S, n, 1)


@pytest.mark.parametrize("S,n,m", [(1, 1, 1), (3, 8, 4), (3, 7, 3), (2, 5, 5), (4, 6, 1)])
def test_seed_major_permutation_deals_every_minibatch_the_same_rows_of_each_seed(S: int, n: int, m: int) -> None:
    index, bounds = seed_major_permutation(S, n, m, generator=torch.Generator().manual_seed(0))
    assert sorted(index.tolist()) == list(range(S * n))  # a permutation of every row
    assert bounds[0][0] == 0 and sum(size for _, size in bounds) == S * n
    for start, size in bounds:
        rows = index[start : start + size]
        per = size // S
        assert size % S == 0 and per == min(m, n - (start // S))
        seeds = rows // n
        assert torch.equal(seeds, torch.arange(S).repeat_interleave(per))  # seed-major inside the minibatch
    with pytest.raises(ValueError, match=r"minibatch_rows \(per seed\) must be in \[1, 7\], got 8"):
        seed_major_permutation(3, 7, 8)


# -- the recurrent stack ------------------------------------------------------------------


def _recurrent_case(separate_critic: bool):
    from tensordict import TensorDict
    from torchrl.data import Composite

    if not separate_critic:
        return OBS, None, lambda B, L: torch.randn(B, L, 5)
    spec = Composite(policy=Unbounded(shape=(3,)), privileged=Unbounded(shape=(2,)))
    groups = {"actor": ["policy"], "critic": ["policy", "privileged"]}
    return spec, groups, lambda B, L: TensorDict(
        {"policy": torch.randn(B, L, 3), "privileged": torch.randn(B, L, 2)}, batch_size=[B, L])


@pytest.mark.parametrize("cell,num_layers", [("lstm", 1), ("gru", 2), ("lstm", 2)])
@pytest.mark.parametrize("action", [GAUSSIAN, DISCRETE], ids=["gaussian", "discrete"])
@pytest.mark.parametrize("separate_critic", [False, True], ids=["shared-core", "separate-critic"])
def test_each_seeds_sequences_go_through_its_own_recurrent_network(cell: str, num_layers: int, action,
                                                                   separate_critic: bool) -> None:
    """S seeds' encoders, LSTM/GRU cells (PyTorch's equations, re-implemented stacked),
    heads and log-stds: seed i's sub-envs get what seed i's single model gives them,
    through resets inside the sequence; the stack starts from the single inits of
    ``seed + i``, and unstack(i) returns them."""
    from rlx.models import RecurrentActorCritic
    from rlx.members import StackedRecurrentActorCritic

    spec, groups, make_obs = _recurrent_case(separate_critic)
    S, b, L = 3, 2, 5
    kwargs = dict(hiddens=[6], hidden_size=4, cell=cell, num_layers=num_layers, obs_groups=groups)
    stacked = StackedRecurrentActorCritic(spec, action[0], num_params=action[1], num_seeds=S, seed=7, **kwargs)
    singles = []
    for i in range(S):
        torch.manual_seed(7 + i)
        singles.append(RecurrentActorCritic(spec, action[0], num_params=action[1], **kwargs))
    obs = make_obs(S * b, L)
    state = torch.randn_like(stacked.initial_state(S * b))
    resets = torch.rand(S * b, L) < 0.3
    params, values, new_state = stacked(obs, state, resets)
    for i, single in enumerate(singles):
        rows = slice(i * b, (i + 1) * b)
        p, v, s = single(obs[rows], state[rows], resets[rows])
        torch.testing.assert_close(params[rows], p, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(values[rows], v, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(new_state[rows], s, rtol=1e-5, atol=1e-6)
        for a, c in zip(stacked.unstack(i).parameters(), single.parameters()):
            assert torch.equal(a, c)
    assert sum(p.numel() for p in stacked.parameters()) == S * sum(p.numel() for p in singles[0].parameters())
