"""Symmetry augmentation: the mirror check, the doubled minibatch, and learning with it."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rlx import AlgorithmConfig
from rlx.algorithms.symmetry import Symmetry
from rlx.config import ConfigError
from rlx.envs import CartPole, RslRlVecEnv
from rlx.examples.windy_reach import WindyReach, episode_return, mirror, pd_controller

BASE = dict(num_envs=32, horizon=16, device="cpu", seed=0, sgd_minibatch_size=128, num_sgd_iters=2,
            model_config={"hiddens": [32, 32]})


def _flip_cartpole(obs, actions):
    """CartPole's mirror: every state variable flips sign, left and right swap."""
    return -obs, 1 - actions


@pytest.mark.parametrize("fn, message", [
    (lambda obs, actions: (2 * obs, actions), "not an involution: mirroring obs twice changed it by up to"),
    (lambda obs, actions: (obs, 1 - actions + (actions > 0).long()), "mirroring actions twice"),
    (lambda obs, actions: (obs[:, :2], actions), "mirroring obs twice gave shape"),
    (lambda obs, actions: obs.missing, "raised AttributeError"),
])
def test_a_mirror_that_is_not_an_involution_is_refused_at_build(fn, message: str) -> None:
    with pytest.raises(ConfigError, match=f"AlgorithmConfig.symmetry_fn: .*{message}"):
        AlgorithmConfig(**BASE, symmetry_fn=fn, symmetry_augment=True).build(CartPole)


def test_the_fields_are_checked_by_name() -> None:
    with pytest.raises(ConfigError, match="symmetry_augment: needs symmetry_fn"):
        AlgorithmConfig(**BASE, symmetry_augment=True)
    with pytest.raises(ConfigError, match="symmetry_fn: must be a function"):
        AlgorithmConfig(**BASE, symmetry_fn=3)


def test_the_twin_is_the_mirror_with_its_originals_rollout_entries() -> None:
    obs = TensorDict({"policy": torch.randn(5, 4), "critic": torch.randn(5, 3)}, batch_size=[5])
    mb = {"obs": obs, "actions": torch.randn(5, 2), "logp": torch.randn(5, 1), "values": torch.randn(5, 1),
          "advantages": torch.randn(5, 1), "returns": torch.randn(5, 1)}
    env = RslRlVecEnv.factory(lambda n, d: WindyReach(n, d, seed=0))(5, None, device="cpu")
    out = Symmetry(mirror, env.observation_spec, env.action_spec, torch.device("cpu")).augment(mb)
    twin_obs, twin_actions = mirror(obs, mb["actions"])
    assert torch.equal(out["obs"][:5]["policy"], obs["policy"]) and torch.equal(out["obs"][5:]["policy"], twin_obs["policy"])
    assert torch.equal(out["obs"][5:]["critic"], twin_obs["critic"])
    assert torch.equal(out["actions"], torch.cat([mb["actions"], twin_actions]))
    for key in ("logp", "values", "advantages", "returns"):
        assert torch.equal(out[key], torch.cat([mb[key], mb[key]])), key


