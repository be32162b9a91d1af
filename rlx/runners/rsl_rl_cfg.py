"""rsl_rl's ``train_cfg`` dict as an rlx :class:`~rlx.config.AlgorithmConfig`.

Two layouts are read, the ones rsl_rl's ``OnPolicyRunner`` takes:

* rsl_rl 3.x and 4.x (Isaac Lab's ``RslRlOnPolicyRunnerCfg.to_dict()``): a ``policy``
  section (``ActorCritic``: ``actor_hidden_dims``, ``critic_hidden_dims``,
  ``activation``, ``init_noise_std``, ``actor_obs_normalization``,
  ``critic_obs_normalization``) and older runs' top-level ``empirical_normalization``;
* rsl_rl 5.x (mjlab's): ``actor`` and ``critic`` sections (``MLPModel``: ``hidden_dims``,
  ``activation``, ``obs_normalization``, and the actor's ``distribution_cfg`` with
  ``init_std``, or ``init_noise_std``).

Both have ``num_steps_per_env``, ``obs_groups`` and an ``algorithm`` section (PPO:
``num_learning_epochs``, ``num_mini_batches``, ``clip_param``, ``use_clipped_value_loss``,
``value_loss_coef``, ``entropy_coef``, ``learning_rate``, ``schedule``, ``desired_kl``,
``gamma``, ``lam``, ``max_grad_norm``, ``optimizer``), and ``torch_compile_mode``
(``"default"`` or ``"max-autotune-no-cudagraphs"``: rlx's ``compile``, which fuses the
whole minibatch update; a distillation student's too). Each maps to the rlx field that
does the same; the gradient is clipped per network (rsl_rl's rule:
``clip_grad_per_network``), the adaptive schedule adapts before every minibatch's step
(``kl_adaptive_lr_per_minibatch``, rsl_rl's placement) and rewards are not scaled
(rsl_rl scales none). ``symmetry_cfg`` maps to rlx's mirror (:class:`RslRlMirror` around
its ``data_augmentation_func``), ``symmetry_augment`` and ``mirror_loss_coeff``; ``rnd_cfg``
to rlx's ``rnd`` (:mod:`rlx.algorithms.rnd`), its state the ``rnd_state`` observation group. The networks
map by :mod:`rlx.runners.rsl_rl_models` (MLP, RNN and CNN models). A field rlx cannot
honour is a :class:`~rlx.config.ConfigError` naming it and why; top-level keys rlx does
not read (names, loggers' projects, resume paths, newer versions' fields) are taken with
a warning, as rsl_rl's runner ignores them.

:func:`distillation_config_from_rsl_rl` reads the ``train_cfg`` of rsl_rl's
``DistillationRunner`` (``algorithm.class_name: Distillation``) the same way, for
:class:`~rlx.runners.DistillationRunner`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rlx.config import AlgorithmConfig, ConfigError, DistillationConfig, RecurrentAlgorithmConfig
from rlx.runners.rsl_rl_models import networks_from_rsl_rl

__all__ = ["RslRlMirror", "algorithm_config_from_rsl_rl", "distillation_config_from_rsl_rl", "distillation_from_rsl_rl",
           "rsl_rl_teacher_cfg", "run_config_from_rsl_rl", "teacher_kind"]

SYMMETRY_KEYS = {"use_data_augmentation", "use_mirror_loss", "data_augmentation_func", "mirror_loss_coeff", "env",
                 "class_name"}


class RslRlMirror:
    """rsl_rl's symmetry function as rlx's ``symmetry_fn``.

    rsl_rl calls ``data_augmentation_func(env=env, obs=obs, actions=actions)`` and gets the
    batch followed by its mirrored copies; rlx's ``symmetry_fn(obs, actions)`` returns the
    mirror alone, and must be an involution (checked at build). One mirrored copy is
    taken; a function that returns more (several symmetries at once) is refused by name.

    Args:
        func: The function, or its import path (``"package.module:name"`` or
            ``"package.module.name"``).
        env: The env passed to it as ``env=`` (rsl_rl passes its VecEnv; ``None`` where
            rlx builds the env itself, as ``rlx train --rsl-rl-cfg`` does).
    """

    def __init__(self, func: Any, env: Any = None) -> None:
        from rlx.core.yaml_types import import_object

        where = "train_cfg['algorithm']['symmetry_cfg']['data_augmentation_func']"
        self.path = func if isinstance(func, str) else f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)}"
        self.func = import_object(func, where=where) if isinstance(func, str) else func
        if not callable(self.func):
            raise ConfigError(f"{where}: must be a function or an import path to one, got {func!r}")
        self.env = env

    def __call__(self, obs: Any, actions: torch.Tensor) -> tuple[Any, torch.Tensor]:
        aug_obs, aug_actions = self.func(env=self.env, obs=obs, actions=actions)
        n = actions.shape[0]
        if aug_actions.shape[0] != 2 * n:
            raise ValueError(f"{self.path} returned {aug_actions.shape[0] // max(n, 1)} copies of a batch of {n}; rlx "
                             "mirrors with one symmetry (the batch and its mirror)")
        return aug_obs[n:], aug_actions[n:]

    def __repr__(self) -> str:
        return f"RslRlMirror({self.path})"

#: Top-level keys that only steer rsl_rl's bookkeeping, and the runner reads or leaves.
BOOKKEEPING = {"experiment_name", "run_name", "logger", "wandb_project", "neptune_project", "resume", "load_run",
               "load_checkpoint", "max_iterations", "save_interval", "class_name", "device", "seed", "multi_gpu",
               "check_for_nan", "clip_actions", "upload_model", "log_project_name", "init_at_random_ep_len",
               "wandb_tags"}
#: Top-level keys the PPO mapping reads (besides the networks).
MAPPED = BOOKKEEPING | {"num_steps_per_env", "obs_groups", "algorithm", "empirical_normalization", "torch_compile_mode"}
_WARNED: set[str] = set()


def warn_ignored(cfg: dict[str, Any], read: set[str]) -> None:
    """Warn once per key about top-level keys rlx does not read. rsl_rl's runner ignores
    keys it does not know (a newer version's fields, a project's own), so rlx takes them
    too, and says so. Isaac Lab's ``init_at_random_ep_len`` and mjlab's ``wandb_tags`` are
    read (the second tags the W&B run)."""
    ignored = sorted(set(cfg) - read - _WARNED)
    if ignored:
        import warnings

        _WARNED.update(ignored)
        warnings.warn(f"train_cfg: rlx ignores {ignored} (keys it does not map; rsl_rl's runner ignores unknown keys "
                      "too)", stacklevel=3)


ALGORITHM_KEYS = {"class_name", "num_learning_epochs", "num_mini_batches", "clip_param", "use_clipped_value_loss",
                  "value_loss_coef", "entropy_coef", "learning_rate", "schedule", "desired_kl", "gamma", "lam",
                  "max_grad_norm", "optimizer", "normalize_advantage_per_mini_batch", "use_mixed_precision",
                  "rnd_cfg", "symmetry_cfg", "share_cnn_encoders", "grad_reduce_bucket_mb"}
OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD,
              "rmsprop": torch.optim.RMSprop}
ACTIVATIONS = {"elu", "relu", "tanh", "selu", "gelu", "silu", "leaky_relu", "sigmoid", "softplus", "mish"}


def _fail(where: str, why: str) -> None:
    raise ConfigError(f"train_cfg[{where}]: {why}")


def _optimizer(alg: dict[str, Any]) -> type[torch.optim.Optimizer]:
    """The optimizer class of an ``algorithm`` section's ``optimizer`` name."""
    optimizer = str(alg.get("optimizer", "adam")).lower()
    if optimizer not in OPTIMIZERS:
        _fail("'algorithm']['optimizer'", f"{optimizer!r} is not one of {sorted(OPTIMIZERS)}")
    return OPTIMIZERS[optimizer]


