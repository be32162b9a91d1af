"""GymnasiumEnv: specs from spaces, both autoreset modes exactly, learning CartPole-v1."""

from __future__ import annotations

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

from torchrl.data import Bounded, Categorical, Composite, MultiCategorical, Unbounded  # noqa: E402

from rlx import AlgorithmConfig  # noqa: E402
from rlx.env import check_step_output  # noqa: E402
from rlx.envs.gymnasium import GymnasiumEnv, space_to_spec  # noqa: E402


class ScriptedGymEnv(gym.Env):
    """Episodes of known length: reward t+1 at step t; even ids terminate, odd ids truncate.

    The observation is [steps so far, episodes finished, id] so every transition can be
    traced back to its episode.
    """

    counter = 0

    def __init__(self, length: int | None = None):
        self.id = ScriptedGymEnv.counter
        ScriptedGymEnv.counter += 1
        self.length = length or (self.id % 3 + 2)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.episodes = 0

    def _obs(self):
        return np.array([self.t, self.episodes, self.id], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        reward = float(self.t)
        done = self.t >= self.length
        obs = self._obs()
        if done:
            self.episodes += 1
            obs = np.array([self.t, self.episodes - 1, self.id], dtype=np.float32)
        terminated = done and self.id % 2 == 0
        truncated = done and self.id % 2 == 1
        return obs, reward, terminated, truncated, {}


@pytest.mark.parametrize("autoreset_mode", ["next_step", "same_step"])
def test_rollouts_match_the_script_in_both_autoreset_modes(autoreset_mode: str) -> None:
    ScriptedGymEnv.counter = 0
    B, T = 4, 12
    env = GymnasiumEnv(B, device="cpu", env=ScriptedGymEnv, autoreset_mode=autoreset_mode)
    obs = env.reset()
    assert torch.equal(obs[:, 0], torch.zeros(B))
    for t in range(T):
        out = env.step(torch.zeros(B, dtype=torch.long))
        check_step_output(out, env.observation_spec, B)
        for i in range(B):
            length = i % 3 + 2
            step_in_episode = t % length + 1
            ends = step_in_episode == length
            # Every transition is a real one: reward t+1 within its episode, never the
            # zero-reward reset step of gymnasium's next-step autoreset.
            assert out["rewards"][i, 0] == step_in_episode
            assert out["terminated"][i, 0] == (ends and i % 2 == 0)
            assert out["truncated"][i, 0] == (ends and i % 2 == 1)
            assert out["final_obs"][i, 0] == step_in_episode
            assert out["final_obs"][i, 1] == t // length
            assert out["obs"][i, 0] == (0 if ends else step_in_episode)
    env.close()


def test_async_vector_env_gives_the_same_rollout() -> None:
    rollouts = []
    for vectorization in ("sync", "async"):
        ScriptedGymEnv.counter = 0
        env = GymnasiumEnv(3, device="cpu", env=lambda: ScriptedGymEnv(length=2), vectorization=vectorization)
        env.reset()
        rollouts.append([env.step(torch.ones(3, dtype=torch.long))["rewards"].clone() for _ in range(5)])
        env.close()
    assert all(torch.equal(a, b) for a, b in zip(*rollouts))


def test_spaces_become_specs() -> None:
    spaces = gym.spaces
    assert isinstance(space_to_spec(spaces.Discrete(3)), Categorical)
    assert space_to_spec(spaces.Discrete(3)).shape == ()
    multi = space_to_spec(spaces.MultiDiscrete([2, 5]))
    assert isinstance(multi, MultiCategorical) and multi.shape == (2,)
    box = space_to_spec(spaces.Box(-1.0, 2.0, shape=(3,), dtype=np.float64))
    assert isinstance(box, Bounded) and box.dtype == torch.float32 and box.space.high.max() == 2.0
    assert isinstance(space_to_spec(spaces.Box(-np.inf, np.inf, shape=(2,))), Unbounded)
    nested = space_to_spec(spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "action_mask": spaces.MultiBinary(4)}))
    assert isinstance(nested, Composite) and nested["action_mask"].dtype == torch.bool
    with pytest.raises(TypeError, match="Text"):
        space_to_spec(spaces.Text(5))


def test_discrete_actions_with_an_offset_start_are_shifted() -> None:
    class Shifted(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (1,))
        action_space = gym.spaces.Discrete(3, start=-1)

        def reset(self, *, seed=None, options=None):
            return np.zeros(1, dtype=np.float32), {}

        def step(self, action):
            return np.zeros(1, dtype=np.float32), float(action), False, False, {}

    env = GymnasiumEnv(2, env=Shifted)
    env.reset()
    assert env.step(torch.tensor([0, 2]))["rewards"].flatten().tolist() == [-1.0, 1.0]


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.MultiBinary(3),
        gym.spaces.MultiDiscrete([2, 3]),
        gym.spaces.MultiDiscrete([[2, 3], [4, 5]]),  # a 2-D nvec: rlx's spec flattens it
        gym.spaces.Box(-2.0, 2.0, (2,), np.float64),
        gym.spaces.Box(-2.0, 2.0, (), np.float32),
    ],
    ids=["multibinary", "multidiscrete", "multidiscrete-2d", "box-float64", "box-scalar"],
)
def test_every_action_space_trains_and_the_env_receives_its_own_shape(space) -> None:
    received: list[np.ndarray] = []

    class Strict(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
        action_space = space

        def __init__(self) -> None:
            self.t = 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(3, dtype=np.float32), {}

        def step(self, action):
            self.t += 1
            action = np.asarray(action)
            assert action.shape == space.shape, (action.shape, space.shape)
            received.append(action)
            return np.full(3, 0.1 * self.t, dtype=np.float32), 1.0, self.t >= 5, False, {}

    algo = AlgorithmConfig(num_envs=2, horizon=8, sgd_minibatch_size=16, seed=0).build(GymnasiumEnv.factory(env=Strict))
    algo.collect()
    algo.step()
    assert received and all(space.contains(a.astype(space.dtype)) for a in received)


def test_factory_is_usable_where_an_env_class_goes() -> None:
    env_cls = GymnasiumEnv.factory("CartPole-v1", autoreset_mode="same_step")
    env = env_cls(2, None, device="cpu")
    assert env.autoreset_mode == "same_step" and env.num_envs == 2
    assert env_cls.__name__ == "GymnasiumEnv[CartPole-v1]"


@pytest.mark.slow
def test_ppo_solves_gymnasium_cartpole_through_the_adapter(train_best) -> None:
    algo = AlgorithmConfig(
        num_envs=8, horizon=256, num_sgd_iters=10, sgd_minibatch_size=512, optimizer_config={"lr": 2e-3},
        model_config={"hiddens": [64, 64], "activation_fn": "tanh"}, gamma=0.99, vf_clip_param=None,
        max_grad_norm=0.5, normalize_rewards=False, device="cpu", seed=0,
    ).build(GymnasiumEnv.factory("CartPole-v1"))
    best = train_best(algo, "episodes/length_mean", 475, 300_000)
    assert best >= 475, f"best {best} after {algo.env_steps} env steps"
