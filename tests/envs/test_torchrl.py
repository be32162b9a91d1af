"""TorchRLEnv and to_torchrl: exact episode ends both ways, and PPO on TorchRL's PendulumEnv."""

from __future__ import annotations

import pytest
import torch
from torchrl.envs import CatTensors, Compose, PendulumEnv, StepCounter, TransformedEnv, UnsqueezeTransform
from torchrl.envs.utils import check_env_specs

from rlx import AlgorithmConfig
from rlx.env import check_step_output
from rlx.envs import CartPole
from rlx.envs.torchrl import TorchRLEnv, to_torchrl


def _pendulum(num_envs: int, device: torch.device, max_steps: int = 200):
    transforms = Compose(
        UnsqueezeTransform(dim=-1, in_keys=["th", "thdot"], in_keys_inv=["th", "thdot"]),
        CatTensors(in_keys=["th", "thdot"], out_key="observation", del_keys=False),
        StepCounter(max_steps=max_steps),
    )
    return TransformedEnv(PendulumEnv(device=device), transforms)


def _pendulum_env_cls(max_steps: int = 200):
    def make(num_envs, horizon=None, *, device="cpu"):
        return TorchRLEnv(
            num_envs, device=device, make_env=lambda b, d: _pendulum(b, d, max_steps), obs_keys=["observation"],
            reset_input=lambda env, b: env.base_env.gen_params(batch_size=[b]),
        )

    return make


def test_torchrl_time_limit_becomes_truncation_with_the_final_observation() -> None:
    env = _pendulum_env_cls(max_steps=3)(5)
    obs = env.reset()
    assert obs.shape == (5, 2)
    for t in range(1, 7):
        out = env.step(torch.zeros(5, 1))
        check_step_output(out, env.observation_spec, 5)
        assert bool(out["truncated"].all()) == (t % 3 == 0)
        assert not out["terminated"].any()
        if t % 3 == 0:
            # The "next" observation ended the episode; obs is the reset one.
            assert not torch.equal(out["final_obs"], out["obs"])
        else:
            assert torch.equal(out["final_obs"], out["obs"])


@pytest.mark.slow
def test_ppo_improves_the_return_of_torchrl_pendulum() -> None:
    algo = AlgorithmConfig(
        num_envs=16, horizon=64, num_sgd_iters=10, sgd_minibatch_size=256, optimizer_config={"lr": 1e-3},
        model_config={"hiddens": [64, 64], "activation_fn": "tanh"}, gamma=0.9, vf_clip_param=None,
        max_grad_norm=0.5, device="cpu", seed=0,
    ).build(_pendulum_env_cls())
    rewards = []
    for _ in range(36):
        rewards.append(algo.collect()["rewards/mean"])
        algo.step()
    first, last = sum(rewards[:6]) / 6, sum(rewards[-6:]) / 6
    assert last > first + 1.0, (first, last)


def test_to_torchrl_passes_torchrl_spec_checks_and_rolls_out() -> None:
    torch.manual_seed(0)
    env = to_torchrl(CartPole(3))
    check_env_specs(env)
    rollout = env.rollout(600, break_when_any_done=False)
    assert rollout.batch_size == (3, 600)
    done = rollout["next", "done"].squeeze(-1)
    assert done.any()
    # After an end, the next root observation is a fresh episode's (all |x| <= 0.05).
    env_idx, t = done.nonzero()[0].tolist()
    assert rollout["observation"][env_idx, t + 1].abs().max() <= 0.05
    assert not torch.equal(rollout["next", "observation"][env_idx, t], rollout["observation"][env_idx, t + 1])
    # And the terminal "next" observation is the true last one: outside the bounds.
    last = rollout["next", "observation"][env_idx, t]
    assert last[0].abs() > 2.4 or last[2].abs() > CartPole.theta_threshold or rollout["next", "truncated"][env_idx, t]


def test_to_torchrl_rollouts_keep_every_observation_of_an_env_returning_views() -> None:
    # CartPoleNoVelocity's observation is two columns of its state: a rollout must hold
    # copies, not views the next step overwrites.
    from rlx.envs import CartPoleNoVelocity

    torch.manual_seed(0)
    env = to_torchrl(CartPoleNoVelocity(3))
    rollout = env.rollout(300, break_when_any_done=False)
    # Within an episode, each root observation is the previous step's next observation.
    same_episode = ~rollout["next", "done"][:, :-1].squeeze(-1)
    assert torch.equal(rollout["observation"][:, 1:][same_episode], rollout["next", "observation"][:, :-1][same_episode])
    # After an end, the root observation is the new episode's first (|x|, |theta| <= 0.05).
    ended = rollout["next", "done"][:, :-1].squeeze(-1)
    assert ended.any() and rollout["observation"][:, 1:][ended].abs().max() <= 0.05
    # And so is the reset's, which a view of the state would have turned into the last state.
    assert rollout["observation"][:, 0].abs().max() <= 0.05
    assert not torch.equal(rollout["observation"][:, 0], rollout["next", "observation"][:, -1])


def test_rlx_env_round_trips_through_both_adapters() -> None:
    def make(num_envs, horizon=None, *, device="cpu"):
        return TorchRLEnv(num_envs, device=device, make_env=lambda b, d: to_torchrl(CartPole(b, device=d)))

    env = make(4)
    assert env.observation_spec.shape == (4,)
    env.reset()
    ends = 0
    for _ in range(100):
        out = env.step(torch.randint(0, 2, (4,)))
        check_step_output(out, env.observation_spec, 4)
        ends += int(out["terminated"].sum())
        done = out["terminated"].squeeze(-1)
        assert (out["obs"][done].abs() <= 0.05).all()
    assert ends > 0