def _check_network(net: dict[str, Any]) -> None:
    """A mapped network's activation and initial std, refused by name when rlx lacks them."""
    if net["activation"] not in ACTIVATIONS:
        _fail(f"{net['where']}]['activation'", f"{net['activation']!r} is not one of {sorted(ACTIVATIONS)}")
    if not net["init_std"] > 0:
        _fail(f"{net['where']}]['init_noise_std'", f"must be > 0, got {net['init_std']}")


def algorithm_config_from_rsl_rl(cfg: dict[str, Any], num_envs: int, device: str = "cpu",
                                 env: Any = None) -> AlgorithmConfig:
    """The :class:`~rlx.config.AlgorithmConfig` that trains as rsl_rl's runner would with
    ``cfg`` on ``num_envs`` envs (see the module docstring); ``env`` is what a
    ``symmetry_cfg``'s function receives as ``env=``.

    Raises:
        ConfigError: a field rlx cannot honour, naming it and why.
    """
    alg = dict(cfg.get("algorithm") or {})
    if alg.get("class_name", "PPO") != "PPO":
        _fail("'algorithm']['class_name'", f"{alg['class_name']!r} is not supported (PPO is; a Distillation "
                                           "train_cfg goes to rlx.runners.DistillationRunner, as to rsl_rl's)")
    warn_ignored(cfg, MAPPED | {"policy", "actor", "critic"})
    for key in sorted(set(alg) - ALGORITHM_KEYS):
        _fail(f"'algorithm'][{key!r}", "unknown PPO field")
    symmetry = _symmetry(alg.get("symmetry_cfg"), env)
    rnd = _rnd(alg.get("rnd_cfg"), cfg.get("obs_groups") or {}, num_envs, env)
    if alg.get("normalize_advantage_per_mini_batch"):
        _fail("'algorithm']['normalize_advantage_per_mini_batch'", "rlx normalizes advantages over the whole batch")
    compile_mode = _compile_mode(cfg)
    optimizer_cls = _optimizer(alg)
    nets = networks_from_rsl_rl(cfg, alg)
    if nets["norm"][0] != nets["norm"][1]:
        _fail(f"{nets['where']}", f"actor and critic observation normalization differ ({nets['norm']}): rlx "
                                  "normalizes the observations of both networks or of neither")
    steps = int(cfg.get("num_steps_per_env", 24))
    minibatches = int(alg.get("num_mini_batches", 4))
    units = num_envs if nets["recurrent"] else num_envs * steps  # recurrent: whole rollouts of sub-envs
    if units % minibatches:
        _fail("'algorithm']['num_mini_batches'", f"{minibatches} does not divide "
                                                 f"{'num_envs' if nets['recurrent'] else 'num_envs * num_steps_per_env'}"
                                                 f" = {units}")
    adaptive = alg.get("schedule", "adaptive") == "adaptive" and alg.get("desired_kl") is not None
    clip = float(alg.get("clip_param", 0.2))
    obs_groups = cfg.get("obs_groups") or None
    config_cls = RecurrentAlgorithmConfig if nets["recurrent"] else AlgorithmConfig
    return config_cls(
        num_envs=num_envs, horizon=steps, num_sgd_iters=int(alg.get("num_learning_epochs", 5)),
        sgd_minibatch_size=num_envs * steps // minibatches, clip_param=clip,
        vf_clip_param=clip if alg.get("use_clipped_value_loss", True) else None,
        vf_coeff=float(alg.get("value_loss_coef", 1.0)), entropy_coeff=float(alg.get("entropy_coef", 0.01)),
        gamma=float(alg.get("gamma", 0.99)), gae_lambda=float(alg.get("lam", 0.95)),
        max_grad_norm=float(alg.get("max_grad_norm", 1.0)), clip_grad_per_network=True,
        optimizer_cls=optimizer_cls, optimizer_config={"lr": float(alg.get("learning_rate", 1e-3))},
        kl_adaptive_lr=adaptive, target_kl_div=float(alg["desired_kl"]) if adaptive else None,
        kl_adaptive_lr_per_minibatch=adaptive,
        kl_adaptive_lr_bounds=(1e-5, 1e-2), enable_amp=bool(alg.get("use_mixed_precision", False)),
        normalize_rewards=False, normalize_obs=nets["norm"][0], normalize_advantages=True,
        model_cls=nets["model_cls"], model_config=nets["model_config"],
        obs_groups={k: list(v) for k, v in obs_groups.items() if k in ("actor", "critic")} if obs_groups else None,
        device=device, seed=cfg.get("seed"), **symmetry, rnd=rnd, compile=compile_mode is not None,
        matmul_precision=None,  # torch's setting, as rsl_rl leaves it (rlx's CUDA default is TF32)
    )


