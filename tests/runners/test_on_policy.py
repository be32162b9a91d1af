"""rlx.runners.OnPolicyRunner: rsl_rl's train_cfg and runner calls, trained by rlx."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch

from rlx.config import ConfigError
from rlx.examples.windy_reach import WindyReach, episode_return, pd_controller
from rlx.runners import OnPolicyRunner, algorithm_config_from_rsl_rl

#: rsl_rl 5.x's layout (mjlab's runner config as a dict).
CFG_5 = {
    "seed": 0, "num_steps_per_env": 24, "save_interval": 2, "obs_groups": {"actor": ["policy"], "critic": ["policy", "critic"]},
    "algorithm": {"class_name": "PPO", "num_learning_epochs": 5, "num_mini_batches": 4, "clip_param": 0.2,
                  "gamma": 0.99, "lam": 0.95, "value_loss_coef": 1.0, "entropy_coef": 0.005, "learning_rate": 1e-3,
                  "max_grad_norm": 1.0, "use_clipped_value_loss": True, "schedule": "adaptive", "desired_kl": 0.01},
    "actor": {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": False,
              "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 0.5}},
    "critic": {"class_name": "MLPModel", "hidden_dims": [64, 32], "activation": "elu", "obs_normalization": False},
}
#: rsl_rl 3.x / 4.x's layout (Isaac Lab's RslRlOnPolicyRunnerCfg.to_dict()).
CFG_3 = {
    "seed": 42, "device": "cpu", "num_steps_per_env": 16, "max_iterations": 1500, "empirical_normalization": False,
    "obs_groups": {"policy": ["policy"], "critic": ["policy", "critic"]}, "clip_actions": None, "save_interval": 50,
    "experiment_name": "windy", "run_name": "", "logger": "tensorboard", "resume": False, "load_run": ".*",
    "load_checkpoint": "model_.*.pt",
    "policy": {"class_name": "ActorCritic", "init_noise_std": 1.0, "noise_std_type": "scalar",
               "actor_obs_normalization": True, "critic_obs_normalization": True,
               "actor_hidden_dims": [128, 64], "critic_hidden_dims": [128, 64, 32], "activation": "tanh"},
    "algorithm": {"class_name": "PPO", "num_learning_epochs": 4, "num_mini_batches": 2, "clip_param": 0.3,
                  "gamma": 0.98, "lam": 0.9, "value_loss_coef": 0.5, "entropy_coef": 0.01, "learning_rate": 3e-4,
                  "max_grad_norm": 0.5, "use_clipped_value_loss": False, "schedule": "fixed", "desired_kl": 0.01,
                  "normalize_advantage_per_mini_batch": False, "symmetry_cfg": None, "rnd_cfg": None},
}


def test_rsl_rl_5x_fields_map_to_the_rlx_fields_that_do_the_same() -> None:
    c = algorithm_config_from_rsl_rl(CFG_5, num_envs=64)
    assert (c.num_envs, c.horizon, c.num_sgd_iters, c.sgd_minibatch_size) == (64, 24, 5, 64 * 24 // 4)
    assert (c.clip_param, c.vf_clip_param, c.vf_coeff, c.entropy_coeff) == (0.2, 0.2, 1.0, 0.005)
    assert (c.gamma, c.gae_lambda, c.max_grad_norm, c.clip_grad_per_network) == (0.99, 0.95, 1.0, True)
    assert c.kl_adaptive_lr and c.target_kl_div == 0.01 and c.kl_adaptive_lr_bounds == (1e-5, 1e-2)
    assert c.optimizer_cls is torch.optim.Adam and c.optimizer_kwargs["lr"] == 1e-3
    assert not c.normalize_rewards and not c.normalize_obs and c.seed == 0
    assert c.matmul_precision is None  # torch's setting, as under rsl_rl (not rlx's TF32 on CUDA)
    assert c.model_config == {"hiddens": [64, 64], "critic_hiddens": [64, 32], "activation_fn": "elu",
                              "log_std_init": math.log(0.5)}
    assert c.obs_groups == {"actor": ["policy"], "critic": ["policy", "critic"]}
    assert not c.compile and algorithm_config_from_rsl_rl({**CFG_5, "torch_compile_mode": "default"}, 64).compile


def test_torch_compile_mode_fuses_the_update_on_observation_groups() -> None:
    """rsl_rl's torch_compile_mode turns on rlx's compile: the whole minibatch update is one
    program, on the VecEnv's TensorDict of groups, and the runner trains."""
    runner = OnPolicyRunner(WindyReach(64, "cpu", seed=0), {**CFG_5, "torch_compile_mode": "default", "save_interval": 0},
                            device="cpu")
    assert runner.alg.compiled_update is not None, runner.alg.compile_fallback
    runner.learn(2)
    assert runner.current_learning_iteration == 1  # rsl_rl's numbering: iterations 0 and 1


