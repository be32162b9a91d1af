"""rsl_rl's checkpoints as distillation teachers, rebuilt as rlx policies (no rsl_rl
needed): what :class:`rlx.runners.DistillationRunner` loads.

* rsl_rl 5.x: a PPO checkpoint's ``actor_state_dict`` or a distillation checkpoint's
  ``teacher_state_dict``, the network the train_cfg's ``teacher`` section describes
  (``MLPModel`` or ``CNNModel``), on its ``teacher`` observation set.
* rsl_rl 3.x/4.x (Isaac Lab's published checkpoints): a PPO checkpoint's
  ``model_state_dict`` (``actor.*``, ``actor_obs_normalizer``, ``std``) or a distillation
  one's (``teacher.*``, ``teacher_obs_normalizer``), the network of the ``policy``
  section's ``teacher_hidden_dims``, ``activation`` and ``teacher_obs_normalization``.

The tensors map as :mod:`rlx.runners.rsl_rl_checkpoint` maps them. A recurrent teacher
is refused by name (rlx's distillation takes feedforward teachers).
"""

from __future__ import annotations

from typing import Any

import torch

from rlx.config import ConfigError
from rlx.core.yaml_types import object_path
from rlx.policy import Policy
from rlx.runners.rsl_rl_checkpoint import _network, _split_5x, _split_legacy
from rlx.runners.rsl_rl_models import networks_from_rsl_rl

__all__ = ["rlx_teacher_from_rsl_rl"]


def _section(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """The teacher's network section, in rsl_rl 5.x's layout."""
    if cfg.get("teacher"):
        return dict(cfg["teacher"])
    policy = dict(cfg.get("policy") or {})
    if policy.get("class_name", "StudentTeacher") == "StudentTeacherRecurrent":
        raise ConfigError(f"{where}: a recurrent teacher (StudentTeacherRecurrent) is not supported: rlx distils "
                          "feedforward teachers")
    if "teacher_hidden_dims" not in policy:
        raise ConfigError(f"{where}: the train_cfg describes no teacher network (5.x's 'teacher' section, or 3.x/4.x's "
                          "'policy' section with teacher_hidden_dims)")
    return {"class_name": "MLPModel", "hidden_dims": list(policy["teacher_hidden_dims"]),
            "activation": policy.get("activation", "elu"),
            "obs_normalization": bool(policy.get("teacher_obs_normalization", False))}


def rlx_teacher_from_rsl_rl(state: dict[str, Any], cfg: dict[str, Any], observation_spec: Any, action_spec: Any,
                            where: str) -> dict[str, Any]:
    """An rsl_rl checkpoint ``state`` as an rlx teacher checkpoint (``config`` and the
    policy's ``algorithm.policy`` state: what :func:`rlx.algorithms.distillation.load_teacher`
    reads), its network from the distillation ``cfg`` (module docstring).

    Raises:
        ConfigError: naming ``where``: a recurrent teacher, no teacher network in ``cfg``,
            or weights that do not fit it.
    """
    section = _section(cfg, where)
    groups = list((cfg.get("obs_groups") or {}).get("teacher") or ["policy"])
    if "actor_state_dict" in state or "teacher_state_dict" in state:
        net = _split_5x(state.get("actor_state_dict") or state["teacher_state_dict"])
    elif "model_state_dict" in state:
        weights = state["model_state_dict"]
        net = _split_legacy(weights, "teacher" if any(k.startswith("teacher.") for k in weights) else "actor")[0]
    else:
        raise ConfigError(f"{where}: not an rsl_rl checkpoint (keys {sorted(state)[:8]})")
    critic = {k: v for k, v in section.items() if k != "distribution_cfg"}
    nets = networks_from_rsl_rl({"actor": section, "critic": critic}, {})
    if nets["recurrent"] or net["rnn"]:
        raise ConfigError(f"{where}: a recurrent teacher is not supported: rlx distils feedforward teachers")
    obs_groups = {"actor": groups, "critic": groups}
    policy = Policy(observation_spec, action_spec, model_cls=nets["model_cls"], model_config=nets["model_config"],
                    normalize_obs=nets["norm"][0], obs_groups=obs_groups)
    tensors: dict[str, torch.Tensor] = {}
    _network(tensors, policy, net, "actor", groups, where)
    own = policy.state_dict()
    actor = {id(p) for p in policy.model.actor_parameters()}
    needed = {n for n, p in policy.named_parameters() if id(p) in actor}
    for key in sorted(needed - set(tensors)):
        raise ConfigError(f"{where}: the checkpoint has nothing for the teacher's {key!r}: is the train_cfg's teacher "
                          "section the network it was trained with?")
    for key, value in tensors.items():
        if key not in own or tuple(value.shape) != tuple(own[key].shape):
            got = list(own[key].shape) if key in own else "no such tensor"
            raise ConfigError(f"{where}: {key!r} is {list(value.shape)} in the checkpoint, {got} in the teacher the "
                              "train_cfg describes")
        own[key] = value.to(own[key].dtype)
    policy.load_state_dict(own)
    model_cls = nets["model_cls"]
    config = {"model_cls": object_path(model_cls) if model_cls is not None else None,
              "model_config": nets["model_config"], "normalize_obs": nets["norm"][0], "obs_groups": obs_groups}
    return {"config": {"algorithm": "ppo", "config": config}, "algorithm": {"policy": policy.state_dict()}}