RND_KEYS = {"weight", "weight_schedule", "reward_normalization", "state_normalization", "learning_rate", "num_outputs",
            "predictor_hidden_dims", "target_hidden_dims", "activation", "class_name", "num_states", "obs_groups",
            "device"}


def _rnd(cfg: dict[str, Any] | None, obs_groups: dict[str, Any], num_envs: int, env: Any) -> dict[str, Any] | None:
    """rlx's ``rnd`` settings from rsl_rl's ``rnd_cfg`` (``None`` without one). rsl_rl
    scales the weight by the env's ``unwrapped.step_dt`` (Isaac Lab's), when the env has
    one; its weight schedule counts vectorized env steps, rlx's env transitions
    (``num_envs`` each)."""
    if cfg is None:
        return None
    where = "'algorithm']['rnd_cfg'"
    if not isinstance(cfg, dict):
        _fail(where, f"must be a mapping, got {cfg!r}")
    for key in sorted(set(cfg) - RND_KEYS):
        _fail(f"{where}][{key!r}", f"unknown field (rlx maps {sorted(RND_KEYS - {'class_name', 'num_states', 'obs_groups', 'device'})})")
    weight = float(cfg.get("weight", 0.0))
    step_dt = getattr(getattr(env, "unwrapped", None), "step_dt", None)
    if isinstance(step_dt, (int, float)):
        weight *= float(step_dt)
    out: dict[str, Any] = {
        "weight": weight, "learning_rate": float(cfg.get("learning_rate", 1e-3)),
        "embedding_dim": int(cfg.get("num_outputs", 1)), "activation": str(cfg.get("activation", "elu")),
        "predictor_hiddens": [int(w) for w in cfg.get("predictor_hidden_dims", [-1, -1])],
        "target_hiddens": [int(w) for w in cfg.get("target_hidden_dims", [-1, -1])],
        "normalize_state": bool(cfg.get("state_normalization", False)),
        "normalize_reward": bool(cfg.get("reward_normalization", False)),
        "obs_keys": list(obs_groups.get("rnd_state", ["policy"])),
    }
    schedule = cfg.get("weight_schedule")
    if schedule:
        mode = schedule.get("mode", "constant")
        final = float(schedule.get("final_value", weight))
        if mode == "step":
            out["weight_schedule"] = [(0, weight), (int(schedule["final_step"]) * num_envs, final)]
        elif mode == "linear":
            start, end = int(schedule["initial_step"]) * num_envs, int(schedule["final_step"]) * num_envs
            out["weight_schedule"] = [*([(0, weight)] if start > 0 else []), (start, weight), (end, final)]
            out["weight_schedule_kind"] = "interp"
        elif mode != "constant":
            _fail(f"{where}]['weight_schedule']['mode'", f"{mode!r} is not one of ['constant', 'linear', 'step']")
    return out


