"""rsl_rl's networks (``policy``, or ``actor`` and ``critic`` sections) as an rlx model.

* rsl_rl 3.x/4.x ``ActorCritic`` and 5.x ``MLPModel``: :class:`~rlx.models.MLPActorCritic`.
* 5.x ``RNNModel`` (``rnn_type`` ``lstm``/``gru``, ``rnn_hidden_dim``, ``rnn_num_layers``:
  the recurrent core reads the observation, an MLP of ``hidden_dims`` follows it), and
  3.x/4.x ``ActorCriticRecurrent``: :class:`~rlx.models.RecurrentActorCritic` with no
  encoder, ``head_hiddens`` the MLP and ``separate_critic``, trained by rlx's recurrent
  PPO on whole rollouts (``seq_len`` = ``num_steps_per_env``).
* 5.x ``CNNModel`` (``cnn_cfg``, one for every image group or one per group; the
  algorithm's ``share_cnn_encoders``): :class:`~rlx.cnn.CNNActorCritic`.

What differs from rsl_rl is refused by name: the actor and the critic must be of one
class, read normalized observations alike, and (recurrent) have one core width.
"""

from __future__ import annotations

import math
from typing import Any

from rlx.cnn import CNNActorCritic
from rlx.core.config_fields import ConfigError
from rlx.models import RecurrentActorCritic

__all__ = ["Networks", "networks_from_rsl_rl"]

ACTIVATIONS = {"elu", "relu", "tanh", "selu", "gelu", "silu", "leaky_relu", "sigmoid", "softplus", "mish"}
MODELS = ("MLPModel", "RNNModel", "CNNModel")
#: Keys of a 5.x model section.
MODEL_KEYS = {"class_name", "hidden_dims", "activation", "obs_normalization", "distribution_cfg", "rnn_type",
              "rnn_hidden_dim", "rnn_num_layers", "cnn_cfg", "init_noise_std", "noise_std_type"}
#: Keys of a 3.x/4.x ``policy`` section.
POLICY_KEYS = {"class_name", "init_noise_std", "noise_std_type", "actor_obs_normalization", "critic_obs_normalization",
               "actor_hidden_dims", "critic_hidden_dims", "activation", "rnn_type", "rnn_hidden_dim", "rnn_num_layers",
               "state_dependent_std"}


class Networks(dict):
    """What a train_cfg's networks map to: ``model_cls`` (``None``: the default MLP),
    ``model_config``, ``normalize_obs``, ``recurrent``, ``init_std`` and ``where``."""


def _fail(where: str, why: str) -> None:
    raise ConfigError(f"train_cfg[{where}]: {why}")


def _empty(section: Any) -> bool:
    """Isaac Lab's ``to_dict()`` leaves an unset section as ``{}`` (or ``None``)."""
    return section is None or (isinstance(section, dict) and not section)


def _check(where: str, activation: str, init_std: float) -> None:
    if activation not in ACTIVATIONS:
        _fail(f"{where}]['activation'", f"{activation!r} is not one of {sorted(ACTIVATIONS)}")
    if not init_std > 0:
        _fail(f"{where}]['init_noise_std'", f"must be > 0, got {init_std}")


def _recurrent(where: str, rnn_type: str, hidden: int, layers: int, actor_dims: list[int],
               critic_dims: list[int], activation: str, init_std: float) -> dict[str, Any]:
    if rnn_type not in ("lstm", "gru"):
        _fail(f"{where}]['rnn_type'", f"{rnn_type!r} is not one of ['gru', 'lstm']")
    return {"hiddens": [], "head_hiddens": actor_dims, "critic_head_hiddens": critic_dims, "cell": rnn_type,
            "hidden_size": int(hidden), "num_layers": int(layers), "activation_fn": activation,
            "log_std_init": math.log(init_std), "separate_critic": True}


def _legacy(policy: dict[str, Any], cfg: dict[str, Any]) -> Networks:
    """rsl_rl 3.x/4.x's ``policy`` section."""
    name = policy.get("class_name", "ActorCritic")
    for key in sorted(set(policy) - POLICY_KEYS):
        _fail(f"'policy'][{key!r}", f"unknown {name} field")
    if name not in ("ActorCritic", "ActorCriticRecurrent"):
        _fail("'policy']['class_name'", f"{name!r} is not supported (ActorCritic and ActorCriticRecurrent are)")
    if policy.get("state_dependent_std"):
        _fail("'policy']['state_dependent_std'", "rlx's Gaussian has a state-independent std")
    normalization = cfg.get("empirical_normalization")
    normalization = False if _empty(normalization) else normalization
    norm = (bool(policy.get("actor_obs_normalization", normalization)),
            bool(policy.get("critic_obs_normalization", normalization)))
    activation, init_std = policy.get("activation", "elu"), float(policy.get("init_noise_std", 1.0))
    _check("'policy'", activation, init_std)
    actor, critic = list(policy.get("actor_hidden_dims", (256, 256, 256))), list(policy.get("critic_hidden_dims", (256, 256, 256)))
    out = Networks(norm=norm, init_std=init_std, std_type=policy.get("noise_std_type", "scalar"), where="'policy'")
    if name == "ActorCriticRecurrent":
        out.update(model_cls=RecurrentActorCritic, recurrent=True,
                   model_config=_recurrent("'policy'", policy.get("rnn_type", "lstm"), policy.get("rnn_hidden_dim", 256),
                                           policy.get("rnn_num_layers", 1), actor, critic, activation, init_std))
    else:
        out.update(model_cls=None, recurrent=False,
                   model_config={"hiddens": actor, "critic_hiddens": critic, "activation_fn": activation,
                                 "log_std_init": math.log(init_std)})
    return out


