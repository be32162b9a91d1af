"""The agent config of the example scripts: what Isaac Lab's ``RslRlOnPolicyRunnerCfg``
for rsl_rl 5 gives with ``to_dict()``, unset sections included (``policy: {}``)."""

from __future__ import annotations

import copy
from typing import Any

#: ``agent_cfg.to_dict()`` of a WindyReach task.
AGENT_CFG: dict[str, Any] = {
    "class_name": "OnPolicyRunner", "seed": 42, "device": "cpu", "num_steps_per_env": 24, "max_iterations": 50,
    "empirical_normalization": {}, "policy": {}, "clip_actions": None, "check_for_nan": True,
    "save_interval": 25, "experiment_name": "windy_reach", "run_name": "", "logger": "tensorboard",
    "neptune_project": "isaaclab", "wandb_project": "isaaclab", "resume": False, "load_run": ".*",
    "load_checkpoint": "model_.*.pt", "obs_groups": {"actor": ["policy"], "critic": ["policy", "critic"]},
    "actor": {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": False,
              "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 0.5, "std_type": "scalar"}},
    "critic": {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": False},
    "algorithm": {"class_name": "PPO", "num_learning_epochs": 5, "num_mini_batches": 4, "learning_rate": 1e-3,
                  "schedule": "adaptive", "gamma": 0.99, "lam": 0.95, "entropy_coef": 0.005, "desired_kl": 0.01,
                  "max_grad_norm": 1.0, "value_loss_coef": 1.0, "use_clipped_value_loss": True, "clip_param": 0.2,
                  "normalize_advantage_per_mini_batch": False, "rnd_cfg": None, "symmetry_cfg": None},
}


def agent_cfg() -> dict[str, Any]:
    """A fresh copy of :data:`AGENT_CFG`."""
    return copy.deepcopy(AGENT_CFG)


def latest_checkpoint(log_root: str) -> str:
    """The newest run's last ``model_<it>.pt`` under ``log_root`` (Isaac Lab's
    ``get_checkpoint_path`` with its default ``load_run`` and ``load_checkpoint``)."""
    import os
    import re

    runs = sorted(d for d in os.listdir(log_root) if os.path.isdir(os.path.join(log_root, d)))
    if not runs:
        raise FileNotFoundError(f"no run in {log_root}")
    run = os.path.join(log_root, runs[-1])
    models = [f for f in os.listdir(run) if re.fullmatch(r"model_\d+\.pt", f)]
    if not models:
        raise FileNotFoundError(f"no model_<it>.pt in {run}")
    return os.path.join(run, max(models, key=lambda f: int(f[6:-3])))