def _symmetry(cfg: dict[str, Any] | None, env: Any) -> dict[str, Any]:
    """The rlx fields of rsl_rl's ``symmetry_cfg`` (none without one)."""
    if cfg is None:
        return {}
    where = "'algorithm']['symmetry_cfg'"
    if not isinstance(cfg, dict):
        _fail(where, f"must be a mapping, got {cfg!r}")
    for key in sorted(set(cfg) - SYMMETRY_KEYS):
        _fail(f"{where}][{key!r}", f"unknown field (rlx maps {sorted(SYMMETRY_KEYS - {'env', 'class_name'})})")
    if cfg.get("data_augmentation_func") is None:
        _fail(f"{where}]['data_augmentation_func'", "is needed: the mirror of observations and actions")
    mirror_loss = bool(cfg.get("use_mirror_loss", False))
    return {"symmetry_fn": RslRlMirror(cfg["data_augmentation_func"], cfg.get("env", env)),
            "symmetry_augment": bool(cfg.get("use_data_augmentation", False)),
            "mirror_loss_coeff": float(cfg.get("mirror_loss_coeff", 0.0)) if mirror_loss else None}


DISTILLATION_KEYS = {"class_name", "num_learning_epochs", "gradient_length", "learning_rate", "max_grad_norm",
                     "loss_type", "optimizer", "use_mixed_precision", "rnd_cfg", "symmetry_cfg", "grad_reduce_bucket_mb"}


