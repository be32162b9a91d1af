"""collect's device work (:meth:`rlx.collect.rollout.Rollout.phase`: the T loop and the
tail), which ``cudagraphs`` captures as one CUDA graph for a graph-safe env.

No GPU is in reach here, so this checks on a CPU what the capture needs of it, op by op
(:class:`rlx.core.capture_check.CaptureCheck`): no value read back to the host, no tensor
made from host data, and the same storages read from outside at every collect. The
`gpu` tests replay it against the eager collect bit for bit.
"""

from __future__ import annotations

import pytest

import rlx.envs
from rlx import AlgorithmConfig, RecurrentAlgorithmConfig
from rlx.core.capture_check import CaptureCheck
from rlx.env import env_is_graph_safe
from rlx.envs import CartPole, Pendulum


class ShortPendulum(Pendulum):
    """Pendulum that truncates after 5 steps: every collect has truncated steps."""

    max_episode_steps = 5


CONFIGS = {
    "cartpole": (CartPole, {}),
    "truncations": (ShortPendulum, {"normalize_rewards": True, "normalize_obs": True}),
    "overflow": (ShortPendulum, {"normalize_rewards": True}),  # capacity 1: the overflow flag is set on the device
    "members": (ShortPendulum, {"num_seeds": 2, "normalize_rewards": True, "normalize_obs": True,
                                "member_hparams": {"gamma": [0.9, 0.99]}}),
    # A recurrent policy: each step reads its state and reset flag, truncations value
    # V(final_obs) from the state that would have continued the episode.
    "recurrent": (ShortPendulum, {"normalize_rewards": True, "normalize_obs": True, "seq_len": 4,
                                  "model_config": {"hiddens": [16], "hidden_size": 8, "cell": "gru"}}),
}


def _built(name: str):
    env_cls, extra = CONFIGS[name]
    cls = RecurrentAlgorithmConfig if name == "recurrent" else AlgorithmConfig
    algo = cls(**{"num_envs": 8, "horizon": 12, "device": "cpu", "seed": 0, "model_config": {"hiddens": [16, 16]},
                  **extra}).build(env_cls)
    algo.collect()  # the buffer, the first reset and the obs statistics' start
    algo.step()
    if name == "overflow":
        algo.rollout.set_truncation_capacity(1)
    return algo


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_collect_phase_reads_nothing_back_and_uploads_nothing(name: str) -> None:
    algo = _built(name)
    rollout, scaler = algo.rollout, algo.reward_scaler if algo.config.normalize_rewards else None
    rollout.begin(False)  # column 0 from the last collect: the host part before the phase
    with CaptureCheck() as check:
        stats = rollout.phase(False, scaler)
    assert not check.host_ops, sorted(check.host_ops)
    host = stats.to_host()  # the one transfer, after the phase
    assert host["rollout/finite"] == 1.0 and host["episodes/count"] >= 0
    assert host["rollout/truncation_overflow"] == float(name == "overflow")


@pytest.mark.parametrize("name", ["truncations", "members", "recurrent"])
def test_the_collect_phase_reads_the_same_tensors_every_collect(name: str) -> None:
    """A replayed graph reads the addresses it was captured with: the buffer, the
    policy's parameters and normalizer statistics, the carried episodes, the reward
    scaler's returns and statistics and the env's state are written in place, never
    handed over as new tensors. Two collects after the first read exactly the same
    storages from outside the phase."""
    algo = _built(name)
    reads, phase = [], algo.rollout.phase

    def watched(*args):
        with CaptureCheck() as check:
            out = phase(*args)
        reads.append(check.external)
        return out

    algo.rollout.phase = watched  # collect() runs its host part around it as always
    for _ in range(2):
        algo.collect()
        algo.step()
    assert reads[0] == reads[1], (len(reads[0] ^ reads[1]), len(reads[0]))


def test_the_phase_is_what_collect_runs_on_the_device() -> None:
    """collect() runs :meth:`phase` once, through ``run`` (a CUDA graph when graphed),
    and the statistics it returns come from that call's transfer."""
    algo = _built("truncations")
    calls, phase = [], algo.rollout.phase
    algo.rollout.phase = lambda *args: calls.append(args) or phase(*args)
    out = algo.collect()
    assert calls == [(False, algo.reward_scaler)]
    assert out["env/steps"] == 8 * 12 and "returns/mean" in out


GRAPH_SAFE = [name for name in rlx.envs.__all__ if isinstance(getattr(rlx.envs, name), type)
              and env_is_graph_safe(getattr(rlx.envs, name))]


@pytest.mark.parametrize("name", GRAPH_SAFE)
def test_a_graph_safe_env_steps_without_host_reads_at_fixed_addresses(name: str) -> None:
    """What ``graph_safe = True`` promises, for every built-in env that declares it: its
    step reads nothing back to the host, uploads nothing and keeps its state in place,
    so a captured T loop replays it."""
    env = getattr(rlx.envs, name)(4)
    env.reset()
    actions = env.action_spec.rand((4,))
    reads = []
    for _ in range(3):  # the third step reads what the second one did
        with CaptureCheck() as check:
            env.step(actions)
        assert not check.host_ops, sorted(check.host_ops)
        reads.append(check.external - {actions.untyped_storage().data_ptr()})
    assert reads[1] == reads[2]


def test_the_built_in_envs_are_graph_safe() -> None:
    assert {"CartPole", "Pendulum", "PixelReach", "CueRecall", "DiscreteDummyEnv"} <= set(GRAPH_SAFE)
