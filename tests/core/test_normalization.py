"""Running statistics and reward scaling against float64 references."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from rlx.core.normalization import RewardScaler, RunningMeanStd

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def random_batches(
    sizes: list[int], shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0
) -> list[Tensor]:
    """Batches with a mean far from 0 and a spread far from 1, per feature."""
    g = torch.Generator().manual_seed(seed)
    offset = 5.0 + torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float64).view(shape)
    return [
        (3.0 * torch.randn(n, *shape, generator=g, dtype=torch.float64) + offset).to(dtype)
        for n in sizes
    ]


# ---------------------------------------------------------------- RunningMeanStd


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
@pytest.mark.parametrize("sizes", [[1], [1, 1, 1], [64], [1, 7, 100, 1, 33], [5, 2, 9]])
def test_running_mean_std_equals_moments_of_the_concatenation(
    sizes: list[int], shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    batches = random_batches(sizes, shape, dtype)
    rms = RunningMeanStd(shape)
    for x in batches:
        rms.update(x)
    everything = torch.cat(batches).double()
    torch.testing.assert_close(rms.mean, everything.mean(0), **TIGHT)
    torch.testing.assert_close(rms.var, everything.var(0, correction=0), **TIGHT)
    assert rms.count.dtype == torch.float64 and rms.count.item() == sum(sizes)


def test_initial_statistics_leave_inputs_unchanged() -> None:
    rms = RunningMeanStd((4,))
    assert rms.mean.dtype == rms.var.dtype == rms.count.dtype == torch.float64
    torch.testing.assert_close(rms.mean, torch.zeros(4, dtype=torch.float64), rtol=0, atol=0)
    torch.testing.assert_close(rms.var, torch.ones(4, dtype=torch.float64), rtol=0, atol=0)
    assert rms.count.shape == (1,) and rms.count.item() == 0  # [1], never 0-d: see RunningMeanStd
    x = torch.randn(10, 4)
    torch.testing.assert_close(rms.normalize(x), x)


def test_update_flattens_leading_batch_dims() -> None:
    x = random_batches([24], (3,), torch.float32)[0]
    flat, shaped = RunningMeanStd((3,)), RunningMeanStd((3,))
    flat.update(x)
    shaped.update(x.view(4, 6, 3))  # [B, T, D], as a buffer holds observations
    torch.testing.assert_close(shaped.state_dict(), flat.state_dict(), rtol=0, atol=0)


def test_an_empty_batch_changes_nothing() -> None:
    rms = RunningMeanStd((2,))
    rms.update(random_batches([5], (2,), torch.float32)[0])
    before = {k: v.clone() for k, v in rms.state_dict().items()}
    rms.update(torch.empty(0, 2))
    rms.merge_(torch.zeros(2), torch.zeros(2), torch.tensor(0.0))
    torch.testing.assert_close(rms.state_dict(), before, rtol=0, atol=0)


def test_merge_of_two_halves_equals_one_update_of_the_whole() -> None:
    x = random_batches([40], (3,), torch.float64, seed=1)[0]
    first, second = x[:13], x[13:]
    whole = RunningMeanStd((3,))
    whole.update(x)
    merged = RunningMeanStd((3,))
    merged.merge_(first.mean(0), first.var(0, correction=0), torch.tensor(13.0))
    merged.merge_(second.mean(0), second.var(0, correction=0), 27)  # a plain count works too
    torch.testing.assert_close(merged.mean, whole.mean, **TIGHT)
    torch.testing.assert_close(merged.var, whole.var, **TIGHT)
    torch.testing.assert_close(merged.count, whole.count, rtol=0, atol=0)


def test_merge_into_existing_statistics_matches_the_concatenation() -> None:
    # As when combining ranks: each side already holds several updates.
    a_batches = random_batches([3, 10], (2,), torch.float32, seed=2)
    b_batches = random_batches([1, 6, 4], (2,), torch.float32, seed=3)
    a, b = RunningMeanStd((2,)), RunningMeanStd((2,))
    for x in a_batches:
        a.update(x)
    for x in b_batches:
        b.update(x)
    a.merge_(b.mean, b.var, b.count)
    everything = torch.cat(a_batches + b_batches).double()
    torch.testing.assert_close(a.mean, everything.mean(0), **TIGHT)
    torch.testing.assert_close(a.var, everything.var(0, correction=0), **TIGHT)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_normalize_centres_scales_and_keeps_the_dtype(dtype: torch.dtype) -> None:
    rms = RunningMeanStd((3,), epsilon=1e-8)
    data = random_batches([50], (3,), torch.float64)[0]
    rms.update(data)
    x = torch.randn(7, 3, dtype=torch.float64).to(dtype)
    y = rms.normalize(x)
    assert y.dtype == dtype and y.shape == x.shape
    expected = (x.double() - data.mean(0)) / torch.sqrt(data.var(0, correction=0) + 1e-8)
    tolerance = {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {"rtol": 1e-6, "atol": 1e-6}
    torch.testing.assert_close(y.double(), expected, **tolerance)
    # The data normalized with its own statistics has zero mean and unit variance.
    z = rms.normalize(data)
    torch.testing.assert_close(z.mean(0), torch.zeros(3, dtype=torch.float64), rtol=0, atol=1e-7)
    torch.testing.assert_close(z.var(0, correction=0), torch.ones(3, dtype=torch.float64), rtol=1e-7, atol=0)


def test_normalize_clips_to_the_given_bound() -> None:
    rms = RunningMeanStd((), clip=2.0)
    rms.update(torch.tensor([-1.0, 1.0]))  # mean 0, var 1
    x = torch.tensor([-10.0, -1.5, 0.0, 1.5, 10.0])
    torch.testing.assert_close(rms.normalize(x), torch.tensor([-2.0, -1.5, 0.0, 1.5, 2.0]))


def test_denormalize_inverts_normalize() -> None:
    rms = RunningMeanStd((2, 3))
    rms.update(random_batches([30], (2, 3), torch.float64)[0])
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    torch.testing.assert_close(rms.denormalize(rms.normalize(x)), x, **TIGHT)
    torch.testing.assert_close(rms.normalize(rms.denormalize(x)), x, **TIGHT)


def test_update_rejects_the_wrong_sample_shape() -> None:
    rms = RunningMeanStd((3,))
    with pytest.raises(ValueError, match=r"x has shape \(5, 4\); expected \[N, \*\(3,\)\]"):
        rms.update(torch.zeros(5, 4))
    with pytest.raises(ValueError, match=r"x has shape \(3,\)"):
        rms.update(torch.zeros(3))  # one sample without its batch dim


def test_running_mean_std_state_dict_round_trip_is_exact() -> None:
    source = RunningMeanStd((3,), clip=5.0)
    for x in random_batches([4, 9], (3,), torch.float32):
        source.update(x)
    target = RunningMeanStd((3,), clip=5.0)
    target.load_state_dict(source.state_dict())
    assert set(source.state_dict()) == {"mean", "var", "count"}
    torch.testing.assert_close(target.state_dict(), source.state_dict(), rtol=0, atol=0)
    x = torch.randn(6, 3)
    torch.testing.assert_close(target.normalize(x), source.normalize(x), rtol=0, atol=0)


# ---------------------------------------------------------------- RewardScaler


class ReferenceRewardScaler:
    """Per-env, per-step float64 discounted returns; moments over all of them at once."""

    def __init__(self, num_envs: int, gamma: float) -> None:
        self.gamma = gamma
        self.running = [0.0] * num_envs
        self.recorded: list[float] = []

    def update(self, rewards: Tensor, dones: Tensor) -> None:
        B, T = rewards.shape[:2]
        for b in range(B):
            for t in range(T):
                self.running[b] = self.gamma * self.running[b] + float(rewards[b, t, 0])
                self.recorded.append(self.running[b])
                if dones[b, t, 0]:
                    self.running[b] = 0.0

    def var(self) -> float:
        return torch.tensor(self.recorded, dtype=torch.float64).var(correction=0).item()


@pytest.mark.parametrize("done_probability", [0.0, 0.2, 1.0])
@pytest.mark.parametrize("gamma", [0.0, 0.9, 1.0])
@pytest.mark.parametrize(("B", "T"), [(1, 1), (1, 6), (4, 1), (8, 16)])
def test_reward_scaler_matches_float64_reference(
    B: int, T: int, gamma: float, done_probability: float
) -> None:
    g = torch.Generator().manual_seed(B * 31 + T)
    scaler = RewardScaler(B, gamma)
    reference = ReferenceRewardScaler(B, gamma)
    for _ in range(4):  # several collects: returns must carry across them
        rewards = 1.0 + torch.randn(B, T, 1, generator=g)
        dones = torch.rand(B, T, 1, generator=g) < done_probability
        scaler.update(rewards, dones)
        reference.update(rewards, dones)
    expected_returns = torch.tensor(reference.running, dtype=torch.float64)
    torch.testing.assert_close(scaler.returns.double(), expected_returns, rtol=1e-5, atol=1e-5)
    assert scaler.stats.count.item() == 4 * B * T
    expected_var = torch.tensor(reference.var(), dtype=torch.float64)
    torch.testing.assert_close(scaler.stats.var, expected_var.reshape(1), rtol=1e-5, atol=1e-6)
    expected_scale = torch.sqrt(expected_var + 1e-8).float() if expected_var > 1e-8 else torch.tensor(1.0)
    torch.testing.assert_close(scaler.scale(), expected_scale, rtol=1e-5, atol=1e-6)


def test_compiled_reward_scaler_recursion_matches_float64_reference() -> None:
    """``compile=True`` runs :meth:`RewardScaler.advance` in a program (collect's tail,
    then :meth:`RewardScaler.record` eagerly); the float32 recursion over 4 x 16 steps
    stays within 64 * 2^-24 of the float64 returns (relative), so the eager test's 1e-5
    holds (a fused multiply-add only rounds once)."""
    from rlx.core.compiling import compiled

    B, T, gamma = 8, 16, 0.9
    g = torch.Generator().manual_seed(7)
    scaler, reference = RewardScaler(B, gamma), ReferenceRewardScaler(B, gamma)
    advance = compiled(RewardScaler.advance, device="cpu")
    for _ in range(4):
        rewards = 1.0 + torch.randn(B, T, 1, generator=g)
        dones = torch.rand(B, T, 1, generator=g) < 0.2
        history, decay = scaler.scratch(T)
        advance(rewards[..., 0], dones[..., 0], history, decay, scaler.returns, gamma, None)
        scaler.record(history)
        reference.update(rewards, dones)
    torch.testing.assert_close(scaler.returns.double(), torch.tensor(reference.running, dtype=torch.float64),
                               rtol=1e-5, atol=1e-5)
    assert scaler.stats.count.item() == 4 * B * T
    torch.testing.assert_close(scaler.stats.var, torch.tensor([reference.var()], dtype=torch.float64), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize(
    ("B", "T", "gamma", "reward"),
    [
        (8, 1, 0.99, 1.0),  # a first rollout of T=1: every env recorded the same return
        (1, 1, 0.99, 1.0),  # B=T=1: one recorded return
        (4, 5, 0.0, 2.0),  # gamma=0 and a constant reward: never any spread
        (4, 5, 0.99, 0.0),  # a sparse reward before the first success
    ],
)
def test_reward_scale_is_one_while_the_returns_have_no_spread(B: int, T: int, gamma: float, reward: float) -> None:
    scaler = RewardScaler(B, gamma)
    rewards = torch.full((B, T, 1), reward)
    dones = torch.zeros(B, T, 1, dtype=torch.bool)
    for _ in range(3 if gamma == 0.0 or reward == 0.0 else 1):
        scaler.update(rewards, dones)
        assert scaler.stats.var.item() <= 1e-8
        # Dividing by sqrt(var + epsilon) would have multiplied the rewards by 10^4.
        torch.testing.assert_close(scaler.scale(), torch.tensor(1.0), rtol=0, atol=0)
        torch.testing.assert_close(scaler.scale_rewards(rewards), rewards, rtol=0, atol=0)
    # The first spread switches normalization on, at sqrt(var + epsilon) as before.
    scaler.update(rewards + torch.linspace(0.0, 1.0, B * T).view(B, T, 1), dones)
    var = scaler.stats.var
    assert var.item() > 1e-8
    torch.testing.assert_close(scaler.scale(), torch.sqrt(var + 1e-8).float().reshape(()), rtol=0, atol=0)


def test_reward_scale_is_one_before_any_update() -> None:
    scaler = RewardScaler(3, 0.99)
    scale = scaler.scale()
    assert scale.shape == () and scale.dtype == torch.float32
    torch.testing.assert_close(scale, torch.tensor(1.0), rtol=0, atol=1e-7)
    rewards = torch.randn(3, 4, 1)
    torch.testing.assert_close(scaler.scale_rewards(rewards), rewards, rtol=1e-7, atol=0)


def test_reward_scale_resets_return_at_episode_end() -> None:
    scaler = RewardScaler(1, 0.5)
    rewards = torch.tensor([1.0, 1.0, 1.0]).view(1, 3, 1)
    dones = torch.tensor([False, True, False]).view(1, 3, 1)
    scaler.update(rewards, dones)
    # Recorded returns: 1, 1 + 0.5 * 1 = 1.5, then the episode ends and the next one
    # starts over at 1. The return carried out of the call is 1 (no done at the end).
    recorded = torch.tensor([1.0, 1.5, 1.0], dtype=torch.float64)
    torch.testing.assert_close(scaler.stats.mean, recorded.mean().reshape(1), **TIGHT)
    torch.testing.assert_close(scaler.stats.var, recorded.var(correction=0).reshape(1), **TIGHT)
    torch.testing.assert_close(scaler.returns, torch.tensor([1.0]))
    # The next collect continues that episode: 2 + 0.5 * 1 = 2.5; it ends on its last
    # step, so nothing carries into the collect after.
    scaler.update(torch.tensor([[[2.0]]]), torch.tensor([[[True]]]))
    recorded = torch.cat([recorded, torch.tensor([2.5], dtype=torch.float64)])
    torch.testing.assert_close(scaler.stats.mean, recorded.mean().reshape(1), **TIGHT)
    torch.testing.assert_close(scaler.returns, torch.tensor([0.0]))


def test_one_long_update_equals_many_single_step_updates() -> None:
    g = torch.Generator().manual_seed(7)
    rewards = torch.randn(5, 12, 1, generator=g)
    dones = torch.rand(5, 12, 1, generator=g) < 0.25
    long, short = RewardScaler(5, 0.95), RewardScaler(5, 0.95)
    long.update(rewards, dones)
    for t in range(12):
        short.update(rewards[:, t : t + 1], dones[:, t : t + 1])
    torch.testing.assert_close(short.returns, long.returns, rtol=0, atol=0)
    torch.testing.assert_close(short.stats.mean, long.stats.mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(short.stats.var, long.stats.var, rtol=1e-12, atol=1e-12)


def test_update_reads_buffer_views_and_leaves_its_inputs_alone() -> None:
    g = torch.Generator().manual_seed(8)
    buffer_rewards = torch.randn(4, 7, 1, generator=g)  # [B, T+1, 1] with T = 6
    buffer_dones = torch.rand(4, 7, 1, generator=g) < 0.3
    rewards_before, dones_before = buffer_rewards.clone(), buffer_dones.clone()
    from_view, from_copy = RewardScaler(4, 0.9), RewardScaler(4, 0.9)
    from_view.update(buffer_rewards[:, :6], buffer_dones[:, :6])
    from_copy.update(buffer_rewards[:, :6].contiguous(), buffer_dones[:, :6].contiguous())
    torch.testing.assert_close(from_view.state_dict(), from_copy.state_dict(), rtol=0, atol=0)
    assert torch.equal(buffer_rewards, rewards_before) and torch.equal(buffer_dones, dones_before)


def test_scale_rewards_divides_by_the_scale_into_out() -> None:
    scaler = RewardScaler(2, 0.9)
    scaler.update(torch.randn(2, 5, 1) * 4.0, torch.zeros(2, 5, 1, dtype=torch.bool))
    rewards = torch.randn(2, 5, 1)
    expected = rewards / scaler.scale()
    out = torch.empty_like(rewards)
    result = scaler.scale_rewards(rewards, out=out)
    assert result.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(scaler.scale_rewards(rewards), expected, rtol=0, atol=0)


def test_reward_scaler_rejects_mismatched_shapes() -> None:
    scaler = RewardScaler(3, 0.9)
    with pytest.raises(ValueError, match=r"rewards has shape \(2, 4, 1\); expected \[3, T, 1\]"):
        scaler.update(torch.zeros(2, 4, 1), torch.zeros(2, 4, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"dones has shape \(3, 5, 1\); expected \(3, 4, 1\)"):
        scaler.update(torch.zeros(3, 4, 1), torch.zeros(3, 5, 1, dtype=torch.bool))
    with pytest.raises(TypeError, match="dones must be a bool tensor"):
        scaler.update(torch.zeros(3, 4, 1), torch.zeros(3, 4, 1))


def test_reward_scaler_state_dict_round_trip_is_exact() -> None:
    g = torch.Generator().manual_seed(9)
    source = RewardScaler(4, 0.99)
    source.update(torch.randn(4, 8, 1, generator=g), torch.rand(4, 8, 1, generator=g) < 0.2)
    state = source.state_dict()
    # Scratch space is not state: only the running returns and the statistics persist.
    assert set(state) == {"returns", "stats.mean", "stats.var", "stats.count"}
    target = RewardScaler(4, 0.99)
    target.load_state_dict(state)
    torch.testing.assert_close(target.state_dict(), state, rtol=0, atol=0)
    # Both continue identically from there.
    rewards, dones = torch.randn(4, 8, 1, generator=g), torch.rand(4, 8, 1, generator=g) < 0.2
    source.update(rewards, dones)
    target.update(rewards, dones)
    torch.testing.assert_close(target.state_dict(), source.state_dict(), rtol=0, atol=0)
    torch.testing.assert_close(target.scale(), source.scale(), rtol=0, atol=0)


def test_a_one_run_checkpoint_with_0d_statistics_loads() -> None:
    """Before the statistics of one run and every count were ``[1]`` they were 0-d: such a
    state (a checkpoint of an older rlx) loads into the same values, and the run goes on
    alike; an observation normalizer's too."""
    g = torch.Generator().manual_seed(11)
    source = RewardScaler(4, 0.99)
    source.update(torch.randn(4, 8, 1, generator=g), torch.rand(4, 8, 1, generator=g) < 0.2)
    old = {k: v.reshape(()) if k in ("stats.mean", "stats.var", "stats.count") else v
           for k, v in source.state_dict().items()}
    assert old["stats.var"].dim() == old["stats.count"].dim() == 0
    target = RewardScaler(4, 0.99)
    target.load_state_dict(old)
    torch.testing.assert_close(target.state_dict(), source.state_dict(), rtol=0, atol=0)
    assert target.stats.var.shape == (1,) and target.scale().shape == ()
    rewards = torch.randn(4, 8, 1, generator=g)
    torch.testing.assert_close(target.scale_rewards(rewards), source.scale_rewards(rewards), rtol=0, atol=0)
    rms = RunningMeanStd((3,))
    rms.update(torch.randn(20, 3, generator=g))
    loaded = RunningMeanStd((3,))
    loaded.load_state_dict({**rms.state_dict(), "count": rms.count.reshape(())})
    torch.testing.assert_close(loaded.state_dict(), rms.state_dict(), rtol=0, atol=0)
    batch = torch.randn(7, 3, generator=g)
    rms.update(batch)
    loaded.update(batch)
    torch.testing.assert_close(loaded.state_dict(), rms.state_dict(), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_statistics_update_on_cuda_without_host_syncs() -> None:
    g = torch.Generator().manual_seed(10)
    rewards_cpu = torch.randn(64, 32, 1, generator=g)
    dones_cpu = torch.rand(64, 32, 1, generator=g) < 0.1
    obs_cpu = torch.randn(64 * 32, 5, generator=g)
    cpu_scaler, cpu_rms = RewardScaler(64, 0.99), RunningMeanStd((5,), clip=10.0)
    gpu_scaler = RewardScaler(64, 0.99).to("cuda")
    gpu_rms = RunningMeanStd((5,), clip=10.0).to("cuda")
    assert gpu_scaler.returns.is_cuda and gpu_scaler.stats.var.is_cuda and gpu_rms.mean.is_cuda
    rewards, dones, obs = rewards_cpu.cuda(), dones_cpu.cuda(), obs_cpu.cuda()
    scaled = torch.empty_like(rewards)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):
            gpu_scaler.update(rewards, dones)
            gpu_scaler.scale_rewards(rewards, out=scaled)
            gpu_rms.update(obs)
            normalized = gpu_rms.normalize(obs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for _ in range(2):
        cpu_scaler.update(rewards_cpu, dones_cpu)
        cpu_rms.update(obs_cpu)
    torch.testing.assert_close(gpu_scaler.cpu().state_dict(), cpu_scaler.state_dict(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(gpu_rms.cpu().state_dict(), cpu_rms.state_dict(), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(normalized.cpu(), cpu_rms.normalize(obs_cpu), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(scaled.cpu(), rewards_cpu / cpu_scaler.scale(), rtol=1e-5, atol=1e-6)