def _student(cfg: dict[str, Any]) -> dict[str, Any]:
    """The student's hidden sizes, activation, initial std and normalization, and its
    observation groups, from either layout."""
    groups = cfg.get("obs_groups") or {}
    if "policy" in cfg:  # 3.x / 4.x: a StudentTeacher policy; the student reads the "policy" set
        policy = dict(cfg["policy"])
        if policy.get("class_name", "StudentTeacher") != "StudentTeacher":
            _fail("'policy']['class_name'", f"{policy['class_name']!r} is not supported (StudentTeacher is)")
        return {"hiddens": list(policy.get("student_hidden_dims", (256, 256, 256))),
                "activation": policy.get("activation", "elu"), "init_std": float(policy.get("init_noise_std", 0.1)),
                "norm": bool(policy.get("student_obs_normalization", False)),
                "groups": list(groups.get("policy", ["policy"])), "where": "'policy'"}
    student = dict(cfg.get("student") or {})
    if not student:
        _fail("'student'", "a distillation train_cfg needs a 'student' section (rsl_rl 5.x) or a 'policy' section "
                           "(rsl_rl 3.x/4.x's StudentTeacher)")
    if student.get("class_name", "MLPModel") != "MLPModel":
        _fail("'student']['class_name'", f"{student['class_name']!r} is not supported (MLPModel is)")
    dist = dict(student.get("distribution_cfg") or {})
    return {"hiddens": list(student.get("hidden_dims", (256, 256, 256))), "activation": student.get("activation", "elu"),
            "init_std": float(dist.get("init_std", student.get("init_noise_std", 0.1))),
            "norm": bool(student.get("obs_normalization", False)),
            "groups": list(groups.get("student", ["policy"])), "where": "'student'"}


def rsl_rl_teacher_cfg(cfg: dict[str, Any]) -> dict[str, Any]:
    """The ``teacher_rsl_rl_cfg`` that rebuilds an rsl_rl 5.x teacher from a distillation
    ``train_cfg``: its ``teacher`` section as the actor, on the ``teacher`` observation set."""
    teacher = dict(cfg.get("teacher") or {})
    if not teacher:
        _fail("'teacher'", "an rsl_rl teacher checkpoint is rebuilt from the train_cfg's 'teacher' section (rsl_rl "
                           "5.x's layout); 3.x/4.x teachers: train them with rlx's OnPolicyRunner")
    groups = (cfg.get("obs_groups") or {}).get("teacher", ["policy"])
    return {"actor": teacher, "obs_groups": {"actor": list(groups)}}


