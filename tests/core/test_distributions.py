"""Action distributions against torch.distributions references in float64."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributions as td
from torch.testing import assert_close
from torchrl.data import Bounded, Categorical as CategoricalSpec, MultiCategorical as MultiCategoricalSpec, Unbounded

from rlx.core.distributions import (
    Categorical,
    MultiCategorical,
    Normal,
    SquashedNormal,
    default_distribution_cls,
)

N = 64


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.mark.parametrize("shape", [(), (1,), (3,)])
def test_categorical_matches_torch_per_head(shape: tuple[int, ...]) -> None:
    spec = CategoricalSpec(5, shape=shape)
    k = max(1, math.prod(shape))
    params = torch.randn(N, Categorical.num_params(spec), dtype=torch.float64)
    dist = Categorical(params, spec)
    ref = td.Categorical(logits=params.view(N, k, 5))
    actions = dist.sample()
    assert actions.shape == (N, *shape)
    assert dist.log_prob(actions).shape == (N, 1)
    assert_close(dist.log_prob(actions), ref.log_prob(actions.reshape(N, k)).sum(-1, keepdim=True))
    assert_close(dist.entropy(), ref.entropy().sum(-1, keepdim=True))
    other_params = torch.randn_like(params)
    other = Categorical(other_params, spec)
    ref_other = td.Categorical(logits=other_params.view(N, k, 5))
    assert_close(dist.kl(other), td.kl_divergence(ref, ref_other).sum(-1, keepdim=True))
    assert_close(dist.mode(), params.view(N, k, 5).argmax(-1).reshape(N, *shape))


def test_categorical_samples_follow_the_probabilities() -> None:
    spec = CategoricalSpec(3)
    probs = torch.tensor([0.2, 0.5, 0.3])
    dist = Categorical(probs.log().expand(200_000, 3), spec)
    freq = torch.bincount(dist.sample(), minlength=3).float() / 200_000
    # A frequency's std is sqrt(p(1 - p) / n) <= sqrt(0.25 / 2e5) ≈ 1.1e-3: 5e-3 is 4.5 std.
    assert_close(freq, probs, atol=5e-3, rtol=0)


def test_masked_actions_are_never_sampled_or_chosen() -> None:
    spec = CategoricalSpec(4)
    params = torch.zeros(1000, 4)
    params[:, 2] = 10.0  # the most likely action is masked out
    mask = torch.tensor([True, False, False, True]).expand(1000, 4)
    dist = Categorical(params, spec, action_mask=mask)
    samples = dist.sample()
    assert set(samples.unique().tolist()) <= {0, 3}
    assert set(dist.mode().unique().tolist()) <= {0, 3}
    assert torch.isfinite(dist.entropy()).all()
    assert_close(dist.entropy(), torch.full((1000, 1), math.log(2.0)))


def test_multicategorical_is_a_sum_of_independent_heads() -> None:
    spec = MultiCategoricalSpec([2, 3, 4])
    params = torch.randn(N, 9, dtype=torch.float64)
    dist = MultiCategorical(params, spec)
    heads = [td.Categorical(logits=x) for x in params.split([2, 3, 4], -1)]
    actions = dist.sample()
    assert actions.shape == (N, 3)
    ref_logp = sum(h.log_prob(actions[:, i]) for i, h in enumerate(heads)).unsqueeze(-1)
    assert_close(dist.log_prob(actions), ref_logp)
    assert_close(dist.entropy(), sum(h.entropy() for h in heads).unsqueeze(-1))
    other_params = torch.randn_like(params)
    other = MultiCategorical(other_params, spec)
    ref_kl = sum(
        td.kl_divergence(h, td.Categorical(logits=x)) for h, x in zip(heads, other_params.split([2, 3, 4], -1))
    )
    assert_close(dist.kl(other), ref_kl.unsqueeze(-1))


def test_multicategorical_mask_applies_per_head() -> None:
    spec = MultiCategoricalSpec([2, 3])
    mask = torch.tensor([False, True, True, False, True]).expand(500, 5)
    dist = MultiCategorical(torch.randn(500, 5), spec, action_mask=mask)
    samples = dist.sample()
    assert (samples[:, 0] == 1).all()
    assert (samples[:, 1] != 1).all()


@pytest.mark.parametrize("spec", [Unbounded(shape=(3,)), Bounded(-1.0, 1.0, shape=(3,))])
def test_normal_matches_torch_and_logp_is_on_the_unclipped_sample(spec) -> None:
    mean = torch.randn(N, 3, dtype=torch.float64) * 3
    log_std = torch.randn(3, dtype=torch.float64).expand(N, 3) * 0.5
    dist = Normal(torch.cat([mean, log_std], -1), spec)
    ref = td.Normal(mean, log_std.exp())
    actions = dist.sample()
    assert actions.shape == (N, 3)
    assert_close(dist.log_prob(actions), ref.log_prob(actions.double()).sum(-1, keepdim=True))
    assert_close(dist.entropy(), ref.entropy().sum(-1, keepdim=True))
    env_actions = dist.env_actions(actions)
    if isinstance(spec, Bounded):
        assert env_actions.abs().max() <= 1.0
        assert (actions.abs() > 1.0).any()  # the buffer keeps the unclipped sample
    else:
        assert torch.equal(env_actions, actions)
    other_mean, other_log_std = torch.randn_like(mean), 0.5 * torch.randn_like(log_std)
    other = Normal(torch.cat([other_mean, other_log_std], -1), spec)
    ref_kl = td.kl_divergence(ref, td.Normal(other_mean, other_log_std.exp())).sum(-1, keepdim=True)
    assert_close(dist.kl(other), ref_kl)


def test_squashed_normal_includes_the_tanh_log_det() -> None:
    spec = Bounded(torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0]), shape=(2,))
    mean = torch.randn(N, 2, dtype=torch.float64)
    log_std = torch.full((N, 2), -0.3, dtype=torch.float64)
    dist = SquashedNormal(torch.cat([mean, log_std], -1), spec)
    low, high = torch.tensor([-2.0, 0.0], dtype=torch.float64), torch.tensor([2.0, 1.0], dtype=torch.float64)
    ref = td.TransformedDistribution(
        td.Normal(mean, log_std.exp()),
        [td.TanhTransform(), td.AffineTransform(low + (high - low) / 2, (high - low) / 2)],
    )
    u = dist.sample()
    env_actions = dist.env_actions(u)
    assert ((env_actions >= torch.tensor([-2.0, 0.0])) & (env_actions <= torch.tensor([2.0, 1.0]))).all()
    ref_logp = ref.log_prob(env_actions.double().clamp(low + 1e-6, high - 1e-6)).sum(-1, keepdim=True)
    assert_close(dist.log_prob(u), ref_logp, atol=1e-3, rtol=1e-4)


def test_continuous_distributions_reject_action_masks() -> None:
    with pytest.raises(ValueError, match="discrete"):
        Normal(torch.zeros(2, 2), Unbounded(shape=(1,)), action_mask=torch.ones(2, 1, dtype=torch.bool))


def test_default_distribution_follows_the_action_spec() -> None:
    assert default_distribution_cls(CategoricalSpec(3)) is Categorical
    assert default_distribution_cls(MultiCategoricalSpec([2, 2])) is MultiCategorical
    assert default_distribution_cls(Bounded(-1.0, 1.0, shape=(2,))) is Normal
    assert default_distribution_cls(Unbounded(shape=(2,))) is Normal
    with pytest.raises(ValueError, match="distribution_cls"):
        default_distribution_cls(Unbounded(shape=(2,), dtype=torch.int64))


class _SpecEnv:
    """A 3-feature env whose action spec is given per test; it checks every action it
    receives against that spec, as a strict user env would."""

    action_spec_factory = None

    @classmethod
    def with_spec(cls, factory):
        from rlx.env import Env
        from tensordict import TensorDict

        class SpecEnv(Env):
            def __init__(self, num_envs: int, /, horizon: int | None = None, *, device="cpu") -> None:
                super().__init__(num_envs, horizon, device=device)
                self.observation_spec = Unbounded(shape=(3,), device=self.device)
                self.action_spec = factory()
                self.received: list[torch.Tensor] = []

            def reset(self, *, config=None) -> torch.Tensor:
                return torch.randn(self.num_envs, 3)

            def step(self, actions: torch.Tensor) -> TensorDict:
                assert actions.dtype == self.action_spec.dtype, actions.dtype
                assert tuple(actions.shape) == (self.num_envs, *self.action_spec.shape), actions.shape
                assert self.action_spec.is_in(actions[0])
                self.received.append(actions.clone())
                B = self.num_envs
                return TensorDict({"obs": torch.randn(B, 3), "rewards": torch.randn(B, 1)}, batch_size=[B])

        return SpecEnv


@pytest.mark.parametrize(
    "factory",
    [
        lambda: CategoricalSpec(3, dtype=torch.int32),
        lambda: CategoricalSpec(4, shape=(2,), dtype=torch.uint8),
        lambda: __import__("torchrl.data", fromlist=["Binary"]).Binary(n=3, dtype=torch.int8),
        lambda: __import__("torchrl.data", fromlist=["Binary"]).Binary(n=3, dtype=torch.bool),
        lambda: MultiCategoricalSpec(torch.tensor([[2, 3], [4, 2]])),  # a 2-D nvec
        lambda: Bounded(-1.0, 1.0, shape=(2,), dtype=torch.float64),
    ],
    ids=["categorical-int32", "categorical-k2-uint8", "binary-int8", "binary-bool", "multicategorical-2d", "bounded-float64"],
)
def test_actions_take_the_spec_dtype_and_shape_and_keep_their_log_prob(factory) -> None:
    from rlx import AlgorithmConfig
    from rlx.collect.buffer import ACTIONS, LOGP
    from rlx.env import OBS

    algo = AlgorithmConfig(num_envs=4, horizon=5, device="cpu", seed=0, model_config={"hiddens": [8]}).build(
        _SpecEnv.with_spec(factory)
    )
    algo.collect()
    buf = algo.buffer
    actions = buf.get(ACTIONS)[:, :5]
    spec = algo.env.action_spec
    assert actions.dtype == spec.dtype and tuple(actions.shape) == (4, 5, *spec.shape)
    # Every stored discrete action is the one the env received (a Bounded env receives
    # the clipped sample), and its stored logp is its log-density.
    if not spec.dtype.is_floating_point:
        assert torch.equal(actions, torch.stack(algo.env.received[-5:], dim=1))
    with torch.no_grad():
        flat_obs, flat_actions = buf.get(OBS)[:, :5].reshape(20, 3), actions.reshape(20, *spec.shape)
        logp = algo.policy.evaluate(flat_obs, flat_actions).logp
    assert_close(logp, buf.get(LOGP)[:, :5].reshape(20, 1), rtol=1e-5, atol=1e-5)
    algo.step()
