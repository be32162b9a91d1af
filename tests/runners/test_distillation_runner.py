"""rlx.runners.DistillationRunner: rsl_rl's distillation train_cfg and runner calls, trained
by rlx: a teacher from rlx's runner or from rsl_rl 5.x, a student that sees less."""

from __future__ import annotations

import contextlib
import copy
import io
from pathlib import Path

import pytest
import torch

from rlx.config import ConfigError
from rlx.examples.windy_reach import WindyReach, episode_return, pd_controller
from rlx.runners import (
    DistillationRunner,
    OnPolicyRunner,
    distillation_config_from_rsl_rl,
)

#: A PPO teacher whose actor sees the privileged group (wind and mass) too.
TEACHER_CFG = {
    "seed": 0, "num_steps_per_env": 24, "save_interval": 0,
    "obs_groups": {"actor": ["policy", "critic"], "critic": ["policy", "critic"]},
    "algorithm": {"class_name": "PPO", "num_learning_epochs": 5, "num_mini_batches": 4, "clip_param": 0.2,
                  "gamma": 0.99, "lam": 0.95, "value_loss_coef": 1.0, "entropy_coef": 0.005, "learning_rate": 1e-3,
                  "max_grad_norm": 1.0, "use_clipped_value_loss": True, "schedule": "adaptive", "desired_kl": 0.01},
    "actor": {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": False,
              "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
    "critic": {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": False},
}
#: rsl_rl 5.x's distillation layout: the student sees the policy group alone.
DISTILL_CFG = {
    "seed": 1, "num_steps_per_env": 24, "save_interval": 5, "max_iterations": 10, "logger": "tensorboard",
    "obs_groups": {"student": ["policy"], "teacher": ["policy", "critic"]},
    "algorithm": {"class_name": "Distillation", "num_learning_epochs": 2, "gradient_length": 6, "learning_rate": 1e-3,
                  "max_grad_norm": 1.0, "loss_type": "mse", "optimizer": "adam"},
    "student": {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": False,
                "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 0.1}},
    "teacher": {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": False,
                "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 0.1}},
}
#: rsl_rl 3.x / 4.x's (Isaac Lab's RslRlDistillationRunnerCfg.to_dict()).
DISTILL_CFG_3 = {
    "seed": 42, "device": "cpu", "num_steps_per_env": 16, "max_iterations": 300, "empirical_normalization": False,
    "obs_groups": {"policy": ["policy"], "teacher": ["policy", "critic"]}, "clip_actions": None, "save_interval": 50,
    "experiment_name": "windy_distill", "run_name": "", "logger": "tensorboard", "resume": False,
    "policy": {"class_name": "StudentTeacher", "init_noise_std": 0.2, "noise_std_type": "scalar",
               "student_obs_normalization": True, "teacher_obs_normalization": False,
               "student_hidden_dims": [128, 64], "teacher_hidden_dims": [256, 128], "activation": "tanh"},
    "algorithm": {"class_name": "Distillation", "num_learning_epochs": 3, "learning_rate": 5e-4, "gradient_length": 32,
                  "max_grad_norm": 2.0, "loss_type": "huber", "optimizer": "adamw"},
}


def _normalized(act) -> float:
    """0: random actions, 1: the PD controller."""
    random = episode_return(lambda obs: torch.randn(obs.batch_size[0], 2), 512, "cpu")
    pd = episode_return(pd_controller, 512, "cpu")
    return (episode_return(act, 512, "cpu") - random) / (pd - random)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    """An rlx OnPolicyRunner checkpoint of a trained privileged teacher."""
    path = tmp_path_factory.mktemp("teacher") / "model_30.pt"
    with contextlib.redirect_stdout(io.StringIO()):
        runner = OnPolicyRunner(WindyReach(256, "cpu", seed=0), TEACHER_CFG, device="cpu")
        runner.learn(30)
    runner.save(str(path))
    return path


def test_rsl_rl_5x_and_3x_distillation_fields_map_to_the_rlx_fields_that_do_the_same() -> None:
    five = distillation_config_from_rsl_rl(DISTILL_CFG, 256, teacher="t.pt")
    assert (five.horizon, five.num_sgd_iters, five.sgd_minibatch_size) == (24, 2, 6 * 256)
    assert five.max_grad_norm == pytest.approx(1.0 / 6)  # rsl_rl clips the sum of 6 per-step losses' gradients
    assert five.obs_groups == {"actor": ["policy"], "critic": ["policy"]}
    assert five.model_config["log_std_init"] == pytest.approx(-2.302585)
    assert (five.loss_type, five.optimizer_config["lr"], five.teacher) == ("mse", 1e-3, "t.pt")
    three = distillation_config_from_rsl_rl(DISTILL_CFG_3, 64)
    assert three.model_config["hiddens"] == [128, 64] and three.model_config["activation_fn"] == "tanh"
    assert three.normalize_obs and three.loss_type == "huber" and three.optimizer_cls is torch.optim.AdamW
    assert three.sgd_minibatch_size == 16 * 64  # a gradient_length over the rollout: the whole rollout
    assert three.obs_groups == {"actor": ["policy"], "critic": ["policy"]} and three.num_sgd_iters == 3
    # torch_compile_mode turns on rlx's compile (the student's whole minibatch update), as for PPO.
    assert not five.compile and distillation_config_from_rsl_rl({**DISTILL_CFG, "torch_compile_mode": "default"}, 256).compile


@pytest.mark.parametrize("change, message", [
    (lambda c: c["algorithm"].update(class_name="PPO"), "'PPO': a DistillationRunner trains 'Distillation'"),
    (lambda c: c["algorithm"].update(rnd_cfg={"weight": 1.0}), "'rnd_cfg'\\]: is not compatible with Distillation"),
    (lambda c: c["algorithm"].update(bogus=1), "'bogus'\\]: unknown Distillation field"),
    (lambda c: c["student"].update(class_name="RNNModel"), "'RNNModel' is not supported"),
    (lambda c: c["algorithm"].update(optimizer="lion"), "'lion' is not one of"),
    (lambda c: c.update(torch_compile_mode="reduce-overhead"), "AlgorithmConfig.cudagraphs instead"),
])
def test_a_distillation_field_rlx_cannot_honour_is_refused_by_name(change, message: str) -> None:
    cfg = copy.deepcopy(DISTILL_CFG)
    change(cfg)
    with pytest.raises(ConfigError, match=message):
        DistillationRunner(WindyReach(16, "cpu", seed=0), cfg, device="cpu")


def test_the_ppo_runner_points_a_distillation_cfg_to_the_distillation_runner() -> None:
    with pytest.raises(ConfigError, match="rlx.runners.DistillationRunner"):
        OnPolicyRunner(WindyReach(16, "cpu", seed=0), DISTILL_CFG | {"actor": {}, "critic": {}}, device="cpu")


def test_a_student_distils_an_rlx_teacher_saves_resumes_and_exports(teacher: Path, tmp_path: Path) -> None:
    """Measured: the teacher (30 PPO iterations on everything) scores 1.03; the student,
    on the policy group alone, 1.01 after 10 iterations of distillation."""
    runner = DistillationRunner(WindyReach(256, "cpu", seed=1), DISTILL_CFG, log_dir=str(tmp_path), device="cpu")
    with pytest.raises(ValueError, match="Teacher model parameters not loaded"):
        runner.learn(1)
    runner.load(str(teacher))
    with contextlib.redirect_stdout(io.StringIO()):
        runner.learn(10)
    assert {p.name for p in tmp_path.glob("model_*.pt")} == {"model_0.pt", "model_5.pt", "model_9.pt"}
    assert runner.alg.policy.actor_obs_keys == ["policy"]  # it deploys without the privileged group
    teacher_score = _normalized(lambda o: runner.alg.teacher_actions(o))
    student_score = _normalized(runner.get_inference_policy())
    print(f"teacher {teacher_score:.3f}, student {student_score:.3f}")
    assert student_score > 0.9 * teacher_score, (student_score, teacher_score)

    # Resume from the runner's own checkpoint, the teacher's file gone: it was saved inside.
    moved = tmp_path / "gone.pt"
    teacher.rename(moved)
    try:
        other = DistillationRunner(WindyReach(256, "cpu", seed=1), DISTILL_CFG, device="cpu")
        other.load(str(tmp_path / "model_5.pt"))
    finally:
        moved.rename(teacher)
    again = DistillationRunner(WindyReach(256, "cpu", seed=1), DISTILL_CFG, device="cpu")
    again.load(str(teacher))
    with contextlib.redirect_stdout(io.StringIO()):
        again.learn(5)
    again.save(str(tmp_path / "again.pt"))
    other.load(str(tmp_path / "again.pt"))
    # Everything the algorithm holds comes back (an rsl_rl VecEnv's simulator state is the
    # env's, not rlx's: tests/algorithms/test_distillation.py resumes on a restorable env
    # and continues bit for bit).
    assert other.current_learning_iteration == 4 and other.alg.env_steps == again.alg.env_steps
    for a, b in zip(again.alg.policy.state_dict().values(), other.alg.policy.state_dict().values()):
        assert torch.equal(a, b)
    for a, b in zip(again.alg.optimizer.state.values(), other.alg.optimizer.state.values()):
        assert all(torch.equal(a[k], b[k]) for k in ("step", "exp_avg", "exp_avg_sq"))
    with contextlib.redirect_stdout(io.StringIO()):
        other.learn(1)
    assert other.current_learning_iteration == 4  # rsl_rl's numbering: a new learn starts at the last iteration

    runner.export_policy_to_jit(str(tmp_path / "exported"))
    obs = runner.env.get_observations()
    jit = torch.jit.load(str(tmp_path / "exported" / "policy.pt"))
    torch.testing.assert_close(jit(obs.get("policy")), runner.get_inference_policy()(obs))


def test_teachers_of_rsl_rl_5x_its_ppo_and_its_own_distillation_checkpoints(tmp_path: Path) -> None:
    """rsl_rl's own runners train a teacher and distil it with the same train_cfg; rlx's
    DistillationRunner takes either checkpoint, and its teacher acts as rsl_rl's does."""
    pytest.importorskip("rsl_rl")
    from rsl_rl.runners import DistillationRunner as RslRlDistillationRunner
    from rsl_rl.runners import OnPolicyRunner as RslRlRunner

    torch.manual_seed(0)
    with contextlib.redirect_stdout(io.StringIO()):
        ppo = RslRlRunner(WindyReach(64, "cpu", seed=0), copy.deepcopy(TEACHER_CFG), log_dir=None, device="cpu")
        ppo.learn(2)
        ppo.save(str(tmp_path / "ppo.pt"))
        theirs = RslRlDistillationRunner(WindyReach(64, "cpu", seed=0), copy.deepcopy(DISTILL_CFG), log_dir=None,
                                         device="cpu")
        theirs.load(str(tmp_path / "ppo.pt"))
        theirs.learn(1)
        theirs.save(str(tmp_path / "distilled.pt"))
    expected = ppo.get_inference_policy("cpu")
    for checkpoint in ("ppo.pt", "distilled.pt"):
        runner = DistillationRunner(WindyReach(64, "cpu", seed=0), DISTILL_CFG, device="cpu")
        runner.load(str(tmp_path / checkpoint))
        obs = runner.env.get_observations()
        with torch.no_grad():
            torch.testing.assert_close(runner.alg.teacher_actions(obs), expected(obs), msg=checkpoint)
        with contextlib.redirect_stdout(io.StringIO()):
            runner.learn(1)
    torch.save({"model_state_dict": {}, "iter": 0}, tmp_path / "old.pt")
    with pytest.raises(ConfigError, match="the checkpoint has nothing for the teacher's 'model.actor.0.bias'"):
        runner.load(str(tmp_path / "old.pt"))


def test_rlx_train_distils_from_an_rsl_rl_distillation_cfg(teacher: Path, tmp_path: Path, capsys) -> None:
    """``rlx train RUN_CONFIG --rsl-rl-cfg FILE`` with a Distillation train_cfg: the run
    config gives the env, num_envs, the device, the trainer and ``config.teacher``."""
    import yaml

    from rlx.run.checkpoint import latest_checkpoint, load_checkpoint
    from rlx.run.cli import main

    run_config = tmp_path / "windy.yaml"
    run_config.write_text(
        "env: rlx.envs:RslRlVecEnv\n"
        "env_kwargs: {make_env: rlx.examples.windy_reach:WindyReach}\n"
        "algorithm: distillation\n"
        f"config: {{num_envs: 64, device: cpu, teacher: {teacher}}}\n"
        "trainer: {max_iterations: 100, eval_every: 0}\n"
    )
    agent = tmp_path / "distill.yaml"
    agent.write_text(yaml.safe_dump({**DISTILL_CFG, "max_iterations": 3, "save_interval": 3}))
    run_dir = tmp_path / "run"
    assert main(["train", str(run_config), "--rsl-rl-cfg", str(agent), "--run-dir", str(run_dir), "--threads", "1"]) == 0
    assert "after 4608 env steps" in capsys.readouterr().out  # 3 iterations of 64 x 24
    saved = load_checkpoint(latest_checkpoint(run_dir))["config"]
    assert saved["algorithm"] == "distillation" and saved["config"]["sgd_minibatch_size"] == 6 * 64
    assert saved["config"]["obs_groups"] == {"actor": ["policy"], "critic": ["policy"]}
    no_teacher = tmp_path / "no_teacher.yaml"
    no_teacher.write_text(run_config.read_text().replace(f", teacher: {teacher}", "").replace("distillation", "ppo"))
    assert main(["train", str(no_teacher), "--rsl-rl-cfg", str(agent), "--run-dir", str(tmp_path / "bad")]) == 2
    assert "needs the teacher's checkpoint as the run config's config.teacher" in capsys.readouterr().err


@pytest.mark.parametrize("normalized", [False, True])
def test_rsl_rl_3x_4x_checkpoints_are_teachers_too_without_rsl_rl(tmp_path: Path, normalized: bool) -> None:
    """Isaac Lab's published checkpoints are rsl_rl 3.x/4.x's (``model_state_dict``:
    ``actor.*``, ``actor_obs_normalizer``, ``std``). One is written here from an rlx
    runner's actor, in that layout; the DistillationRunner rebuilds the teacher from the
    ``policy`` section's ``teacher_hidden_dims`` and acts as the actor did (exactly:
    the normalizer's statistics carry over, and rsl_rl's epsilon does not enter)."""
    cfg = copy.deepcopy(TEACHER_CFG)
    cfg["actor"]["obs_normalization"] = cfg["critic"]["obs_normalization"] = normalized
    ppo = OnPolicyRunner(WindyReach(64, "cpu", seed=0), cfg, device="cpu")
    with contextlib.redirect_stdout(io.StringIO()):
        ppo.learn(2)
    policy = ppo.alg.algorithm.policy
    legacy = {f"actor.{k.removeprefix('model.actor.')}": v for k, v in policy.state_dict().items()
              if k.startswith("model.actor.")}
    legacy["std"] = policy.model.log_std.detach().exp()
    # rlx's first layer reads the groups sorted (critic 3, policy 4); rsl_rl's in obs_groups order (policy, critic).
    first = legacy["actor.0.weight"]
    legacy["actor.0.weight"] = torch.cat([first[:, 3:], first[:, :3]], dim=1)
    if normalized:  # rsl_rl normalizes the concatenated groups (obs_groups order: policy, critic)
        rms = [policy.obs_normalizers[k] for k in ("policy", "critic")]
        legacy["actor_obs_normalizer._mean"] = torch.cat([r.mean for r in rms]).float()[None]
        legacy["actor_obs_normalizer._var"] = torch.cat([r.var for r in rms]).float()[None]
        legacy["actor_obs_normalizer._std"] = legacy["actor_obs_normalizer._var"].sqrt()
        legacy["actor_obs_normalizer.count"] = rms[0].count.clone().long()
    torch.save({"model_state_dict": legacy, "iter": 2, "infos": None}, tmp_path / "isaaclab.pt")
    runner = DistillationRunner(WindyReach(64, "cpu", seed=0), {**DISTILL_CFG_3, "policy": {
        **DISTILL_CFG_3["policy"], "teacher_hidden_dims": [64, 64], "activation": "elu",
        "teacher_obs_normalization": normalized}}, device="cpu")
    runner.load(str(tmp_path / "isaaclab.pt"))
    obs = runner.env.get_observations()
    with torch.no_grad():
        expected = policy.sample_actions(ppo.alg.env.groups(obs), deterministic=True).env_actions
        torch.testing.assert_close(runner.alg.teacher_actions(obs), expected, atol=1e-6, rtol=1e-6)
    with contextlib.redirect_stdout(io.StringIO()):
        runner.learn(1)
