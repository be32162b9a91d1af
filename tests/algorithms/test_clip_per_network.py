"""``clip_grad_per_network``: the actor's and the critic's gradients clipped apart (rsl_rl's rule)."""

from __future__ import annotations

import pytest
import torch

from rlx import AlgorithmConfig
from unittest import mock
from rlx.config import ConfigError
from rlx.envs import CartPole, Pendulum
from rlx.models import MLPActorCritic

BASE = dict(num_envs=32, horizon=16, device="cpu", seed=0, sgd_minibatch_size=256, num_sgd_iters=1,
            model_config={"hiddens": [32, 32]}, vf_coeff=1.0)


def _grads_at_the_step(algo) -> dict[str, torch.Tensor]:
    """The gradients the optimizer steps with in the first minibatch (after clipping)."""
    seen: dict[str, torch.Tensor] = {}
    names = {id(p): n for n, p in algo.policy.model.named_parameters()}

    def hook(optimizer, args, kwargs):
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None and names[id(p)] not in seen:
                    seen[names[id(p)]] = p.grad.detach().clone()

    handle = algo.optimizer.register_step_pre_hook(hook)
    algo.collect()
    algo.step()
    handle.remove()
    return seen


def _norm(grads: dict[str, torch.Tensor], prefix: tuple[str, ...]) -> float:
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for n, g in grads.items()
                                                       if n.startswith(prefix)])))


@pytest.mark.parametrize("env_cls", [CartPole, Pendulum])
def test_each_network_is_clipped_to_max_grad_norm_and_the_actor_keeps_its_own_step(env_cls) -> None:
    max_norm = 0.005  # below both networks' gradient norms on these tasks
    joint = _grads_at_the_step(AlgorithmConfig(**BASE, max_grad_norm=max_norm).build(env_cls))
    apart = _grads_at_the_step(AlgorithmConfig(**BASE, max_grad_norm=max_norm, clip_grad_per_network=True).build(env_cls))
    actor, critic = ("actor", "log_std"), ("critic",)
    # Apart: each network's norm is max_grad_norm (both were above it).
    assert _norm(apart, actor) == pytest.approx(max_norm, rel=1e-4)
    assert _norm(apart, critic) == pytest.approx(max_norm, rel=1e-4)
    # Joint: the two together are max_grad_norm, so the actor got less than its share.
    total = (_norm(joint, actor) ** 2 + _norm(joint, critic) ** 2) ** 0.5
    assert total == pytest.approx(max_norm, rel=1e-4)
    assert _norm(joint, actor) < _norm(apart, actor)
    # The direction within a network is unchanged: only its scale.
    for name in apart:
        cos = torch.nn.functional.cosine_similarity(apart[name].flatten(), joint[name].flatten(), dim=0)
        assert float(cos) == pytest.approx(1.0, abs=1e-5), name


def test_a_network_below_the_limit_is_left_alone() -> None:
    grads = _grads_at_the_step(AlgorithmConfig(**BASE, max_grad_norm=1e6, clip_grad_per_network=True).build(CartPole))
    reference = _grads_at_the_step(AlgorithmConfig(**BASE, max_grad_norm=None).build(CartPole))
    for name in grads:
        torch.testing.assert_close(grads[name], reference[name])


def test_seeds_clip_each_members_networks_as_their_single_runs() -> None:
    config = dict(BASE, max_grad_norm=0.05, clip_grad_per_network=True)
    many = AlgorithmConfig(**config, num_seeds=2).build(CartPole)
    many.collect()
    stats = many.step()
    assert all(torch.isfinite(p).all() for p in many.policy.parameters())
    assert stats["member0/active"] == 1.0 and stats["member1/active"] == 1.0


def test_the_update_clips_per_network_as_with_the_optimizers_own_step() -> None:
    config = dict(BASE, max_grad_norm=0.05, clip_grad_per_network=True, num_sgd_iters=2, sgd_minibatch_size=128)
    eager, reference = AlgorithmConfig(**config).build(CartPole), AlgorithmConfig(**config).build(CartPole)
    for algo in (eager, reference):
        algo.policy.double()  # float64, as tests/algorithms/test_one_update.py compares (its docstring: the bound)
    for algo in (eager, reference):
        torch.manual_seed(3)
        algo.collect()
        if algo is eager:
            algo.step()
            continue
        with mock.patch("rlx.members.axis.steps_functionally", lambda *args: False):  # torch's Adam kernel
            algo.step()
    for a, b in zip(eager.policy.parameters(), reference.policy.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-3 * eager.lr)


def test_a_shared_trunk_is_refused_by_name() -> None:
    class Shared(MLPActorCritic):
        def actor_parameters(self):
            return list(self.parameters())

        def critic_parameters(self):
            return list(self.parameters())

    with pytest.raises(ConfigError, match="clip_grad_per_network needs separate actor and critic"):
        AlgorithmConfig(**BASE, clip_grad_per_network=True, model_cls=Shared).build(CartPole)
    with pytest.raises(ConfigError, match="clip_grad_per_network: must be a bool"):
        AlgorithmConfig(**BASE, clip_grad_per_network="yes")
