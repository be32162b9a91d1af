"""Micro-batches (passes) over S members: every pass takes the same rows of every member,
so the stacked model and the per-member means see whole members; a cut update, KL pass,
NPG piece and truncation bootstrap equal the uncut ones."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch.testing import assert_close

from rlx import AlgorithmConfig, NPGConfig
from rlx.algorithms.npg import Samples
from rlx.core.layout import cat_passes, pass_rows, passes
from rlx.envs import CartPole, Pendulum


def test_a_pass_takes_the_same_rows_of_every_member_and_cat_passes_undoes_the_cut() -> None:
    S, m = 3, 7
    x = torch.arange(S * m * 2).view(S * m, 2)
    cuts = passes(S * m, 3, S)
    assert cuts == [(0, 3), (3, 3), (6, 1)]
    parts = [pass_rows(x, lo, n, S) for lo, n in cuts]
    for (lo, n), part in zip(cuts, parts):
        expected = torch.cat([x[i * m + lo : i * m + lo + n] for i in range(S)])  # member by member
        assert torch.equal(part, expected)
    assert torch.equal(cat_passes(parts, S), x)
    td = TensorDict({"a": x, "b": x[:, :1].float()}, batch_size=[S * m])
    assert torch.equal(pass_rows(td, 3, 3, S)["a"], parts[1])
    # One member: plain row slices; a pass that covers a member is the batch itself.
    assert passes(10, 4) == [(0, 4), (4, 4), (8, 2)] and torch.equal(pass_rows(x, 2, 5), x[2:7])
    assert passes(S * m, 100, S) == [(0, m)] and pass_rows(x, 0, m, S) is x
    with pytest.raises(ValueError, match="do not split evenly into 3 members"):
        passes(20, 4, 3)


def _params(algo) -> list[torch.Tensor]:
    return [p.detach().clone() for p in algo.policy.parameters()]


@pytest.mark.parametrize("micro", [5, 16])  # uneven passes; passes of whole minibatches
def test_a_cut_update_of_two_members_equals_the_whole_pass_one(micro: int) -> None:
    """Two members, float64, SGD: each pass's gradient is its rows' mean weighted by its
    share, so the cut update differs from one pass only by the order of a sum over <= 32
    rows: rounding of a few 2^-53 relative, bounded here by 1e-12."""
    common = dict(num_envs=8, horizon=4, num_seeds=2, device="cpu", seed=0, model_config={"hiddens": [16]},
                  optimizer_cls=torch.optim.SGD, optimizer_config={"lr": 0.1}, num_sgd_iters=2,
                  sgd_minibatch_size=16, entropy_coeff=0.01, compile=False)
    runs = []
    for m in (0, micro):
        algo = AlgorithmConfig(micro_batch_size=m, **common).build(CartPole)
        algo.policy.double()
        assert algo._micro_units == (micro if m else algo._micro_units)
        rows, losses = [], algo.loss_fn

        def counted(part, losses=losses, rows=rows):  # the passes' rows, as the update cuts them
            rows.append(part["obs"].shape[0])
            return losses(part)

        algo.loss_fn = counted
        algo.collect()
        stats = {k: v for k, v in algo.step().items() if not k.startswith("profiling/")}
        runs.append((stats, _params(algo)))
        # 2 members x 16 samples a minibatch, 2 minibatches, 2 epochs: passes of 5 (5, 5, 5, 1
        # of each member) or whole minibatches.
        assert rows == ([10, 10, 10, 2] * 4 if m == 5 else [32] * 4), rows
    (whole, whole_params), (cut, cut_params) = runs
    assert any(not torch.equal(a, b) for a, b in zip(whole_params, _params(AlgorithmConfig(**common).build(CartPole))))
    for a, b in zip(whole_params, cut_params):
        assert_close(b, a, rtol=1e-12, atol=1e-12)
    assert cut.keys() == whole.keys() and "member1/monitors/kl_div" in cut
    for key in whole:  # float32 statistics of float64 sums
        assert cut[key] == pytest.approx(whole[key], rel=2**-21, abs=1e-12), key


def test_the_cpu_default_cut_is_each_members_as_one_runs() -> None:
    for hiddens, rows in (([64, 64], 4096), ([256, 256], 2048)):  # by width, the stacked layers' too
        algo = AlgorithmConfig(num_envs=4, horizon=4, num_seeds=4, device="cpu", model_config={"hiddens": hiddens}).build(CartPole)
        assert algo._micro_units == rows and algo.policy.max_rows_per_pass is not None


def test_npg_pieces_of_two_members_cut_into_passes_equal_the_whole_pass_ones() -> None:
    """The gradient, the actor's outputs and the Fisher-vector product of two members in
    passes of 5 of each member's rows, against one pass, in float64 (sums reordered over
    <= 128 rows: 1e-12 relative)."""
    whole, cut = (NPGConfig(num_envs=8, horizon=8, num_seeds=2, device="cpu", seed=0, model_config={"hiddens": [16]},
                            micro_batch_size=m).build(Pendulum) for m in (0, 5))
    for algo in (whole, cut):
        algo.policy.double()
    cut.policy.load_state_dict(whole.policy.state_dict())
    whole.collect()
    whole.compute_advantages()
    batch = whole.flat_batch()
    obs_normalized = whole.policy.normalize(batch["obs"]).double()
    samples = Samples(obs_normalized, batch["obs"], batch["actions"], batch["logp"].double(),
                      batch["advantages"].double())
    theta0 = whole._flat_actor()
    assert len(passes(128, cut._micro, 2)) == 13
    assert_close(cut._gradient(theta0, samples), whole._gradient(theta0, samples), rtol=1e-12, atol=1e-14)
    old = whole._dist_params(theta0, obs_normalized)
    assert_close(cut._dist_params(theta0, obs_normalized), old, rtol=1e-12, atol=1e-14)
    v = torch.randn_like(theta0)
    fvps = [algo._fisher_vector_product(theta0, samples, old)(v) for algo in (whole, cut)]
    assert_close(fvps[1], fvps[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("capacity", [3, 8, None])  # shares of 2 (< 4 truncating together), 4, 4
def test_each_member_values_its_own_truncated_steps(capacity) -> None:
    """With two members each values up to its share of the capacity of its own truncated
    steps (a pass takes equal blocks of both); the buffer holds V(final_obs) where a step
    truncated and 0 elsewhere, as valuing every step does, and a member past its share
    reports the overflow (after which every step is valued)."""
    algo = AlgorithmConfig(num_envs=4, horizon=64, num_seeds=2, device="cpu", seed=0,
                           model_config={"hiddens": [16]}).build(Pendulum)  # truncates after 200 steps
    rollout = algo.rollout
    assert rollout.truncation_capacity == 2 * 4  # each member: once per sub-env in 64 steps
    if capacity is not None:
        rollout.set_truncation_capacity(capacity)
        assert rollout.truncation_capacity == 2 * -(-capacity // 2)
    seen_overflow = seen_values = False
    for _ in range(5):
        algo.collect()
        truncated = algo.buffer["truncated"][:, :64]
        expected = rollout.all_final_values()
        assert_close(algo.buffer["final_values"][:, :64], expected)
        compacted, overflow = rollout.truncated_final_values()
        per_member = truncated.reshape(2, -1).sum(1)
        assert bool(overflow) == bool((per_member > rollout.truncation_capacity // 2).any())
        if not overflow:
            assert_close(compacted, expected, rtol=1e-6, atol=1e-7)
            seen_values |= bool(truncated.any())
        seen_overflow |= bool(overflow)
        algo.step()
    # Pendulum's sub-envs truncate together, 4 a member at step 200: past a share of 2.
    assert seen_values == (capacity != 3) and seen_overflow == (capacity == 3)