@pytest.mark.parametrize("members", [1, 2])
def test_an_identity_mirror_leaves_the_update_as_it_was(members: int) -> None:
    """Twins equal to their originals: every mean over the doubled minibatch is the
    plain one, so the update is the same up to float rounding (each member's, with S)."""
    plain = AlgorithmConfig(**BASE, num_seeds=members).build(CartPole)
    doubled = AlgorithmConfig(**BASE, num_seeds=members, symmetry_fn=lambda obs, actions: (obs, actions),
                              symmetry_augment=True).build(CartPole)
    for algo in (plain, doubled):
        torch.manual_seed(4)
        algo.collect()
        algo.step()
    for a, b in zip(plain.policy.parameters(), doubled.policy.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_augmentation_learns_windy_reach_faster() -> None:
    def normalized_after_10(augment: bool, seed: int) -> float:
        config = AlgorithmConfig(
            num_envs=256, horizon=24, num_sgd_iters=5, sgd_minibatch_size=256 * 24 // 4, vf_clip_param=0.2,
            vf_coeff=1.0, entropy_coeff=0.005, gamma=0.99, max_grad_norm=1.0, optimizer_config={"lr": 1e-3},
            kl_adaptive_lr=True, target_kl_div=0.01, model_config={"hiddens": [64, 64], "activation_fn": "elu"},
            obs_groups={"actor": ["policy"], "critic": ["policy", "critic"]}, normalize_rewards=False, device="cpu",
            seed=seed, symmetry_fn=mirror if augment else None, symmetry_augment=augment)
        algo = config.build(RslRlVecEnv.factory(lambda n, d: WindyReach(n, d, seed=seed)))
        for _ in range(10):
            algo.collect()
            algo.step()
        score = episode_return(lambda o: algo.policy.act(o, deterministic=True).env_actions, 512, "cpu")
        random = episode_return(lambda obs: torch.randn(obs.batch_size[0], 2), 512, "cpu")
        return (score - random) / (episode_return(pd_controller, 512, "cpu") - random)

    # Measured (one thread, benchmarks/symmetry.py): 0.41 / 0.46 / 0.63 against 0.34 / 0.39 / 0.35 after 10 iterations.
    plain = [normalized_after_10(False, seed) for seed in (0, 1, 2)]
    augmented = [normalized_after_10(True, seed) for seed in (0, 1, 2)]
    assert sum(augmented) / 3 > sum(plain) / 3 + 0.05, f"augmented {augmented}, plain {plain}"


def test_the_mirror_is_an_import_path_in_yaml_and_round_trips() -> None:
    from rlx.core.yaml_types import config_from_dict, config_to_dict

    config = config_from_dict(AlgorithmConfig, {"symmetry_fn": "rlx.examples.windy_reach:mirror", "symmetry_augment": True})
    assert config.symmetry_fn is mirror
    assert config_to_dict(config)["symmetry_fn"] == "rlx.examples.windy_reach:mirror"
    with pytest.raises(ConfigError, match="AlgorithmConfig.symmetry_fn"):
        config_from_dict(AlgorithmConfig, {"symmetry_fn": "rlx.examples.windy_reach:no_such_mirror"})
    with pytest.raises(ConfigError, match="AlgorithmConfig.symmetry_fn: must be a function"):
        config_from_dict(AlgorithmConfig, {"symmetry_fn": 3})


# -- the mirror loss -------------------------------------------------------------------------

WINDY = dict(num_envs=64, horizon=16, num_sgd_iters=2, sgd_minibatch_size=256, device="cpu", seed=0,
             model_config={"hiddens": [32, 32], "activation_fn": "elu"}, normalize_rewards=False,
             obs_groups={"actor": ["policy"], "critic": ["policy", "critic"]}, symmetry_fn=mirror)


def _windy(**kwargs):
    return AlgorithmConfig(**{**WINDY, **kwargs}).build(RslRlVecEnv.factory(lambda n, d: WindyReach(n, d, seed=0)))


def _asymmetry(algo, obs) -> torch.Tensor:
    """mean((mu(mirror(o)) - mirror(mu(o)))^2): what the mirror loss measures and controls."""
    with torch.no_grad():
        means = algo.policy._actor_distribution(obs).mode()
        on_mirrored = algo.policy._actor_distribution(mirror(obs, means)[0]).mode()
        return (on_mirrored - mirror(obs, means)[1]).square().mean()


def test_the_mirror_loss_is_the_mean_squared_asymmetry_of_the_mean_action_with_a_one_sided_gradient() -> None:
    algo = _windy(mirror_loss_coeff=0.5)
    algo.collect()
    algo.compute_advantages()
    mb = {k: v[:100] for k, v in algo.flat_batch().items()}
    terms = algo.losses(mb)
    assert algo.loss_fields._fields[-1] == "mirror"
    torch.testing.assert_close(terms.mirror, _asymmetry(algo, mb["obs"]))
    plain = algo.objective(*algo.minibatches.evaluate(algo.policy, mb))
    torch.testing.assert_close(terms.total, plain.total + 0.5 * terms.mirror)
    # Its gradient comes through mu(mirror(o)) only: mirror(mu(o)) is the fixed target.
    params = list(algo.policy.model.parameters())
    grads = torch.autograd.grad(terms.total - plain.total, params, allow_unused=True)
    means = algo.policy._actor_distribution(mb["obs"]).mode().detach()
    on_mirrored = algo.policy._actor_distribution(mirror(mb["obs"], mb["actions"])[0]).mode()
    expected = torch.autograd.grad(0.5 * (on_mirrored - mirror(mb["obs"], means)[1]).square().mean(), params,
                                   allow_unused=True)
    for g, e in zip(grads, expected):
        if e is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-7)


