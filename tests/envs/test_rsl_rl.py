"""RslRlVecEnv: rsl_rl's VecEnv (both forms) checked transition by transition, and learning."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rlx import AlgorithmConfig
from rlx.envs import Pendulum, RslRlVecEnv


class ScriptedVecEnv:
    """rsl_rl's VecEnv with known episodes: sub-env i's episodes last ``i % 3 + 2`` steps and
    end in a time-out when i is even, a terminal state when odd. ``policy`` holds the step
    count within the episode and the env index, ``critic`` adds the episode count. Rewards
    are the step count. ``form`` 3 returns TensorDicts of groups; form 2 the policy tensor,
    the critic in ``extras["observations"]`` and float 0/1 flags."""

    def __init__(self, num_envs: int, device: torch.device, form: int = 3, final_obs: bool = False) -> None:
        self.num_envs, self.num_actions, self.device, self.form, self.final_obs = num_envs, 2, device, form, final_obs
        self.max_episode_length = 4
        self.length = torch.arange(num_envs, device=device) % 3 + 2
        self.t = torch.zeros(num_envs, device=device)
        self.episodes = torch.zeros(num_envs, device=device)

    def _groups(self) -> TensorDict:
        index = torch.arange(self.num_envs, device=self.device, dtype=torch.float32)
        policy = torch.stack([self.t, index], -1)
        critic = torch.stack([self.t, index, self.episodes], -1)
        return TensorDict({"policy": policy, "critic": critic}, batch_size=[self.num_envs])

    def _out(self, groups: TensorDict, extras: dict) -> Any:
        if self.form == 3:
            return groups
        extras["observations"] = {"critic": groups["critic"]}
        return groups["policy"]

    def get_observations(self) -> Any:
        extras: dict = {}
        obs = self._out(self._groups(), extras)
        return obs if self.form == 3 else (obs, extras)

    def step(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, dict]:
        assert actions.shape == (self.num_envs, 2)
        self.t += 1
        rewards = self.t.clone()
        dones = self.t >= self.length
        time_outs = dones & (torch.arange(self.num_envs, device=self.device) % 2 == 0)
        last = self._groups()
        self.episodes += dones.float()
        self.t = torch.where(dones, 0.0, self.t)
        extras: dict = {"time_outs": time_outs.float() if self.form == 2 else time_outs,
                        "log": {"/episode_reward": rewards.mean(), "constant": 2.0}}
        if self.final_obs:
            extras["final_observation"] = last if self.form == 3 else last["policy"]
        obs = self._out(self._groups(), extras)
        return obs, rewards, dones.float() if self.form == 2 else dones, extras


@pytest.mark.parametrize("form, final_obs", [(3, False), (2, False), (3, True), (2, True)])
def test_transitions_match_the_scripted_vecenv(form: int, final_obs: bool) -> None:
    B, T = 6, 7
    env_cls = RslRlVecEnv.factory(lambda n, device: ScriptedVecEnv(n, device, form, final_obs))
    algo = AlgorithmConfig(num_envs=B, horizon=T, device="cpu", seed=0, model_config={"hiddens": [8]},
                           obs_groups={"actor": ["policy"], "critic": ["policy", "critic"]}).build(env_cls)
    assert sorted(algo.env.observation_spec.keys()) == ["critic", "policy"]
    assert algo.env.max_episode_steps == 4
    stats = algo.collect()
    buf = algo.buffer
    obs = buf.get("obs")["policy"][:, :, 0]  # [B, T+1] step count within the episode
    for b in range(B):
        length = b % 3 + 2
        for t in range(T):
            before = obs[b, t].item()
            ended = before + 1 >= length
            assert buf.get("rewards")[b, t, 0].item() == before + 1
            assert buf.get("truncated")[b, t, 0].item() == (ended and b % 2 == 0), (b, t)
            assert buf.get("terminated")[b, t, 0].item() == (ended and b % 2 == 1), (b, t)
            if ended and b % 2 == 0:
                # The true last observation when the env gives it, else V(s_t)'s: the one
                # the step was taken from (rsl_rl's approximation).
                expected = before + 1 if final_obs else before
                assert buf.get("final_obs")["policy"][b, t, 0].item() == expected, (b, t)
                # A 2.x env's final observation is the policy tensor: the critic group keeps s_t.
                critic_expected = expected if form == 3 else before
                assert buf.get("final_obs")["critic"][b, t, 0].item() == critic_expected
    # The critic group carries what only it has (the episode count) into the buffer.
    assert buf.get("obs")["critic"][:, T, 2].sum() > 0
    assert stats["env/episode_reward"] > 0 and stats["env/constant"] == 2.0  # extras["log"], means


def test_a_vecenv_with_the_wrong_size_or_interface_is_refused() -> None:
    with pytest.raises(ValueError, match=r"built 4 envs, expected 6"):
        RslRlVecEnv(6, make_env=lambda n, device: ScriptedVecEnv(4, device))
    with pytest.raises(ValueError, match=r"has no 'get_observations': not an rsl_rl VecEnv"):
        RslRlVecEnv(2, make_env=lambda n, device: type("Bare", (), {"num_envs": n, "num_actions": 1, "step": None})())
    with pytest.raises(ValueError, match="make_env is required"):
        RslRlVecEnv(2)


class PendulumAsVecEnv:
    """rlx's batched Pendulum behind rsl_rl's 3.x interface (a policy group only)."""

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.env = Pendulum(num_envs, device=device)
        self.num_envs, self.num_actions, self.device = num_envs, 1, device
        self.max_episode_length = self.env.max_episode_steps
        self._obs = self.env.reset()

    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": self._obs}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        out = self.env.step(actions.clamp(-2.0, 2.0))
        self._obs = out["obs"]
        truncated = out["truncated"].squeeze(-1)
        return self.get_observations(), out["rewards"].squeeze(-1), truncated, {"time_outs": truncated}


@pytest.mark.slow
def test_ppo_learns_pendulum_through_the_adapter(pendulum_learner) -> None:
    # The untrained policy scores about -1200.
    best, steps = pendulum_learner(RslRlVecEnv.factory(PendulumAsVecEnv))
    assert best >= -400, (best, steps)
