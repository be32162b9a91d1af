"""What the built-in envs' tests share: loading a state, gymnasium as the reference, the
checks every episodic env passes the same way (auto-reset, time limit, protocol) and a
CUDA-graph capture of a step.

Tests run with ``--import-mode=importlib``, so a test module cannot import this one: the
helpers come as one fixture, ``envtest`` (:class:`EnvTest`).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from tensordict import TensorDict
from torch.testing import assert_close

from rlx.env import Env, check_step_output
from rlx.envs._episodic import EpisodicEnv


def load_state(env: EpisodicEnv, state: Any, steps: int | torch.Tensor = 0) -> None:
    """Put every sub-env in ``state`` ``[B, S]`` (cast to the env's state dtype) with
    ``steps`` steps of its episode already taken (one number for all, or ``[B]``)."""
    steps = torch.as_tensor(steps, dtype=torch.int64).expand(env.num_envs).clone()
    env.load_state_dict({"state": torch.as_tensor(state, dtype=env.state.dtype), "steps": steps})


class GymReference:
    """gymnasium's unwrapped ``env_id``, stepped from any state: the reference a built-in
    env's dynamics are checked against.

    Args:
        env_id: A gymnasium id, e.g. ``"CartPole-v1"``.
        dtype: The dtype of the state and action arrays handed to gymnasium: float64 for
            most envs; float32 for one whose gymnasium twin keeps a float32 state, so that
            gymnasium computes in float32 like the batched env.
    """

    def __init__(self, env_id: str, dtype: torch.dtype = torch.float64) -> None:
        gym = pytest.importorskip("gymnasium")
        self.env = gym.make(env_id).unwrapped
        self.env.reset(seed=0)
        self.dtype = dtype

    @property
    def state(self) -> Any:
        """gymnasium's current state (a numpy array)."""
        return self.env.state

    def reset(self) -> None:
        """Start a new episode."""
        self.env.reset()

    def step_from(self, state: torch.Tensor, action: torch.Tensor | int) -> tuple[torch.Tensor, float, bool]:
        """Step from ``state`` ``[S]`` with ``action`` (an integer, or a tensor of one
        sub-env's action); the next state is then :attr:`state`.

        Returns:
            The observation reached, the reward and the termination flag.
        """
        self.env.state = state.to(self.dtype).numpy().copy()
        if hasattr(self.env, "steps_beyond_terminated"):
            self.env.steps_beyond_terminated = None  # each call is a fresh transition, not a step past the end
        if isinstance(action, torch.Tensor):
            action = action.to(self.dtype).numpy().copy() if action.is_floating_point() else int(action)
        obs, reward, terminated, truncated, _ = self.env.step(action)
        assert not truncated  # the unwrapped env never truncates; the time limit is a wrapper
        return torch.as_tensor(obs), float(reward), bool(terminated)

    def step_batch(self, env_cls: type[EpisodicEnv], states: torch.Tensor,
                   actions: torch.Tensor) -> tuple[EpisodicEnv, TensorDict, dict[str, torch.Tensor]]:
        """Step a batch of ``env_cls`` from ``states`` ``[B, S]`` with ``actions``, and
        gymnasium from each state alone.

        Returns:
            The env, its output (checked against the step protocol), and gymnasium's
            ``obs`` ``[B, D]``, ``rewards`` ``[B]``, ``terminated`` ``[B]`` and next
            ``state`` ``[B, S]``.
        """
        env = env_cls(states.shape[0])
        load_state(env, states)
        out = env.step(actions)
        check_step_output(out, env.observation_spec, env.num_envs)
        steps = [(*self.step_from(s, a), torch.as_tensor(self.state)) for s, a in zip(states, actions)]
        obs, rewards, terminated, next_states = zip(*steps)
        expected = {"obs": torch.stack(obs), "rewards": torch.tensor(rewards), "terminated": torch.tensor(terminated),
                    "state": torch.stack(next_states)}
        return env, out, expected

    def follow(self, env: EpisodicEnv, steps: int, policy: Callable[[torch.Tensor], torch.Tensor],
               *, reward_tol: float = 0.0) -> int:
        """Step ``env`` (one sub-env) and gymnasium side by side for ``steps`` steps, both
        from gymnasium's state each step (so that rounding cannot accumulate), with the
        action ``policy`` picks from that state; gymnasium resets when it terminates.

        Every step's observation agrees to 1e-5, the reward to ``reward_tol`` (0:
        exactly) and the termination flag exactly; a running episode's ``obs`` is its
        ``final_obs``.

        Returns:
            The number of episodes that ended.
        """
        episodes = 0
        for _ in range(steps):
            state = torch.as_tensor(self.state, dtype=env.state.dtype)
            load_state(env, state.unsqueeze(0))
            action = policy(state)
            obs, reward, terminated = self.step_from(state, action)
            out = env.step(action.unsqueeze(0))
            assert_close(out["final_obs"][0], obs, atol=1e-5, rtol=1e-5)
            assert_close(out["rewards"][0, 0].item(), reward, atol=reward_tol, rtol=reward_tol)
            assert out["terminated"][0, 0].item() == terminated
            if terminated:
                episodes += 1
                self.reset()
            else:
                assert torch.equal(out["obs"], out["final_obs"])
        return episodes


class EnvTest:
    """The checks every built-in episodic env passes the same way, and the tools they use."""

    #: :func:`load_state`.
    load = staticmethod(load_state)
    #: :class:`GymReference`: ``envtest.gym("CartPole-v1")`` (skips without gymnasium).
    gym = GymReference

    @staticmethod
    def assert_steps_as_alone(env_cls: type[EpisodicEnv], states: torch.Tensor, actions: torch.Tensor,
                              out: TensorDict) -> None:
        """``out["final_obs"][i]`` is, to the bit, what one sub-env reaches from
        ``states[i]`` with ``actions[i]``, for every row of ``states``."""
        for i in range(states.shape[0]):
            alone = env_cls(1)
            load_state(alone, states[i : i + 1])
            assert torch.equal(out["final_obs"][i], alone.step(actions[i : i + 1])["final_obs"][0])

    @staticmethod
    def step_with_ends(env_cls: type[EpisodicEnv], states: torch.Tensor, actions: torch.Tensor,
                       steps: torch.Tensor) -> tuple[EpisodicEnv, TensorDict]:
        """Step a batch of ``env_cls`` loaded with ``states`` after ``steps`` ``[B]`` steps,
        in which some sub-envs end their episode. Each ``final_obs`` must be what the
        same sub-env reaches stepped alone, ended or not; a sub-env that ended restarts
        its step count, and one that did not carries on (its ``obs`` is its
        ``final_obs``, its step count one more).

        Returns:
            The env and the step's output (checked against the step protocol).
        """
        env = env_cls(states.shape[0])
        load_state(env, states, steps=steps)
        out = env.step(actions)
        check_step_output(out, env.observation_spec, env.num_envs)
        EnvTest.assert_steps_as_alone(env_cls, states, actions, out)
        done = (out["terminated"] | out["truncated"])[:, 0]
        assert env.steps.tolist() == torch.where(done, 0, steps + 1).tolist()
        assert torch.equal(out["obs"][~done], out["final_obs"][~done])
        return env, out

    @staticmethod
    def run_to_time_limit(env_cls: type[EpisodicEnv], state: torch.Tensor, actions: Callable[[int], torch.Tensor],
                          *, offset: int) -> tuple[EpisodicEnv, TensorDict]:
        """Reset two sub-envs, then step them until sub-env 0 reaches the time limit,
        putting both back in ``state`` ``[2, S]`` before every step so that only the time
        limit can end an episode; sub-env 1 starts its episode ``offset`` steps after
        sub-env 0. ``actions(t)`` are the actions of step ``t`` (from 1).

        Exactly the last step truncates sub-env 0, and nothing terminates.

        Returns:
            The env and the last step's output.
        """
        env = env_cls(2)
        env.reset()
        limit = env.max_episode_steps
        for t in range(1, limit + 1):
            steps = env.state_dict()["steps"]
            if t == offset + 1:
                steps[1] = 0
            load_state(env, state, steps=steps)
            out = env.step(actions(t))
            check_step_output(out, env.observation_spec, 2)
            assert not out["terminated"].any()
            assert out["truncated"][:, 0].tolist() == [t == limit, False], t
        assert env.steps.tolist() == [0, limit - offset]
        return env, out

    @staticmethod
    def assert_termination_wins_at_the_time_limit(env_cls: type[EpisodicEnv], states: torch.Tensor,
                                                  actions: torch.Tensor) -> None:
        """Both sub-envs take their last allowed step; sub-env 0 (``states[0]``) also
        reaches a terminal state there. Termination alone is reported for it, since
        nothing should bootstrap from a terminal state; sub-env 1 is truncated."""
        env = env_cls(2)
        load_state(env, states, steps=env_cls.max_episode_steps - 1)
        out = env.step(actions)
        assert out["terminated"][:, 0].tolist() == [True, False]
        assert out["truncated"][:, 0].tolist() == [False, True]

    @staticmethod
    def protocol_rollout(env: EpisodicEnv, steps: int, draw: Callable[[], torch.Tensor],
                         *, seed: int = 1) -> tuple[torch.Tensor, list[tuple[torch.Tensor, TensorDict]]]:
        """Seed torch with ``seed``, reset ``env`` and step it ``steps`` times with the
        actions ``draw()`` returns. The first observation is ``[B, D]`` float32 as the
        observation spec says, and every output follows the step protocol (keys, shapes,
        dtypes, batch size, device, never terminated and truncated together).

        Returns:
            The first observation, and every step's actions and output, for the env's
            own checks.
        """
        torch.manual_seed(seed)
        obs = env.reset()
        assert obs.shape == (env.num_envs, *env.observation_spec.shape) and obs.dtype == torch.float32
        rollout = []
        for _ in range(steps):
            actions = draw()
            out = env.step(actions)
            check_step_output(out, env.observation_spec, env.num_envs)
            assert out.batch_size == torch.Size([env.num_envs]) and out.device == env.device
            assert not (out["terminated"] & out["truncated"]).any()
            rollout.append((actions, out))
        return obs, rollout

    @staticmethod
    def assert_trailing_action_dim_changes_nothing(env_cls: type[EpisodicEnv], actions: torch.Tensor,
                                                   state: torch.Tensor | None = None) -> None:
        """A batch of ``env_cls`` steps to the same observations with ``actions`` ``[B]``
        as with ``[B, 1]``, from ``state`` ``[B, S]`` (default: a reset, after seeding
        torch with 0)."""
        env, twin = env_cls(actions.shape[0]), env_cls(actions.shape[0])
        if state is None:
            torch.manual_seed(0)
            env.reset()
        else:
            load_state(env, state)
        twin.load_state_dict(env.state_dict())
        assert torch.equal(env.step(actions)["final_obs"], twin.step(actions.unsqueeze(-1))["final_obs"])

    @staticmethod
    def assert_specs(env_cls: type[EpisodicEnv], *, obs_shape: tuple[int, ...], action_shape: tuple[int, ...],
                     action_dtype: torch.dtype, max_episode_steps: int) -> EpisodicEnv:
        """``env_cls``'s specs describe one sub-env: float32 observations of ``obs_shape``,
        actions of ``action_shape`` and ``action_dtype``; it is graph-safe and its
        episodes last at most ``max_episode_steps``.

        Returns:
            An instance, for the env's own checks of its action spec.
        """
        env = env_cls(3)
        assert env.observation_spec.shape == obs_shape and env.observation_spec.dtype == torch.float32
        assert env.action_spec.shape == action_shape and env.action_spec.dtype == action_dtype
        assert env_cls.graph_safe and env_cls.max_episode_steps == max_episode_steps
        return env

    @staticmethod
    def capture_step(env: Env, actions: torch.Tensor, *, sync_free_steps: int = 1) -> tuple[Any, TensorDict]:
        """Check that ``env`` (on CUDA) steps without a host sync, then capture one step as
        a CUDA graph.

        After one warm-up step (lazy CUDA initialisation syncs), ``sync_free_steps`` steps
        run under ``torch.cuda.set_sync_debug_mode("error")``; then a step on a side
        stream warms up the capture stream and one step is captured.

        Returns:
            The ``torch.cuda.CUDAGraph`` and the step output it writes on every replay.
        """
        env.step(actions)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(sync_free_steps):
                env.step(actions)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            env.step(actions)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            static_out = env.step(actions)
        return graph, static_out


@pytest.fixture
def envtest() -> type[EnvTest]:
    """:class:`EnvTest`, what the built-in envs' tests share."""
    return EnvTest
