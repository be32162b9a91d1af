"""rsl_rl's checkpoints, read into an rlx runner's policy: to play them, to resume from
them, and (through the runner) as teachers.

* rsl_rl 5.x (``actor_state_dict``, ``critic_state_dict``): ``MLPModel``, ``RNNModel``
  and ``CNNModel`` networks, the Gaussian's ``std_param`` (or ``log_std_param``) and
  each network's ``obs_normalizer``.
* rsl_rl 3.x/4.x (``model_state_dict``; Isaac Lab's published checkpoints):
  ``ActorCritic`` (``actor.*``, ``critic.*``, ``std`` or ``log_std``,
  ``actor_obs_normalizer``, ``critic_obs_normalizer``) and ``ActorCriticRecurrent``
  (``memory_a``, ``memory_c``).

The runner must be built from the train_cfg the checkpoint was trained with (its
networks' shapes must match). rsl_rl feeds a network its groups concatenated in
``obs_groups`` order, rlx in sorted key order: the first layer's columns and the
normalizer statistics are split per group and put in rlx's order. The std becomes rlx's
log-std. What is not carried over: the optimizer's moments (rsl_rl's are those of its
parameter layout, ``std`` rather than ``log std``), so a resumed run restarts Adam's
moments with the checkpoint's learning rate.
"""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor

from rlx.config import ConfigError

__all__ = ["is_rsl_rl_checkpoint", "rsl_rl_to_rlx"]


def is_rsl_rl_checkpoint(state: dict[str, Any]) -> bool:
    """Whether ``state`` is an rsl_rl runner checkpoint (5.x or 3.x/4.x)."""
    return "actor_state_dict" in state or "model_state_dict" in state


def _split_5x(sd: dict[str, Tensor]) -> dict[str, dict[str, Tensor]]:
    """A 5.x network's state by part: ``mlp``, ``rnn``, ``cnns``, ``norm``, ``std``."""
    parts: dict[str, dict[str, Tensor]] = {"mlp": {}, "rnn": {}, "cnns": {}, "norm": {}, "std": {}}
    for key, value in sd.items():
        head, _, rest = key.partition(".")
        if head == "mlp":
            parts["mlp"][rest] = value
        elif head == "rnn":
            parts["rnn"][rest.removeprefix("rnn.")] = value
        elif head == "cnns":
            parts["cnns"][rest] = value
        elif head == "obs_normalizer":
            parts["norm"][rest] = value
        elif head == "distribution":
            parts["std"][rest] = value
    return parts


def _split_legacy(sd: dict[str, Tensor], actor_head: str = "actor"
                  ) -> tuple[dict[str, dict[str, Tensor]], dict[str, dict[str, Tensor]]]:
    """A 3.x/4.x ``model_state_dict`` as two 5.x-like networks; ``actor_head="teacher"``
    takes a ``StudentTeacher``'s teacher as the actor."""
    actor: dict[str, dict[str, Tensor]] = {"mlp": {}, "rnn": {}, "cnns": {}, "norm": {}, "std": {}}
    critic: dict[str, dict[str, Tensor]] = {"mlp": {}, "rnn": {}, "cnns": {}, "norm": {}, "std": {}}
    memory = {"actor": "memory_a", "teacher": "memory_t"}.get(actor_head, f"memory_{actor_head[0]}")
    for key, value in sd.items():
        head, _, rest = key.partition(".")
        if head in (actor_head, "critic"):
            (actor if head == actor_head else critic)["mlp"][rest] = value
        elif head in (memory, "memory_c"):
            (actor if head == memory else critic)["rnn"][rest.removeprefix("rnn.")] = value
        elif head in (f"{actor_head}_obs_normalizer", "critic_obs_normalizer"):
            (actor if head.startswith(actor_head) else critic)["norm"][rest] = value
        elif key == "std":
            actor["std"]["std_param"] = value
        elif key == "log_std":
            actor["std"]["log_std_param"] = value
    return actor, critic


def _group_blocks(policy: Any, groups: list[str]) -> dict[str, int]:
    spec = policy.observation_spec
    return {k: math.prod(spec[k].shape) for k in groups}


def _permute_columns(weight: Tensor, order: list[str], widths: dict[str, int], target: list[str],
                     offset: int = 0) -> Tensor:
    """``weight``'s input columns ``[offset, offset + sum(widths))``, laid out per group in
    ``order``, re-laid in ``target`` order (the other columns stay)."""
    starts, at = {}, offset
    for k in order:
        starts[k] = at
        at += widths[k]
    cols = list(range(offset)) + [c for k in target for c in range(starts[k], starts[k] + widths[k])]
    cols += list(range(at, weight.shape[1]))
    return weight[:, cols]