def distillation_config_from_rsl_rl(cfg: dict[str, Any], num_envs: int, device: str = "cpu", *,
                                    teacher: str | None = None,
                                    teacher_rsl_rl_cfg: dict[str, Any] | None = None) -> DistillationConfig:
    """The :class:`~rlx.config.DistillationConfig` that distils as rsl_rl's
    ``DistillationRunner`` would with ``cfg`` on ``num_envs`` envs, from ``teacher`` (a
    checkpoint path; ``None`` checks the fields only, before a teacher is loaded).

    * The student: rsl_rl 5.x's ``student`` section (``MLPModel``) on the ``student``
      observation set, or 3.x/4.x's ``policy`` (``StudentTeacher``: ``student_hidden_dims``,
      ``activation``, ``init_noise_std``, ``student_obs_normalization``) on the ``policy``
      set. The teacher's architecture is its checkpoint's (an rlx teacher records its
      config; an rsl_rl 5.x one is rebuilt from the ``teacher`` section).
    * ``num_learning_epochs`` -> ``num_sgd_iters``; ``gradient_length`` steps of all envs
      make one minibatch (rsl_rl steps the optimizer on the sum of that many per-step mean
      losses; rlx on their mean, shuffled, so ``max_grad_norm`` is divided by
      ``gradient_length`` to clip the same gradients; Adam's step does not see the scale;
      a ``gradient_length`` over ``num_steps_per_env``, which rsl_rl accumulates across
      epochs, is one minibatch of the whole rollout);
      ``learning_rate``, ``optimizer``, ``loss_type``, ``use_mixed_precision`` (bf16).

    Raises:
        ConfigError: a field rlx cannot honour, naming it and why.
    """
    warn_ignored(cfg, MAPPED | {"policy", "student", "teacher"})
    alg = dict(cfg.get("algorithm") or {})
    if alg.get("class_name", "Distillation") != "Distillation":
        _fail("'algorithm']['class_name'", f"{alg['class_name']!r}: a DistillationRunner trains 'Distillation' "
                                           "(PPO goes to rlx.runners.OnPolicyRunner)")
    for key in sorted(set(alg) - DISTILLATION_KEYS):
        _fail(f"'algorithm'][{key!r}", "unknown Distillation field")
    for key in ("rnd_cfg", "symmetry_cfg"):
        if alg.get(key) is not None:
            _fail(f"'algorithm'][{key!r}", "is not compatible with Distillation (as in rsl_rl)")
    compile_mode = _compile_mode(cfg)
    optimizer_cls = _optimizer(alg)
    student = _student(cfg)
    _check_network(student)
    steps = int(cfg.get("num_steps_per_env", 24))
    length = int(alg.get("gradient_length", 15))
    if not 1 <= length:
        _fail("'algorithm']['gradient_length'", f"must be >= 1, got {length}")
    max_grad_norm = alg.get("max_grad_norm")
    return DistillationConfig(
        teacher=teacher or "(not loaded yet)", teacher_rsl_rl_cfg=teacher_rsl_rl_cfg,
        num_envs=num_envs, horizon=steps, num_sgd_iters=int(alg.get("num_learning_epochs", 1)),
        sgd_minibatch_size=min(length, steps) * num_envs,
        max_grad_norm=float(max_grad_norm) / length if max_grad_norm else None,
        loss_type=str(alg.get("loss_type", "mse")), optimizer_cls=optimizer_cls,
        optimizer_config={"lr": float(alg.get("learning_rate", 1e-3))},
        enable_amp=bool(alg.get("use_mixed_precision", False)), normalize_obs=student["norm"],
        normalize_rewards=False,
        model_config={"hiddens": student["hiddens"], "activation_fn": student["activation"],
                      "log_std_init": math.log(student["init_std"])},
        obs_groups={"actor": student["groups"], "critic": student["groups"]},
        device=device, seed=cfg.get("seed"), compile=compile_mode is not None,
    )


def _compile_mode(cfg: dict[str, Any]) -> str | None:
    """rsl_rl's ``torch_compile_mode`` (``None``: off), checked: rlx's ``compile`` fuses
    what rsl_rl's compiles, and captures CUDA graphs with ``cudagraphs`` instead."""
    compile_mode = cfg.get("torch_compile_mode")
    if compile_mode in ("reduce-overhead", "max-autotune"):  # rsl_rl refuses them too
        _fail("'torch_compile_mode'", f"{compile_mode!r} captures CUDA graphs around each model call; rlx "
                                      "captures the whole update with AlgorithmConfig.cudagraphs instead")
    if compile_mode not in (None, "default", "max-autotune-no-cudagraphs"):
        _fail("'torch_compile_mode'", f"{compile_mode!r} is not one of [None, 'default', 'max-autotune-no-cudagraphs']")
    return compile_mode