def networks_from_rsl_rl(cfg: dict[str, Any], alg: dict[str, Any]) -> Networks:
    """The rlx model of a train_cfg's networks (module docstring).

    Raises:
        ConfigError: a field rlx cannot honour, naming it and why.
    """
    if not _empty(cfg.get("policy")) and _empty(cfg.get("actor")):
        return _legacy(dict(cfg["policy"]), cfg)
    actor, critic = dict(cfg.get("actor") or {}), dict(cfg.get("critic") or {})
    if not actor or not critic:
        _fail("'actor'/'critic'", "a train_cfg needs either a 'policy' section (rsl_rl 3.x/4.x) or 'actor' and "
                                  "'critic' sections (rsl_rl 5.x)")
    kinds = []
    for name, section in (("actor", actor), ("critic", critic)):
        kind = section.get("class_name", "MLPModel")
        kind = kind.rsplit(":", 1)[-1].rsplit(".", 1)[-1]  # "rsl_rl.models:RNNModel" and "rsl_rl.models.RNNModel" too
        if kind not in MODELS:
            _fail(f"'{name}']['class_name'", f"{section['class_name']!r} is not one of {list(MODELS)}")
        for key in sorted(set(section) - MODEL_KEYS):
            _fail(f"'{name}'][{key!r}", f"unknown {kind} field")
        kinds.append(kind)
    if kinds[0] != kinds[1]:
        _fail("'critic']['class_name'", f"{kinds[1]!r} differs from the actor's {kinds[0]!r}: rlx builds both "
                                        "networks of one model class")
    activation = actor.get("activation", "elu")
    if critic.get("activation", "elu") != activation:
        _fail("'critic']['activation'", f"{critic.get('activation')!r} differs from the actor's {activation!r}: "
                                        "rlx's model takes one activation")
    dist = dict(actor.get("distribution_cfg") or {})
    init_std = float(dist.get("init_std", actor.get("init_noise_std", 1.0)))
    _check("'actor'", activation, init_std)
    actor_dims = list(actor.get("hidden_dims", (256, 256, 256)))
    critic_dims = list(critic.get("hidden_dims", (256, 256, 256)))
    out = Networks(norm=(bool(actor.get("obs_normalization", False)), bool(critic.get("obs_normalization", False))),
                   init_std=init_std, std_type=dist.get("std_type", actor.get("noise_std_type", "scalar")),
                   where="'actor'", recurrent=kinds[0] == "RNNModel")
    if kinds[0] == "RNNModel":
        for key, default in (("rnn_type", "lstm"), ("rnn_hidden_dim", 256), ("rnn_num_layers", 1)):
            if critic.get(key, default) != actor.get(key, default):
                _fail(f"'critic'][{key!r}", f"{critic.get(key, default)!r} differs from the actor's "
                                            f"{actor.get(key, default)!r}: rlx's recurrent model has one core shape")
        out.update(model_cls=RecurrentActorCritic,
                   model_config=_recurrent("'actor'", actor.get("rnn_type", "lstm"), actor.get("rnn_hidden_dim", 256),
                                           actor.get("rnn_num_layers", 1), actor_dims, critic_dims, activation, init_std))
    elif kinds[0] == "CNNModel":
        cnn = actor.get("cnn_cfg")
        if _empty(cnn):
            _fail("'actor']['cnn_cfg'", "CNNModel needs the encoders' settings")
        if not _empty(critic.get("cnn_cfg")) and critic["cnn_cfg"] != cnn and not alg.get("share_cnn_encoders"):
            _fail("'critic']['cnn_cfg'", "differs from the actor's: rlx's CNN model builds both networks' encoders "
                                         "from one cnn_cfg")
        # rsl_rl's CNN defaults its activation to elu, whatever the MLP's.
        per_group = all(isinstance(v, dict) for v in cnn.values())
        cnn = {k: {"activation": "elu", **v} for k, v in cnn.items()} if per_group else {"activation": "elu", **cnn}
        out.update(model_cls=CNNActorCritic,
                   model_config={"hiddens": actor_dims, "critic_hiddens": critic_dims, "activation_fn": activation,
                                 "log_std_init": math.log(init_std), "cnn": cnn,
                                 "share_encoders": bool(alg.get("share_cnn_encoders", False))})
    else:
        out.update(model_cls=None,
                   model_config={"hiddens": actor_dims, "critic_hiddens": critic_dims, "activation_fn": activation,
                                 "log_std_init": math.log(init_std)})
    return out
