"""Random network distillation (rsl_rl's rnd_cfg): the intrinsic reward, what GAE sees,
the predictor's learning, checkpoints and the refusals."""

from __future__ import annotations

import pytest
import torch

from rlx import AlgorithmConfig, RecurrentAlgorithmConfig
from rlx.config import ConfigError
from rlx.core.gae import generalized_advantage_estimate
from rlx.envs import CartPole, RslRlVecEnv
from rlx.examples.windy_reach import WindyReach

RND = {"weight": 0.5, "predictor_hiddens": [32], "target_hiddens": [32], "embedding_dim": 8, "learning_rate": 3e-3}
BASE = dict(num_envs=16, horizon=16, sgd_minibatch_size=64, num_sgd_iters=2, device="cpu", seed=0,
            normalize_rewards=False, model_config={"hiddens": [32, 32]})


def test_gae_sees_the_extrinsic_plus_the_weighted_embedding_error_of_the_next_observation() -> None:
    algo = AlgorithmConfig(**BASE, rnd=RND).build(CartPole)
    algo.collect()
    buf, T = algo.buffer, algo.horizon
    next_obs = buf.get("obs")[:, 1 : T + 1]
    with torch.no_grad():
        error = torch.linalg.vector_norm(algo.rnd.target(next_obs) - algo.rnd.predictor(next_obs), dim=-1, keepdim=True)
    rewards = buf.get("rewards")[:, :T].clone()
    algo.compute_advantages()
    adv, ret = generalized_advantage_estimate(rewards + 0.5 * error, buf.get("values"), buf.get("terminated")[:, :T],
                                              buf.get("truncated")[:, :T], buf.get("final_values")[:, :T],
                                              gamma=algo.config.gamma, gae_lambda=algo.config.gae_lambda)
    torch.testing.assert_close(buf.get("advantages")[:, :T], adv)
    torch.testing.assert_close(buf.get("returns")[:, :T], ret)
    assert torch.equal(buf.get("rewards")[:, :T], rewards)  # the buffer keeps the extrinsic rewards
    assert error.min() > 0


def test_the_predictor_learns_the_states_the_policy_visits() -> None:
    """The quantity RND controls: the novelty bonus of familiar states falls as the
    predictor trains on them, and stays high on states never visited."""
    algo = AlgorithmConfig(**BASE, rnd={**RND, "normalize_state": True}).build(CartPole)
    bonuses = []
    for _ in range(15):
        algo.collect()
        stats = algo.step()
        bonuses.append(stats["rnd/intrinsic_reward"])
        assert stats["losses/rnd"] > 0
    assert bonuses[-1] < 0.3 * bonuses[0], bonuses
    visited = algo.buffer.get("obs")[:, :algo.horizon].reshape(-1, 4)
    novel = visited + torch.tensor([3.0, 0.0, 0.5, 0.0])  # far off the cart positions it saw
    with torch.no_grad():
        def error(x):
            s = algo.rnd.state(x)
            return torch.linalg.vector_norm(algo.rnd.target(s) - algo.rnd.predictor(s), dim=-1).mean()
        assert error(novel) > 3 * error(visited)


def test_rnd_resumes_exactly(resumed_run) -> None:
    def run(resume_at: int | None) -> list[torch.Tensor]:
        make = lambda: AlgorithmConfig(**BASE, rnd={**RND, "normalize_state": True, "normalize_reward": True}).build(CartPole)  # noqa: E731
        algo = resumed_run(make, resume_at)
        return [p.detach().clone() for p in [*algo.policy.parameters(), *algo.rnd.predictor.parameters()]]

    for a, b in zip(run(None), run(2)):
        assert torch.equal(a, b)


def test_rnd_resumes_with_another_number_of_envs_and_restarts_its_running_returns() -> None:
    """A checkpoint loaded by a run of other envs (a play script's few): the envs start
    afresh, and so do both reward scalers' running returns; the statistics, the
    predictor and its optimizer load as saved."""
    config = {**BASE, "rnd": {**RND, "normalize_reward": True}, "normalize_rewards": True}
    trained = AlgorithmConfig(**config).build(CartPole)
    for _ in range(2):
        trained.collect()
        trained.step()
    assert trained.rnd.reward_scaler.returns.abs().sum() > 0
    state = trained.state_dict()
    few = AlgorithmConfig(**{**config, "num_envs": 8, "sgd_minibatch_size": 32}).build(CartPole)
    few.load_state_dict(state)
    for scaler in (few.reward_scaler, few.rnd.reward_scaler):
        assert scaler.returns.shape == (8,) and not scaler.returns.any()
    saved = trained.rnd.reward_scaler.stats.state_dict()
    torch.testing.assert_close(few.rnd.reward_scaler.stats.state_dict(), saved, rtol=0, atol=0)
    for a, b in zip(few.rnd.predictor.parameters(), trained.rnd.predictor.parameters()):
        assert torch.equal(a, b)
    few.collect()
    assert "losses/rnd" in few.step()


