"""Run configs: YAML errors that name the key, overrides, the shipped configs."""

from __future__ import annotations

import pytest
import yaml

from rlx.core.config_fields import ConfigError
from rlx.config.run import RunConfig, load_run_config
from rlx.core.yaml_types import load_yaml


def test_run_config_errors_name_the_key_and_its_place(tmp_path) -> None:
    base = {"env": "rlx.envs:CartPole", "algorithm": "ppo", "config": {"num_envs": 8}, "trainer": {"max_env_steps": 100}}
    cases = [
        ({**base, "trainr": {}}, r"run.yaml.trainr: unknown top-level key; did you mean 'trainer'\?"),
        ({**base, "algorithm": "sac"}, r"run.yaml.algorithm: must be one of \['a2c', 'distillation', 'npg', 'ppo', 'recurrent_a2c', 'recurrent_ppo'\]"),
        ({**base, "config": {"num_envs": "many"}}, r"run.yaml.config.num_envs: must be an integer"),
        ({**base, "trainer": {"max_env_step": 1}}, r"run.yaml.trainer.max_env_step: unknown key; did you mean 'max_env_steps'\?"),
        ({**base, "env": "rlx.envs:NoSuchEnv"}, r"env: module 'rlx.envs' has no attribute 'NoSuchEnv'"),
        ({**base, "env": "no_such_package.envs:X"}, r"cannot import module 'no_such_package.envs'"),
        ({**base, "config": {"lr_schedule": [[0, "fast"]]}}, r"run.yaml.config.lr_schedule\[0\]\[1\]: must be a number"),
    ]
    for data, message in cases:
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(ConfigError, match=message):
            load_run_config(path)


def test_overrides_are_parsed_as_yaml_and_applied_by_dotted_path(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"env": "rlx.envs:CartPole", "config": {"num_envs": 8}, "trainer": {"max_iterations": 1}}))
    run = load_run_config(path, ["config.model_config={hiddens: [8, 8]}", "config.normalize_obs=true", "trainer.eval_every=5"])
    assert run.config.model_config == {"hiddens": [8, 8]} and run.config.normalize_obs is True
    assert run.trainer.eval_every == 5
    with pytest.raises(ConfigError, match="expected key=value"):
        load_run_config(path, ["config.num_envs"])
    assert RunConfig.from_dict(run.to_dict()).to_dict() == run.to_dict()


def test_numbers_without_a_dot_are_numbers_in_files_and_in_overrides(tmp_path) -> None:
    """PyYAML alone reads ``3e-4`` and ``1e6`` as strings; a person means numbers."""
    path = tmp_path / "run.yaml"
    path.write_text(
        "env: rlx.envs:CartPole\n"
        "config: {num_envs: 8, optimizer_config: {lr: 3e-4}, max_grad_norm: 1E1}\n"
        "trainer: {max_env_steps: 1e6, max_wall_s: 2e2, stop_at: {episodes/return_mean: 5e2}}\n"
    )
    run = load_run_config(path, ["config.gamma=9.9e-1", "config.entropy_coeff=1e-2", "trainer.max_iterations=1.0e+3"])
    assert run.config.optimizer_config["lr"] == 3e-4 and run.config.max_grad_norm == 10.0
    assert run.config.gamma == 0.99 and run.config.entropy_coeff == 0.01
    assert run.trainer.max_env_steps == 1_000_000 and isinstance(run.trainer.max_env_steps, int)
    assert run.trainer.max_iterations == 1000 and isinstance(run.trainer.max_iterations, int)
    assert run.trainer.max_wall_s == 200.0 and run.trainer.stop_at == {"episodes/return_mean": 500.0}
    with pytest.raises(ConfigError, match=r"trainer.max_env_steps: must be an integer, got 1500.5"):
        load_run_config(path, ["trainer.max_env_steps=1.5005e3"])
    # What YAML 1.1 already read stays as it was: ints, strings, dates, hex.
    assert load_yaml("a: 12\nb: 1e\nc: 0x1F\nd: '3e-4'\ne: .5\nf: -.inf") == {
        "a": 12, "b": "1e", "c": 31, "d": "3e-4", "e": 0.5, "f": float("-inf")}


@pytest.mark.parametrize(
    "name",
    [
        "cartpole_ppo", "cartpole_npg", "pendulum_ppo", "pendulum_npg",
        "cartpole_no_velocity_recurrent_ppo", "cue_recall_recurrent_ppo", "cartpole_a2c", "pendulum_a2c",
    ],
)
def test_shipped_configs_load_and_build(name: str) -> None:
    from pathlib import Path

    run = load_run_config(Path(__file__).resolve().parents[2] / "configs" / f"{name}.yaml")
    algo = run.config.build(run.env_cls)
    algo.collect()
    algo.step()