def test_rsl_rl_3x_fields_map_too() -> None:
    c = algorithm_config_from_rsl_rl(CFG_3, num_envs=32)
    assert (c.horizon, c.num_sgd_iters, c.sgd_minibatch_size, c.clip_param, c.vf_clip_param) == (16, 4, 256, 0.3, None)
    assert (c.gamma, c.gae_lambda, c.vf_coeff, c.entropy_coeff, c.max_grad_norm) == (0.98, 0.9, 0.5, 0.01, 0.5)
    assert not c.kl_adaptive_lr and c.target_kl_div is None and c.optimizer_kwargs["lr"] == 3e-4
    assert c.normalize_obs and c.seed == 42
    assert c.model_config["hiddens"] == [128, 64] and c.model_config["critic_hiddens"] == [128, 64, 32]
    assert c.model_config["activation_fn"] == "tanh" and c.model_config["log_std_init"] == 0.0
    assert c.obs_groups == {"critic": ["policy", "critic"]}  # 3.x's "policy" set is rsl_rl's old name for the actor's


@pytest.mark.parametrize("change, message", [
    (lambda c: c["algorithm"].update(rnd_cfg={"weight": 1.0, "gamma": 0.9}), r"\['rnd_cfg'\]\['gamma'\]: unknown field"),
    (lambda c: c["algorithm"].update(rnd_cfg={"weight_schedule": {"mode": "cosine"}}), "'cosine' is not one of"),
    (lambda c: c["algorithm"].update(symmetry_cfg={"use_data_augmentation": True}), "data_augmentation_func'\]: is needed"),
    (lambda c: c["algorithm"].update(symmetry_cfg={"data_augmentation_func": "x:y", "mirror": 1}), r"\['mirror'\]: unknown"),
    (lambda c: c["algorithm"].update(normalize_advantage_per_mini_batch=True), "normalize_advantage_per_mini_batch"),
    (lambda c: c["algorithm"].update(num_mini_batches=5), "5 does not divide"),
    (lambda c: c["algorithm"].update(optimizer="lamb"), "'lamb' is not one of"),
    (lambda c: c["algorithm"].update(class_name="Distillation"), "'Distillation' is not supported"),
    (lambda c: c["critic"].update(activation="relu"), "differs from the actor's 'elu'"),
    (lambda c: c["critic"].update(obs_normalization=True), "observation normalization differ"),
    (lambda c: c.update(torch_compile_mode="reduce-overhead"), "AlgorithmConfig.cudagraphs instead"),
    (lambda c: c.update(torch_compile_mode="fast"), "'fast' is not one of"),
])
def test_a_field_rlx_cannot_honour_is_refused_by_name(change, message: str) -> None:
    cfg = copy.deepcopy(CFG_5)
    change(cfg)
    with pytest.raises(ConfigError, match=message):
        algorithm_config_from_rsl_rl(cfg, num_envs=64)


