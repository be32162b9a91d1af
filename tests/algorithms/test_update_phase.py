"""PPO's update phase (:meth:`rlx.algorithms.ppo.PPO.update_phase`): all of ``step()``'s
device work, which ``cudagraphs_scope="step"`` captures as one CUDA graph.

A CUDA graph replays kernels: whatever the host decides, reads or copies in while it is
captured is frozen into it. No GPU is in reach here, so this checks on a CPU what the
capture needs of the function, op by op: no value read back to the host (``.item()``,
``nonzero``, a ``tolist``), no tensor made from host data (an upload, which a replay
would not repeat), and the same storages read from outside it at every step (a replay
reads the addresses it was captured with). ``tests/test_gpu.py`` replays it on a GPU against the uncaptured step.
"""

from __future__ import annotations

import pytest
import torch

from rlx import AlgorithmConfig
from rlx.core.capture_check import CaptureCheck
from rlx.envs import CartPole


def steps_under_capture_check(algo, steps: int = 3) -> tuple[list, list, dict]:
    """``steps`` collects and steps of ``algo`` with its ``run_update_phase`` watched by
    :class:`CaptureCheck` (step() runs its host part around it as always): no host read
    or upload inside the phase, the parameters moved by every step. Returns the storages
    each phase read from outside it, each phase's output and the last step's statistics."""
    reads, outs, phase = [], [], algo.run_update_phase

    def watched():
        with CaptureCheck() as check:
            out = phase()
        assert not check.host_ops, sorted(check.host_ops)
        reads.append(check.external)
        outs.append(out)
        return out

    algo.run_update_phase = watched
    for _ in range(steps):
        before = [p.detach().clone() for p in algo.policy.parameters()]
        algo.collect()
        stats = algo.step()
        assert any(not torch.equal(a, b) for a, b in zip(before, algo.policy.parameters()))
    return reads, outs, stats


@pytest.mark.parametrize("extra", [
    {},
    {"target_kl_div": 0.002, "normalize_obs": True, "normalize_rewards": True},
    {"num_seeds": 3, "target_kl_div": 0.01,
     "member_hparams": {"lr": [1e-4, 3e-4, 1e-3], "target_kl_div": [0.01, 0.02, 0.005]}},
    {"kl_adaptive_lr": True, "kl_adaptive_lr_per_minibatch": True, "target_kl_div": 0.01, "clip_grad_per_network": True},
    {"enable_amp": True, "target_kl_div": 0.01},
    {"enable_amp": True, "num_seeds": 2, "member_hparams": {"lr": [1e-4, 1e-3]}, "kl_adaptive_lr": True,
     "target_kl_div": 0.01},
    # One step graph holds these as they are: minibatches of 192, 192 and 128 samples;
    # gradients accumulated over an epoch, one step at its end judged on its KL.
    {"sgd_minibatch_size": 192, "target_kl_div": 0.01},
    {"accumulate_grads": True, "target_kl_div": 0.01, "num_seeds": 2},
], ids=["one", "kl_stop", "members", "adaptive_lr", "amp", "amp_members_adaptive_lr", "unequal", "accumulate_members"])
def test_the_update_phase_reads_nothing_back_and_uploads_nothing(extra: dict) -> None:
    """With the KL early stop gating on the device (as on CUDA, where ``sync_kl_stop``
    is off), the update phase runs none of :data:`~rlx.core.capture_check.NOT_CAPTURABLE`; the step around it
    reads its statistics in one transfer."""
    config = AlgorithmConfig(**{"num_envs": 32, "horizon": 16, "device": "cpu", "seed": 0, "sgd_minibatch_size": 128,
                                "num_sgd_iters": 3, **extra})
    algo = config.build(CartPole)
    algo.sync_kl_stop = False  # as on CUDA: every epoch runs, a stopped one with its steps held
    algo.collect()
    algo.step()
    algo.collect()
    before = [p.detach().clone() for p in algo.policy.parameters()]
    with CaptureCheck() as check:
        stats, epochs = algo.update_phase()
    assert not check.host_ops, sorted(check.host_ops)
    assert epochs == config.num_sgd_iters  # the host decided nothing: every epoch ran
    assert any(not torch.equal(a, b) for a, b in zip(before, algo.policy.parameters()))
    host = stats.to_host()  # the one transfer, after the phase
    assert "losses/total" in host and "monitors/kl_div" in host


def test_the_step_runs_the_update_phase_it_would_capture() -> None:
    """``step()`` runs :meth:`update_phase` through ``run_update_phase`` (a CUDA graph with
    ``cudagraphs_scope="step"``, the function itself elsewhere), and nothing else on the
    device but its statistics' transfer."""
    algo = AlgorithmConfig(num_envs=16, horizon=8, device="cpu", seed=0, cudagraphs_scope="step").build(CartPole)
    assert not algo.graphs_whole_step and algo.run_update_phase == algo.update_phase  # no CUDA: no graph
    calls = []
    phase = algo.run_update_phase
    algo.run_update_phase = lambda: calls.append(1) or phase()
    algo.collect()
    algo.step()
    assert calls == [1]


