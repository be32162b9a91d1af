"""Run configs: YAML errors that name the key, overrides, the shipped configs."""

from __future__ import annotations

import pytest
import yaml

from rlx.config_fields import ConfigError
from rlx.run_config import RunConfig, load_run_config


def test_run_config_errors_name_the_key_and_its_place(tmp_path) -> None:
    base = {"env": "rlx.envs:CartPole", "algorithm": "ppo", "config": {"num_envs": 8}, "trainer": {"max_env_steps": 100}}
    cases = [
        ({**base, "trainr": {}}, r"unknown top-level key\(s\) \['trainr'\]"),
        ({**base, "algorithm": "sac"}, r"run.yaml.algorithm: must be one of \['a2c', 'npg', 'ppo', 'recurrent_a2c', 'recurrent_ppo'\]"),
        ({**base, "config": {"num_envs": "many"}}, r"run.yaml.config.num_envs: must be an integer"),
        ({**base, "trainer": {"max_env_step": 1}}, r"run.yaml.trainer.max_env_step: unknown key"),
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


@pytest.mark.parametrize(
    "name",
    [
        "cartpole_ppo", "cartpole_npg", "pendulum_ppo", "pendulum_npg",
        "cartpole_no_velocity_recurrent_ppo", "cue_recall_recurrent_ppo", "cartpole_a2c", "pendulum_a2c",
    ],
)
def test_shipped_configs_load_and_build(name: str) -> None:
    from pathlib import Path

    run = load_run_config(Path(__file__).resolve().parents[1] / "configs" / f"{name}.yaml")
    algo = run.config.build(run.env_cls)
    algo.collect()
    algo.step()