def test_learn_save_load_and_deploy_like_rsl_rls_runner(tmp_path: Path) -> None:
    env = WindyReach(64, "cpu", seed=0)
    runner = OnPolicyRunner(env, CFG_5, log_dir=str(tmp_path), device="cpu")
    runner.learn(3, init_at_random_ep_len=True)
    assert runner.current_learning_iteration == 2  # rsl_rl's numbering: iterations 0, 1, 2
    assert {p.name for p in tmp_path.glob("model_*.pt")} == {"model_0.pt", "model_2.pt"}
    assert list(tmp_path.glob("events.out.tfevents.*"))  # TensorBoard, rsl_rl's default logger
    other = OnPolicyRunner(WindyReach(64, "cpu", seed=1), CFG_5, log_dir=None, device="cpu")
    other.load(str(tmp_path / "model_2.pt"))
    assert other.current_learning_iteration == 2
    for a, b in zip(runner.alg.policy.state_dict().values(), other.alg.policy.state_dict().values()):
        assert torch.equal(a, b)
    for a, b in zip(runner.alg.optimizer.state.values(), other.alg.optimizer.state.values()):
        assert all(torch.equal(a[k], b[k]) for k in ("exp_avg", "exp_avg_sq"))
    assert other.alg.lr == runner.alg.lr  # the adaptive schedule's LR resumes
    obs = env.get_observations()
    actions = runner.get_inference_policy("cpu")(obs)
    assert actions.shape == (64, 2) and torch.isfinite(actions).all()
    runner.export_policy_to_jit(str(tmp_path / "exported"))
    jit = torch.jit.load(str(tmp_path / "exported" / "policy.pt"))
    torch.testing.assert_close(jit(obs.get("policy")), actions)


def test_the_runner_refuses_a_logger_it_cannot_write() -> None:
    with pytest.raises(ConfigError, match="train_cfg\\['logger'\\]: 'neptune' is not supported"):
        OnPolicyRunner(WindyReach(64, "cpu", seed=0), {**CFG_5, "logger": "neptune"}, device="cpu")


@pytest.mark.slow
def test_the_runner_learns_windy_reach() -> None:
    env = WindyReach(512, "cpu", seed=0)
    runner = OnPolicyRunner(env, {**CFG_5, "save_interval": 0}, device="cpu")
    runner.learn(40)
    random = episode_return(lambda obs: torch.randn(obs.batch_size[0], 2), 512, "cpu")
    pd = episode_return(pd_controller, 512, "cpu")
    score = (episode_return(runner.get_inference_policy(), 512, "cpu") - random) / (pd - random)
    assert score > 0.8, f"normalized return {score:.3f} after 40 iterations (random 0, PD controller 1)"


def test_wandb_logs_every_iterations_statistics_and_the_envs_log(tmp_path: Path, monkeypatch) -> None:
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")  # W&B's offline mode: nothing leaves the machine
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = {**CFG_5, "logger": "wandb", "wandb_project": "rlx-test", "run_name": "windy"}
    runner = OnPolicyRunner(WindyReach(64, "cpu", seed=0), cfg, log_dir=str(tmp_path), device="cpu")
    runner.learn(2)
    run = runner._wandb
    assert run.project == "rlx-test" and run.name == "windy" and run.offline
    summary = dict(run.summary)
    assert summary["env_steps"] == 2 * 64 * 24 and math.isfinite(summary["losses/total"])
    assert 0.0 < summary["env/distance_to_goal"] < 3.0  # the env's extras["log"], as rsl_rl logs it
    assert run.config["train_cfg"]["algorithm"]["desired_kl"] == 0.01
    runner.close()
    assert list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))  # written to disk, for `wandb sync`
    assert wandb.run is None