@pytest.mark.parametrize("extra", [
    {"target_kl_div": 0.002, "normalize_obs": True, "normalize_rewards": True,
     "lr_schedule": [(0, 1e-3), (10_000, 1e-4)], "entropy_coeff_schedule": [(0, 0.01), (10_000, 0.0)]},
    {"num_seeds": 2, "target_kl_div": 0.01, "member_hparams": {"lr": [1e-4, 1e-3], "clip_param": [0.1, 0.3]}},
    {"enable_amp": True, "normalize_obs": True, "lr_schedule": [(0, 1e-3), (10_000, 1e-4)]},
    {"sgd_minibatch_size": 192, "target_kl_div": 0.01},
    {"accumulate_grads": True, "target_kl_div": 0.01},
], ids=["one", "members", "amp", "unequal", "accumulate"])
def test_the_update_phase_reads_the_same_tensors_every_step(extra: dict) -> None:
    """A replayed graph reads the addresses it was captured with: whatever changes
    between steps (parameters, optimizer state, the rollout, the learning rate and
    entropy schedules, normalizer statistics, the KL stop's state) must be written in
    place into the same tensors, never handed over as new ones. Two steps after the
    warm-up read exactly the same storages from outside the phase."""
    algo = AlgorithmConfig(**{"num_envs": 32, "horizon": 16, "device": "cpu", "seed": 0, "sgd_minibatch_size": 128,
                              "num_sgd_iters": 2, **extra}).build(CartPole)
    algo.sync_kl_stop = False  # as on CUDA
    reads, phase = [], algo.run_update_phase

    def watched():
        with CaptureCheck() as check:
            out = phase()
        reads.append(check.external)
        return out

    algo.run_update_phase = watched  # step() runs its host part around it as always
    for _ in range(3):  # the first step makes the epoch's buffers: the next two must read alike
        algo.collect()
        algo.step()
    assert reads[1] == reads[2], (len(reads[1] ^ reads[2]), len(reads[1]))


@pytest.mark.parametrize("extra", [
    {},
    {"line_search": True, "normalize_obs": True, "normalize_rewards": True, "critic_minibatch_size": 64,
     "lr_schedule": [(0, 1e-3), (10_000, 1e-4)]},
    {"num_seeds": 2, "line_search": True, "member_hparams": {"max_kl": [0.01, 0.02]}},
], ids=["npg", "trpo", "members"])
def test_npgs_update_phase_reads_nothing_back_and_the_same_tensors_every_step(extra: dict) -> None:
    """NPG's ``cudagraphs`` captures all of its step's device work
    (:meth:`rlx.algorithms.npg.NPG.update_phase`: GAE, the FVP subsample, conjugate
    gradient, the line search's choice, the critic's epochs, the statistics): it runs no
    host read or upload, and two steps read the same storages from outside it."""
    from rlx import NPGConfig
    from rlx.envs import Pendulum

    algo = NPGConfig(num_envs=16, horizon=16, device="cpu", seed=0, model_config={"hiddens": [16, 16]},
                     **extra).build(Pendulum)
    assert algo.run_update_phase == algo.update_phase  # no CUDA: no graph
    reads, _, out = steps_under_capture_check(algo)
    assert reads[1] == reads[2], (len(reads[1] ^ reads[2]), len(reads[1]))
    assert "npg/step_size" in out and "losses/vf" in out


@pytest.mark.parametrize("extra", [
    {"burn_in": 4, "target_kl_div": 0.002, "normalize_obs": True, "lr_schedule": [(0, 1e-3), (10_000, 1e-4)]},
    {"num_seeds": 2, "member_hparams": {"lr": [1e-4, 1e-3]}, "target_kl_div": 0.01},
], ids=["burn_in_kl_stop", "members"])
def test_a_recurrent_policys_update_phase_reads_nothing_back_and_the_same_tensors_every_step(extra: dict) -> None:
    """A recurrent policy's step captures as a feedforward one's: its sequences (each
    started from its stored state, the burn-in refreshing it under the current weights)
    are cut and gathered on the device, the cells unrolled over ``seq_len``; the phase
    runs no host read or upload, every epoch runs (the KL stop gating on the device),
    and two steps read the same storages from outside it."""
    from rlx import RecurrentAlgorithmConfig

    config = RecurrentAlgorithmConfig(num_envs=16, horizon=16, seq_len=4, device="cpu", seed=0, sgd_minibatch_size=64,
                                      num_sgd_iters=3, model_config={"hiddens": [16], "hidden_size": 16, "cell": "lstm"},
                                      **extra)
    algo = config.build(CartPole)
    algo.sync_kl_stop = False  # as on CUDA
    reads, phases, out = steps_under_capture_check(algo)
    assert reads[1] == reads[2], (len(reads[1] ^ reads[2]), len(reads[1]))
    assert [epochs for _, epochs in phases] == [config.num_sgd_iters] * 3 and "monitors/kl_div" in out
