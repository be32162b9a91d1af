"""What every built-in episodic env shares (rlx.envs._episodic.EpisodicEnv): state
checkpoints that reproduce the next step, and sync-free, CUDA-graph-replayable steps."""

from __future__ import annotations

import functools

import pytest
import torch

from rlx.envs import Acrobot, CartPole, CartPoleNoVelocity, CueRecall, MountainCarContinuous, Pendulum, PointMass

ENVS = [CartPole, CartPoleNoVelocity, Acrobot, Pendulum, MountainCarContinuous, PointMass,
        functools.partial(CueRecall, delay=3)]  # its 4-step episodes all end at the 4th step
IDS = ["CartPole", "CartPoleNoVelocity", "Acrobot", "Pendulum", "MountainCarContinuous", "PointMass", "CueRecall"]
KEYS = ("obs", "rewards", "terminated", "truncated", "final_obs")


def _set_steps(env, offset: int) -> None:
    """Put sub-env i at step ``(i + offset) mod max_episode_steps`` of its episode."""
    steps = (torch.arange(env.num_envs, device=env.device) + offset) % env.max_episode_steps
    env.load_state_dict({"state": env.state_dict()["state"], "steps": steps})


@pytest.mark.parametrize("env_cls", ENVS, ids=IDS)
def test_state_dict_round_trip_reproduces_the_next_step(env_cls) -> None:
    torch.manual_seed(0)
    env = env_cls(8)
    env.reset()
    _set_steps(env, env.max_episode_steps - 11)  # sub-env 7 times out at the 4th step
    for _ in range(3):
        env.step(env.action_spec.rand((8,)))
    state = env.state_dict()
    assert set(state) == {"state", "steps"} and state["steps"].dtype == torch.int64
    actions = env.action_spec.rand((8,))
    rng = torch.get_rng_state()
    expected = env.step(actions)
    assert (expected["terminated"] | expected["truncated"]).any()
    assert not torch.equal(state["steps"], env.state_dict()["steps"])  # a snapshot, not a view
    other = env_cls(8)
    other.load_state_dict(state)
    torch.set_rng_state(rng)
    got = other.step(actions)
    for key in KEYS:
        assert torch.equal(got[key], expected[key]), key
    for key in ("state", "steps"):  # the resets drawn in the step too
        assert torch.equal(other.state_dict()[key], env.state_dict()[key]), key


@pytest.mark.parametrize("env_cls", ENVS, ids=IDS)
def test_load_state_dict_refuses_another_batch_size(env_cls) -> None:
    state = env_cls(4).state_dict()
    with pytest.raises(ValueError, match="num_envs"):
        env_cls(3).load_state_dict(state)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("env_cls", ENVS, ids=IDS)
def test_steps_run_without_syncs_and_replay_as_a_cuda_graph(env_cls, envtest) -> None:
    torch.manual_seed(0)
    B = 64
    env = env_cls(B, device="cuda")
    env.reset()
    actions = env.action_spec.rand((B,))
    # Three steps without a host sync (after a warm-up), then one step captured.
    graph, static_out = envtest.capture_step(env, actions, sync_free_steps=3)
    _set_steps(env, env.max_episode_steps - 2)  # replays cross the time limit
    for _ in range(3):
        before = env.state_dict()
        graph.replay()
        eager = env_cls(B, device="cuda")
        eager.load_state_dict(before)
        expected = eager.step(actions)
        # Reset draws differ between graph and eager RNG streams; the dynamics may not.
        for key in ("final_obs", "rewards", "terminated", "truncated"):
            assert torch.equal(static_out[key], expected[key]), key
        assert torch.equal(env.state_dict()["steps"], eager.state_dict()["steps"])


@pytest.mark.parametrize("fused", [False, True], ids=["uniform_", "fused"])
def test_fresh_states_compiled_are_uniform_draws_either_way(fused: bool, monkeypatch) -> None:
    """``EpisodicEnv._uniform`` compiled: ``uniform_`` (a CPU's program) or ``low + (high -
    low) * rand`` fused into the program (:data:`rlx.envs._episodic.FUSED_DRAWS`, CUDA's,
    tested here on the CPU). Either way ``[B, *shape]`` float32 draws inside ``[low,
    high]`` (a non-negative addend to ``low`` rounds to at least ``low``), whose mean over
    n draws lies within 5 standard errors, ``(high - low) / sqrt(12 n)``, of the middle,
    and each call draws anew."""
    import math

    import rlx.envs._episodic as episodic

    monkeypatch.setattr(episodic, "FUSED_DRAWS", ("cpu",) if fused else ())
    env = CartPole(4096)
    low, high = -0.5, 0.25  # float32 exactly
    torch._dynamo.reset()
    draw = torch.compile(lambda: env._uniform(low, high, 3), fullgraph=True, dynamic=False)
    torch.manual_seed(0)
    x = draw()
    assert x.shape == (4096, 3) and x.dtype == torch.float32
    assert ((x >= low) & (x <= high)).all()
    standard_error = (high - low) / math.sqrt(12 * x.numel())
    assert abs(float(x.double().mean()) - (low + high) / 2) < 5 * standard_error
    assert not torch.equal(x, draw())