def test_rlx_train_takes_an_rsl_rl_train_cfg(tmp_path: Path, capsys) -> None:
    """``rlx train RUN_CONFIG --rsl-rl-cfg FILE``: the env, num_envs and device from the run
    config, PPO from rsl_rl's dict, its save_interval and max_iterations for the trainer."""
    import yaml

    from rlx.run.checkpoint import latest_checkpoint, load_checkpoint
    from rlx.run.cli import main

    run_config = tmp_path / "windy.yaml"
    run_config.write_text(
        "env: rlx.envs:RslRlVecEnv\n"
        "env_kwargs: {make_env: rlx.examples.windy_reach:WindyReach}\n"
        "algorithm: ppo\n"
        "config: {num_envs: 64, device: cpu}\n"
        "trainer: {max_iterations: 100, eval_every: 0}\n"
    )
    rsl_rl = tmp_path / "agent.yaml"
    rsl_rl.write_text(yaml.safe_dump({**CFG_5, "max_iterations": 3, "save_interval": 2}))
    run_dir = tmp_path / "run"
    assert main(["train", str(run_config), "--rsl-rl-cfg", str(rsl_rl), "--run-dir", str(run_dir), "--threads", "1"]) == 0
    assert "after 4608 env steps" in capsys.readouterr().out  # 3 iterations of 64 x 24
    saved = load_checkpoint(latest_checkpoint(run_dir))["config"]
    assert saved["config"]["clip_grad_per_network"] and saved["config"]["kl_adaptive_lr_per_minibatch"]
    assert saved["config"]["horizon"] == 24 and saved["trainer"]["checkpoint_every"] == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**CFG_5, "algorithm": {**CFG_5["algorithm"], "rnd_cfg": {"weight": 1, "gamma": 0.9}}}))
    assert main(["train", str(run_config), "--rsl-rl-cfg", str(bad), "--run-dir", str(tmp_path / "bad")]) == 2
    assert "train_cfg['algorithm']['rnd_cfg']" in capsys.readouterr().err


SYMMETRY = {"use_data_augmentation": True, "use_mirror_loss": True, "mirror_loss_coeff": 0.5,
            "data_augmentation_func": "rlx.examples.windy_reach:rsl_rl_augmentation"}


def test_rsl_rls_symmetry_cfg_maps_to_the_mirror_augmentation_and_mirror_loss() -> None:
    from tensordict import TensorDict

    from rlx.examples.windy_reach import mirror, rsl_rl_augmentation

    cfg = copy.deepcopy(CFG_5)
    cfg["algorithm"]["symmetry_cfg"] = SYMMETRY
    c = algorithm_config_from_rsl_rl(cfg, num_envs=64)
    assert c.symmetry_augment and c.mirror_loss_coeff == 0.5
    obs = TensorDict({"policy": torch.randn(5, 4), "critic": torch.randn(5, 3)}, batch_size=[5])
    actions = torch.randn(5, 2)
    (o, a), (o2, a2) = c.symmetry_fn(obs, actions), mirror(obs, actions)
    assert torch.equal(a, a2) and torch.equal(o["policy"], o2["policy"]) and torch.equal(o["critic"], o2["critic"])
    off = copy.deepcopy(cfg)
    off["algorithm"]["symmetry_cfg"] = {**SYMMETRY, "use_mirror_loss": False, "data_augmentation_func": rsl_rl_augmentation}
    c = algorithm_config_from_rsl_rl(off, num_envs=64)
    assert c.symmetry_augment and c.mirror_loss_coeff is None and "rsl_rl_augmentation" in repr(c.symmetry_fn)


def test_the_runner_trains_with_rsl_rls_symmetry_and_refuses_several_copies(tmp_path: Path) -> None:
    cfg = copy.deepcopy(CFG_5)
    cfg["algorithm"]["symmetry_cfg"] = SYMMETRY
    runner = OnPolicyRunner(WindyReach(64, "cpu", seed=0), cfg, log_dir=None, device="cpu")
    runner.learn(2)
    assert runner.alg.loss_fields._fields[-1] == "mirror"

    def three_copies(env=None, obs=None, actions=None):
        return torch.cat([obs, obs, obs]), torch.cat([actions, actions, actions])

    cfg["algorithm"]["symmetry_cfg"] = {**SYMMETRY, "data_augmentation_func": three_copies}
    with pytest.raises(ConfigError, match="returned 3 copies of a batch of 16; rlx mirrors with one symmetry"):
        OnPolicyRunner(WindyReach(64, "cpu", seed=0), cfg, log_dir=None, device="cpu")