def test_the_mirror_loss_makes_the_policy_symmetric() -> None:
    """The controlled quantity: the policy's asymmetry on fresh observations after 8
    updates, with the mirror loss against without (same seed, same data at the start)."""
    probe = RslRlVecEnv.factory(lambda n, d: WindyReach(n, d, seed=7))(512, None, device="cpu").reset()
    results = {}
    for coeff in (None, 1.0):
        algo = _windy(mirror_loss_coeff=coeff)
        for _ in range(8):
            algo.collect()
            stats = algo.step()
        results[coeff] = _asymmetry(algo, probe).item()
        if coeff is not None:
            assert stats["losses/mirror"] >= 0
    assert results[1.0] < 0.5 * results[None], results  # measured: 0.0070 against 0.0266


def test_the_mirror_loss_fields_are_checked_by_name() -> None:
    with pytest.raises(ConfigError, match="mirror_loss_coeff: needs symmetry_fn"):
        AlgorithmConfig(**BASE, mirror_loss_coeff=1.0)
    with pytest.raises(ConfigError, match="mirror_loss_coeff: needs continuous actions"):
        AlgorithmConfig(**BASE, symmetry_fn=_flip_cartpole, mirror_loss_coeff=1.0).build(CartPole)
    with pytest.raises(ConfigError, match="mirror_loss_coeff: must be"):
        AlgorithmConfig(**BASE, symmetry_fn=_flip_cartpole, mirror_loss_coeff=-1.0)


def test_each_members_mirror_loss_is_its_own() -> None:
    """With S members the mirror loss is ``[S]``, each member's mean over its own rows (so
    each member's gradient is its own, as for every loss term)."""
    algo = _windy(mirror_loss_coeff=0.5, num_seeds=2)
    algo.collect()
    algo.compute_advantages()
    batch = algo.flat_batch()
    terms = algo.losses(batch)
    obs = batch["obs"]
    with torch.no_grad():
        means = algo.policy._actor_distribution(obs).mode()
        on_mirrored = algo.policy._actor_distribution(mirror(obs, means)[0]).mode()
        per_row = (on_mirrored - mirror(obs, means)[1]).square().mean(dim=1)
    assert terms.mirror.shape == (2,)
    torch.testing.assert_close(terms.mirror, per_row.view(2, -1).mean(dim=1))
    for _ in range(3):
        algo.collect()
        stats = algo.step()
    assert stats["member0/losses/mirror"] != stats["member1/losses/mirror"]


def test_with_members_each_members_twins_follow_its_own_rows() -> None:
    env = RslRlVecEnv.factory(lambda n, d: WindyReach(n, d, seed=0))(6, None, device="cpu")
    sym = Symmetry(mirror, env.observation_spec, env.action_spec, torch.device("cpu"))
    obs = TensorDict({"policy": torch.randn(6, 4), "critic": torch.randn(6, 3)}, batch_size=[6])
    mb = {"obs": obs, "actions": torch.randn(6, 2), "advantages": torch.arange(6.0).unsqueeze(1)}
    out = sym.augment(mb, members=2)  # members of 3 rows each: [a0 a1 a2 | b0 b1 b2]
    twin_obs, twin_actions = mirror(obs, mb["actions"])
    assert out["advantages"].view(-1).tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5]
    assert torch.equal(out["actions"], torch.cat([mb["actions"][:3], twin_actions[:3], mb["actions"][3:], twin_actions[3:]]))
    assert torch.equal(out["obs"]["critic"][9:], twin_obs["critic"][3:])