def test_rnd_reads_the_observation_keys_it_is_given() -> None:
    env = RslRlVecEnv.factory(lambda n, d: WindyReach(n, d, seed=0))
    algo = AlgorithmConfig(**{**BASE, "obs_groups": {"actor": ["policy"]}}, rnd={**RND, "obs_keys": ["critic"]}).build(env)
    assert algo.rnd.predictor[0].in_features == 3  # the critic group: wind x, y and mass
    algo.collect()
    assert "losses/rnd" in algo.step()
    with pytest.raises(ConfigError, match=r"AlgorithmConfig.rnd.obs_keys: \['wind'\] not in the observation"):
        AlgorithmConfig(**BASE, rnd={**RND, "obs_keys": ["wind"]}).build(env)


def test_bad_rnd_settings_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"AlgorithmConfig.rnd: unknown key\(s\) \['weights'\]"):
        AlgorithmConfig(**BASE, rnd={"weights": 1.0})
    with pytest.raises(ConfigError, match="AlgorithmConfig.rnd.weight: must be a number >= 0"):
        AlgorithmConfig(**BASE, rnd={"weight": -1})
    with pytest.raises(ConfigError, match="rnd: is not supported for recurrent policies"):
        RecurrentAlgorithmConfig(**BASE, rnd=RND)
    with pytest.raises(ConfigError, match="obs_keys: names keys of a Composite observation"):
        AlgorithmConfig(**BASE, rnd={**RND, "obs_keys": ["policy"]}).build(CartPole)


def test_each_member_has_its_own_predictor_and_target() -> None:
    """With S members each member's bonus comes from its own networks and statistics: the
    stacked member i computes what a single RND with member i's weights computes."""
    algo = AlgorithmConfig(**BASE, rnd={**RND, "normalize_state": True}, num_seeds=2).build(CartPole)
    for _ in range(3):
        algo.collect()
        stats = algo.step()
    assert stats["member0/losses/rnd"] != stats["member1/losses/rnd"]
    rnd = algo.rnd
    obs = algo.buffer.get("obs")[:, 1 : algo.horizon + 1].reshape(-1, 4)  # seed-major: member 0's rows first
    with torch.no_grad():
        both = torch.linalg.vector_norm(rnd.embed(rnd.target, rnd.state(obs)) - rnd.embed(rnd.predictor, rnd.state(obs)), dim=-1)
        n = obs.shape[0] // 2
        for i in range(2):
            x = obs[i * n : (i + 1) * n].double()
            s = ((x - rnd.state_stats.mean[i]) / torch.sqrt(rnd.state_stats.var[i] + rnd.state_stats.epsilon)).float()
            h_t, h_p = s, s
            for layer_t, layer_p in zip(rnd.target, rnd.predictor):
                if hasattr(layer_t, "weight"):
                    h_t = h_t @ layer_t.weight[i] + layer_t.bias[i]
                    h_p = h_p @ layer_p.weight[i] + layer_p.bias[i]
                else:
                    h_t, h_p = layer_t(h_t), layer_p(h_p)
            torch.testing.assert_close(both[i * n : (i + 1) * n], torch.linalg.vector_norm(h_t - h_p, dim=-1),
                                       rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("extra", [{}, {"num_seeds": 2, "member_hparams": {"target_kl_div": [1e-4, 1.0]}}],
                         ids=["one", "members"])
def test_the_predictor_steps_only_where_the_policy_does_after_a_kl_early_stop(extra: dict) -> None:
    """The quantity held: the predictor's step count. A CPU ends the epoch loop at a KL
    early stop; a GPU (``sync_kl_stop`` off) runs the later epochs with every step held.
    Either way the predictor takes the policy's steps (each member its own), and the two
    loops end bit for bit alike."""
    config = dict(BASE, rnd={**RND, "normalize_state": True}, target_kl_div=1e-4, num_sgd_iters=6, **extra)
    ends, held = AlgorithmConfig(**config).build(CartPole), AlgorithmConfig(**config).build(CartPole)
    held.sync_kl_stop = False
    for i in range(2):
        for algo in (ends, held):
            torch.manual_seed(i)  # the same rollout and epoch orders for both
            algo.collect()
            stats = algo.step()
    for algo in (ends, held):
        policy_steps = next(iter(algo.optimizer.state.values()))["step"]
        rnd_steps = next(iter(algo.rnd.optimizer.state.values()))["step"]
        assert torch.equal(rnd_steps, policy_steps)
        most = 2 * config["num_sgd_iters"] * (config["num_envs"] * config["horizon"] // config["sgd_minibatch_size"])
        assert policy_steps.min() < most  # the stop triggered (for members: the first one's)
    assert stats["losses/rnd"] > 0
    for a, b in zip([*ends.policy.parameters(), *ends.rnd.predictor.parameters()],
                    [*held.policy.parameters(), *held.rnd.predictor.parameters()]):
        assert torch.equal(a, b)