RND_CFG = {"weight": 0.5, "weight_schedule": {"mode": "linear", "initial_step": 10, "final_step": 100, "final_value": 0.1},
           "reward_normalization": True, "state_normalization": True, "learning_rate": 1e-3, "num_outputs": 8,
           "predictor_hidden_dims": [-1, 32], "target_hidden_dims": [-1, 32]}


def test_rsl_rls_rnd_cfg_maps_to_rlxs_rnd_and_trains() -> None:
    cfg = copy.deepcopy(CFG_5)
    cfg["obs_groups"]["rnd_state"] = ["critic"]
    cfg["algorithm"]["rnd_cfg"] = RND_CFG
    c = algorithm_config_from_rsl_rl(cfg, num_envs=64)
    assert c.rnd == {"weight": 0.5, "learning_rate": 1e-3, "embedding_dim": 8, "activation": "elu",
                     "predictor_hiddens": [-1, 32], "target_hiddens": [-1, 32], "normalize_state": True,
                     "normalize_reward": True, "obs_keys": ["critic"],
                     "weight_schedule": [(0, 0.5), (640, 0.5), (6400, 0.1)], "weight_schedule_kind": "interp"}
    runner = OnPolicyRunner(WindyReach(64, "cpu", seed=0), cfg, log_dir=None, device="cpu")
    runner.learn(2)
    rnd = runner.alg.rnd
    assert rnd.predictor[0].in_features == 3 and rnd.predictor[0].out_features == 3  # -1: the state's size
    assert rnd.schedule.value(64 * 55) == pytest.approx(0.5 + (0.1 - 0.5) * 45 / 90)  # rsl_rl's step 55


class _ResettingWindyReach(WindyReach):
    """WindyReach with a ``reset()`` that restarts every episode clock, as Isaac Lab's
    wrapper does: the reset rlx opens with would undo ``init_at_random_ep_len``."""

    def reset(self):
        self.episode_length_buf = torch.zeros_like(self.episode_length_buf)
        return self.get_observations()


def test_init_at_random_ep_len_survives_the_reset_the_first_collect_opens_with() -> None:
    """rsl_rl's exploration trick spreads the episode clocks; here the measured quantity:
    after one 24-step collect the clocks are spread over many values, where a reset after
    the draw would leave them all at 24."""
    env = _ResettingWindyReach(256, "cpu", seed=0)
    runner = OnPolicyRunner(env, CFG_5, log_dir=None, device="cpu")
    runner.learn(1, init_at_random_ep_len=True)
    clocks = env.episode_length_buf
    assert len(torch.unique(clocks)) > 50, torch.unique(clocks)
    plain = _ResettingWindyReach(256, "cpu", seed=0)
    OnPolicyRunner(plain, CFG_5, log_dir=None, device="cpu").learn(1)
    assert torch.unique(plain.episode_length_buf).tolist() == [24]


def test_the_rsl_rl_attributes_scripts_read_and_the_git_state_they_log(tmp_path: Path) -> None:
    """Isaac Lab's train script calls ``runner.add_git_repo_to_log(__file__)`` before
    ``learn``; scripts read ``is_distributed`` and ``alg.learning_rate``."""
    runner = OnPolicyRunner(WindyReach(16, "cpu", seed=0), CFG_5, log_dir=str(tmp_path), device="cpu")
    runner.add_git_repo_to_log(__file__)  # this test file: inside rlx's repository
    outside = tmp_path / "not_a_repo"
    outside.mkdir()
    runner.add_git_repo_to_log(str(outside / "train.py"))  # outside any repository: nothing written
    assert runner.is_distributed is False
    assert runner.alg.learning_rate == runner.alg.lr == CFG_5["algorithm"]["learning_rate"]
    runner.learn(1)
    diffs = list((tmp_path / "git").glob("*.diff"))
    if Path(__file__).resolve().parents[2].joinpath(".git").exists():
        assert len(diffs) == 1  # rlx's file and this one share the repository
        text = diffs[0].read_text()
        assert "--- git status ---" in text and "--- git diff ---" in text

