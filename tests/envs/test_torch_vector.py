"""TorchVectorEnv: torch vector envs in gymnasium's shape, transition by transition, and learning."""

from __future__ import annotations

import pytest
import torch

from rlx import AlgorithmConfig
from rlx.envs import Pendulum
from rlx.envs import TorchVectorEnv


class ScriptedTorchVectorEnv:
    """gymnasium's vector API on torch tensors, same-step auto-reset: sub-env i's episodes
    last ``i % 3 + 2`` steps, truncated when i is even, terminated when odd. The
    observation is (step count, index), or a dict of the two; rewards are the step count.
    ``info["final_observation"]`` holds the last observations when ``final`` is set."""

    def __init__(self, num_envs: int, device: torch.device, final: bool = True, as_dict: bool = False) -> None:
        self.num_envs, self.num_actions, self.final, self.as_dict = num_envs, 1, final, as_dict
        self.device = device
        self.length = torch.arange(num_envs, device=device) % 3 + 2
        self.t = torch.zeros(num_envs, device=device)

    def _obs(self):
        index = torch.arange(self.num_envs, device=self.device, dtype=torch.float32)
        if self.as_dict:
            return {"count": self.t.clone().unsqueeze(-1), "index": index.unsqueeze(-1)}
        return torch.stack([self.t, index], -1)

    def reset(self):
        self.t.zero_()
        return self._obs(), {}

    def step(self, actions):
        self.t += 1
        rewards = self.t.clone()
        ended = self.t >= self.length
        even = torch.arange(self.num_envs, device=self.device) % 2 == 0
        last = self._obs()
        self.t = torch.where(ended, 0.0, self.t)
        info = {"final_observation": last} if self.final else {}
        return self._obs(), rewards, ended & ~even, ended & even, info


@pytest.mark.parametrize("final, as_dict", [(True, False), (False, False), (True, True)])
def test_transitions_match_the_scripted_env(final: bool, as_dict: bool) -> None:
    B, T = 6, 7
    env_cls = TorchVectorEnv.factory(lambda n, device: ScriptedTorchVectorEnv(n, device, final, as_dict))
    algo = AlgorithmConfig(num_envs=B, horizon=T, device="cpu", seed=0, model_config={"hiddens": [8]}).build(env_cls)
    algo.collect()
    buf = algo.buffer
    count = lambda x: x["count"][..., 0] if as_dict else x[..., 0]  # noqa: E731
    obs = count(buf.get("obs"))
    for b in range(B):
        for t in range(T):
            before = obs[b, t].item()
            ended = before + 1 >= b % 3 + 2
            assert buf.get("rewards")[b, t, 0].item() == before + 1
            assert buf.get("truncated")[b, t, 0].item() == (ended and b % 2 == 0), (b, t)
            assert buf.get("terminated")[b, t, 0].item() == (ended and b % 2 == 1), (b, t)
            if ended and b % 2 == 0:  # the true last observation, or V(s_t)'s without one
                assert count(buf.get("final_obs"))[b, t].item() == (before + 1 if final else before)


def test_bounded_actions_are_clipped_before_the_env_sees_them() -> None:
    seen = []

    class Recording(ScriptedTorchVectorEnv):
        def step(self, actions):
            seen.append(actions.clone())
            return super().step(actions)

    env_cls = TorchVectorEnv.factory(lambda n, device: Recording(n, device), action_low=-0.5, action_high=0.5)
    algo = AlgorithmConfig(num_envs=32, horizon=4, device="cpu", seed=0, model_config={"hiddens": [8]}).build(env_cls)
    algo.collect()
    assert all(a.abs().max() <= 0.5 for a in seen)


class PendulumAsTorchVectorEnv:
    """rlx's batched Pendulum behind gymnasium's vector API (torch tensors, same-step reset)."""

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.env, self.num_envs, self.num_actions = Pendulum(num_envs, device=device), num_envs, 1

    def reset(self):
        return self.env.reset(), {}

    def step(self, actions):
        out = self.env.step(actions)
        zeros = torch.zeros_like(out["truncated"])
        return out["obs"], out["rewards"], zeros, out["truncated"], {"final_obs": out["final_obs"]}


@pytest.mark.slow
def test_ppo_learns_pendulum_through_the_adapter(pendulum_learner) -> None:
    # The untrained policy scores about -1200.
    best, steps = pendulum_learner(TorchVectorEnv.factory(PendulumAsTorchVectorEnv, action_low=-2.0, action_high=2.0))
    assert best >= -400, (best, steps)