def teacher_kind(state: dict[str, Any], where: str) -> str:
    """``"rlx"`` or ``"rsl_rl"``: who wrote the teacher checkpoint ``state`` (rsl_rl 5.x's
    ``actor_state_dict`` / ``teacher_state_dict``, or 3.x/4.x's ``model_state_dict``).

    Raises:
        ConfigError: naming ``where``: none of either.
    """
    if "algorithm" in state and "config" in state:  # rlx train's and the runners' checkpoints
        return "rlx"
    if any(state.get(k) is not None for k in ("actor_state_dict", "teacher_state_dict", "model_state_dict")):
        return "rsl_rl"
    raise ConfigError(f"{where}: neither a teacher (an rlx or rsl_rl PPO checkpoint) nor a DistillationRunner "
                      f"checkpoint (keys {sorted(state)[:8]})")


def distillation_from_rsl_rl(cfg: dict[str, Any], run_config: Any, where: str) -> Any:
    """``rlx train --rsl-rl-cfg``'s distillation: ``cfg`` mapped on the run config's
    ``num_envs`` and device, the teacher its ``config.teacher`` (an rsl_rl 5.x checkpoint
    is rebuilt from ``cfg``'s ``teacher`` section)."""
    teacher = getattr(run_config, "teacher", None)
    if not teacher:
        raise ConfigError(f"{where}: a Distillation train_cfg needs the teacher's checkpoint as the run config's "
                          "config.teacher (algorithm: distillation), or --set config.teacher=PATH")
    try:
        state = torch.load(teacher, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, ValueError) as e:
        raise ConfigError(f"{where}: cannot read the teacher checkpoint {teacher} ({e})") from e
    rsl_rl = teacher_kind(state, f"{where}: config.teacher {teacher}") == "rsl_rl"
    return distillation_config_from_rsl_rl(cfg, run_config.num_envs, run_config.device, teacher=str(teacher),
                                           teacher_rsl_rl_cfg=rsl_rl_teacher_cfg(cfg) if rsl_rl else None)


def run_config_from_rsl_rl(run: Any, path: str) -> Any:
    """``rlx train RUN_CONFIG --rsl-rl-cfg FILE``: ``run`` with its algorithm from rsl_rl's
    ``train_cfg`` in ``path`` (YAML or JSON): PPO as :func:`rlx.runners.algorithm_config_from_rsl_rl` maps it, on the run config's
    ``num_envs`` and device; its ``save_interval`` and ``max_iterations`` set the trainer's
    ``checkpoint_every`` and ``max_iterations``. A ``Distillation`` train_cfg maps by
    :func:`rlx.runners.distillation_config_from_rsl_rl`, its teacher the run config's
    ``config.teacher`` (``algorithm: distillation``): an rlx checkpoint or rsl_rl 5.x's."""
    import dataclasses
    from pathlib import Path

    from rlx.core.yaml_types import load_yaml

    cfg = load_yaml(Path(path).read_text())
    if not isinstance(cfg, dict):
        raise ValueError(f"--rsl-rl-cfg {path}: must hold a mapping (rsl_rl's train_cfg), got {type(cfg).__name__}")
    algorithm = "ppo"
    if (cfg.get("algorithm") or {}).get("class_name") == "Distillation":
        config, algorithm = distillation_from_rsl_rl(cfg, run.config, f"--rsl-rl-cfg {path}"), "distillation"
    else:
        config = algorithm_config_from_rsl_rl(cfg, run.config.num_envs, run.config.device)
        if isinstance(config, RecurrentAlgorithmConfig):  # an RNNModel: the run config names it
            algorithm = "recurrent_ppo"
    trainer = run.trainer
    if cfg.get("save_interval"):
        trainer = dataclasses.replace(trainer, checkpoint_every=int(cfg["save_interval"]))
    if cfg.get("max_iterations"):
        trainer = dataclasses.replace(trainer, max_iterations=int(cfg["max_iterations"]))
    return dataclasses.replace(run, algorithm=algorithm, config=config, trainer=trainer)