def _normalizers(out: dict[str, Tensor], policy: Any, norm: dict[str, Tensor], groups: list[str],
                 widths: dict[str, int], where: str) -> None:
    """rsl_rl's normalizer over the concatenated 1D groups, split into rlx's per-key ones."""
    if not norm or not policy.obs_normalizers:
        return
    mean, var = norm.get("_mean", norm.get("mean")), norm.get("_var", norm.get("var"))
    if mean is None or var is None:
        raise ConfigError(f"{where}: an obs_normalizer without _mean/_var ({sorted(norm)})")
    mean, var, at = mean.reshape(-1), var.reshape(-1), 0
    for k in groups:
        name = next((n for n, path in policy._norm_keys.items() if path == (k,)), None)
        if name is None:  # an image (not normalized), or a group rlx does not normalize
            continue
        w = widths[k]
        shape = policy.obs_normalizers[name].mean.shape
        out[f"obs_normalizers.{name}.mean"] = mean[at:at + w].reshape(shape)
        out[f"obs_normalizers.{name}.var"] = var[at:at + w].reshape(shape)
        out[f"obs_normalizers.{name}.count"] = norm["count"].reshape(1)
        at += w
    if at != mean.numel():
        raise ConfigError(f"{where}: the obs_normalizer has {mean.numel()} entries, the groups {groups} {at}")


def _network(out: dict[str, Tensor], policy: Any, net: dict[str, dict[str, Tensor]], part: str,
             groups: list[str], where: str) -> None:
    """One rsl_rl network's tensors under rlx's names in ``out``."""
    from rlx.cnn import CNNActorCritic

    model = policy.model
    spec = policy.observation_spec
    widths = _group_blocks(policy, groups)
    cnn = isinstance(model, CNNActorCritic)
    images = [k for k in groups if len(spec[k].shape) == 3] if cnn else []
    vectors = [k for k in groups if k not in images]
    recurrent = bool(net["rnn"])
    prefix = f"model.{part}.mlp." if cnn else f"model.{part}."
    first = next(iter(net["mlp"]), None)
    for key, value in net["mlp"].items():
        if key == first and not recurrent:
            # rsl_rl: vectors in obs_groups order, then images; rlx: each sorted.
            value = _permute_columns(value, vectors, widths, sorted(vectors))
            if images:
                cnn_widths = {k: getattr(model, part).cnns[k].output_dim for k in images}
                value = _permute_columns(value, images, cnn_widths, sorted(images), offset=sum(widths[k] for k in vectors))
        out[prefix + key] = value
    for key, value in net["cnns"].items():
        out[f"model.{part}.cnns.{key}"] = value
    if recurrent:
        cells = "cells" if part == "actor" else "critic_cells"
        for key, value in net["rnn"].items():
            name, _, layer = key.rpartition("_l")  # weight_ih_l0 -> cells.0.weight_ih
            if not layer.isdigit():
                raise ConfigError(f"{where}: unexpected recurrent tensor {key!r}")
            if key.startswith("weight_ih_l0"):
                value = _permute_columns(value, groups, widths, sorted(groups))
            out[f"model.{cells}.{layer}.{name}"] = value
    std = net["std"]
    if "std_param" in std:
        out["model.log_std"] = std["std_param"].clamp_min(1e-12).log()
    elif "log_std_param" in std:
        out["model.log_std"] = std["log_std_param"]
    _normalizers(out, policy, net["norm"], vectors, widths, where)


def rsl_rl_to_rlx(state: dict[str, Any], alg: Any, where: str) -> dict[str, Any]:
    """An rsl_rl checkpoint as :meth:`rlx.runners.rsl_rl_alg.RslRlAlgorithm.load`'s dict:
    ``actor_state_dict`` and ``critic_state_dict`` under rlx's names, ``iter``, and an
    optimizer state that keeps rlx's moments and takes the checkpoint's learning rate.

    Raises:
        ConfigError: naming the checkpoint, when it does not fit the runner's networks.
    """
    if "actor_state_dict" in state:
        actor, critic = _split_5x(state["actor_state_dict"]), _split_5x(state.get("critic_state_dict") or {})
    else:
        actor, critic = _split_legacy(state["model_state_dict"])
    policy = alg.policy
    tensors: dict[str, Tensor] = {}
    _network(tensors, policy, actor, "actor", alg.actor.groups, where)
    if critic["mlp"]:
        _network(tensors, policy, critic, "critic", alg.critic.groups, where)
    own = policy.state_dict()
    for key, value in tensors.items():
        if key not in own:
            raise ConfigError(f"{where}: maps to {key!r}, which the runner's policy lacks: build the runner from the "
                              "train_cfg the checkpoint was trained with")
        if tuple(value.shape) != tuple(own[key].shape):
            raise ConfigError(f"{where}: {key!r} is {list(value.shape)} in the checkpoint, {list(own[key].shape)} in "
                              "the runner's policy: build the runner from the checkpoint's train_cfg")
    loaded: dict[str, Any] = {"iter": int(state.get("iter", 0)), "rlx_names": True}
    for part in ("actor", "critic"):
        keys = getattr(alg, part).state_dict().keys()
        loaded[f"{part}_state_dict"] = {k: tensors[k].to(own[k].dtype) for k in keys if k in tensors}
    optimizer = alg.optimizer.state_dict()
    lr = (state.get("optimizer_state_dict") or {}).get("param_groups", [{}])[0].get("lr")
    if lr is not None:
        for group in optimizer["param_groups"]:
            group["lr"] = float(lr)
    loaded["optimizer_state_dict"] = optimizer
    return loaded
