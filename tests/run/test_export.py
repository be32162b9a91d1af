"""ONNX export: the file run in onnxruntime acts as rlx.load_policy does, normalizer included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlx
from rlx import AlgorithmConfig, RecurrentAlgorithmConfig, Trainer, TrainerConfig
from rlx.core.distributions import SquashedNormal
from rlx.envs import CartPole, CartPoleNoVelocity, Pendulum

ort = pytest.importorskip("onnxruntime")
ROWS = 4096


def _trained_run(tmp_path, config, env_cls):
    """A short run on disk (checkpoint included) with non-trivial normalizer statistics."""
    algo = config.build(env_cls)
    Trainer(algo, TrainerConfig(max_iterations=3, progress=False, tensorboard=False), run_dir=tmp_path / "run").run()
    return tmp_path / "run"


def _session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


SMALL = dict(num_envs=16, horizon=16, device="cpu", seed=0, normalize_obs=True, model_config={"hiddens": [32, 32]})


@pytest.mark.parametrize("kind", ["discrete", "continuous_clip", "continuous_tanh"])
def test_onnx_policy_matches_load_policy_on_thousands_of_observations(tmp_path, kind) -> None:
    env_cls = CartPole if kind == "discrete" else Pendulum
    extra = {"distribution_cls": SquashedNormal} if kind == "continuous_tanh" else {}
    run = _trained_run(tmp_path, AlgorithmConfig(**SMALL, **extra), env_cls)
    path = rlx.export_onnx(run, tmp_path / "policy.onnx")
    eager = rlx.load_policy(run)
    assert eager.policy.obs_normalizers["obs"].count > 16  # the normalizer has statistics to carry
    obs = 3 * eager.policy.observation_spec.rand((ROWS,)) + 1  # far from the normalizer's mean too
    (actions,) = _session(path).run(None, {"obs": obs.numpy()})
    expected = eager(obs).numpy()
    assert actions.shape == expected.shape and actions.dtype == expected.dtype
    if kind == "discrete":
        assert np.array_equal(actions, expected)
    else:
        assert np.abs(actions - expected).max() < 1e-5
        assert np.abs(actions).max() <= 2.0  # Pendulum's torque bound, clipped or squashed inside the graph


def test_onnx_takes_one_named_input_per_entry_of_a_composite_observation(tmp_path, masked_choice_env) -> None:
    algo = AlgorithmConfig(**{**SMALL, "num_envs": 8, "horizon": 4}).build(masked_choice_env)
    algo.collect()
    algo.step()
    path = rlx.export_onnx(algo.policy, tmp_path / "policy.onnx")
    session = _session(path)
    assert [i.name for i in session.get_inputs()] == ["action_mask", "obs"]
    obs = algo.policy.observation_spec.rand((ROWS,))
    (actions,) = session.run(None, {k: obs.get(k).numpy() for k in ("action_mask", "obs")})
    expected = rlx.run.export.DeployedPolicy(algo.policy)(obs).numpy()
    assert np.array_equal(actions, expected)
    mask = obs.get("action_mask").numpy()
    chosen = mask[np.arange(ROWS), actions]
    assert chosen[mask.any(-1)].all()  # the mask holds inside the graph


def test_onnx_recurrent_policy_carries_its_state_as_an_input_and_an_output(tmp_path) -> None:
    config = RecurrentAlgorithmConfig(**{**SMALL, "model_config": {"hidden_size": 16}}, seq_len=8)
    run = _trained_run(tmp_path, config, CartPoleNoVelocity)
    path = rlx.export_onnx(run, tmp_path / "policy.onnx")
    session = _session(path)
    assert [i.name for i in session.get_inputs()] == ["obs", "state", "resets"]
    assert [o.name for o in session.get_outputs()] == ["actions", "next_state"]
    eager = rlx.load_policy(run)
    n = 512
    state, resets = eager.initial_state(n), torch.ones(n, dtype=torch.bool)
    onnx_state = state.numpy()
    for step in range(4):  # both carry the same states step after step
        obs = 2 * torch.randn(n, 2)
        actions, state = eager(obs, state, resets)
        onnx_actions, onnx_state = session.run(None, {"obs": obs.numpy(), "state": onnx_state, "resets": resets.numpy()})
        assert np.array_equal(onnx_actions, actions.numpy()), step
        assert np.abs(onnx_state - state.numpy()).max() < 1e-5
        resets = torch.rand(n) < 0.2


def test_rlx_export_format_onnx(tmp_path, capsys) -> None:
    from rlx.run.cli import main

    run = _trained_run(tmp_path, AlgorithmConfig(**SMALL), CartPole)
    assert main(["export", str(run), "--format", "onnx", "--out", str(tmp_path / "p.onnx")]) == 0
    assert "ONNX, one self-contained file" in capsys.readouterr().out
    # One file, which runs alone: copied elsewhere without anything beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.onnx", "run"]
    alone = tmp_path / "robot"
    alone.mkdir()
    (alone / "policy.onnx").write_bytes((tmp_path / "p.onnx").read_bytes())
    obs = torch.randn(7, 4)
    (actions,) = _session(alone / "policy.onnx").run(None, {"obs": obs.numpy()})
    assert np.array_equal(actions, rlx.load_policy(run)(obs).numpy())
