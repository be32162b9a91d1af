"""Teacher-student distillation (rsl_rl's ``Distillation``): a student policy on the
observations it will have when deployed learns to act as a trained teacher that saw more.

Each iteration the *student* acts (DAgger: the states come from the student's own
rollouts, so it learns to recover from its own mistakes), and :meth:`Distillation.step`
regresses the student's mean action on the teacher's, ``loss(mu_student(o), mu_teacher(o))``
(``"mse"`` or ``"huber"``, each member's mean over its rows and action dims; for discrete
actions, where a mode has no gradient, ``KL(teacher || student)`` of the two
distributions instead), over
``num_sgd_iters`` epochs of ``sgd_minibatch_size`` minibatches. The teacher reads the
observation groups it was trained on (a privileged critic state, say) from the same
rollout; the student's groups are its config's ``obs_groups``.

The teacher is a checkpoint of rlx: a ``rlx train`` run directory or checkpoint file, or
an :class:`~rlx.runners.OnPolicyRunner` checkpoint (``model_<it>.pt``); its policy is
rebuilt on this env's specs and frozen. Or one of rsl_rl 5.x (``model_<it>.pt`` with an
``actor_state_dict``), given with the ``train_cfg`` it was trained with
(``teacher_rsl_rl_cfg``): rsl_rl's own ``MLPModel`` is rebuilt from its ``actor`` section
and ``obs_groups`` (rsl_rl must be installed) and its deterministic output is the
teacher's action. The student is an ordinary rlx policy: it
checkpoints, resumes and exports like any, and PPO fine-tunes it from its checkpoint
(``AlgorithmConfig(init_policy=...)``). With ``num_seeds = S`` the members are S
students of the one teacher.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from rlx.algorithms.base import Algorithm
from rlx.algorithms.whole_step import WholeStepGraph
from rlx.core.compiling import CompiledCall, recheck_values
from rlx.core.config_fields import ConfigError
from rlx.core.stats import Stats
from rlx.env import OBS
from rlx.members.optim import adam_state, steps_functionally
from rlx.policy import Policy, PolicyBase, flatten_time

if TYPE_CHECKING:
    from rlx.config import DistillationConfig
    from rlx.env import EnvFactory

__all__ = ["Distillation", "load_teacher", "rsl_rl_teacher"]


def _teacher_config(state: dict[str, Any], where: str) -> dict[str, Any]:
    """The plain config a checkpoint's policy was built with (its run config's ``config``
    entry: ``rlx train``'s and the OnPolicyRunner's checkpoints both record one)."""
    run = state.get("config")
    if not isinstance(run, dict) or not isinstance(run.get("config"), dict):
        raise ConfigError(f"{where}: not an rlx checkpoint with its run config (an rsl_rl checkpoint is not read yet)")
    if str(run.get("algorithm", "")).startswith("recurrent"):
        raise ConfigError(f"{where}: a recurrent teacher is not supported yet")
    return run["config"]


def load_teacher(path: str | Path, env: Any, device: torch.device, member: int | None = None,
                 *, where: str = "DistillationConfig.teacher") -> PolicyBase:
    """The trained policy of a checkpoint, rebuilt on ``env``'s specs, frozen.

    Raises:
        ConfigError: naming ``where``: no such checkpoint, not an rlx one, a recurrent or
            multi-member teacher without ``member``, or actions unlike the env's.
    """
    from rlx.run.checkpoint import read_checkpoint

    try:
        state = read_checkpoint(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{where}: cannot read a checkpoint at {path} ({e})") from e
    from rlx.core.yaml_types import import_object

    config = _teacher_config(state, where)
    S = int(config.get("num_seeds") or 1)
    policy_state = state["algorithm"]["policy"]
    model_cls = import_object(config["model_cls"], where=where) if config.get("model_cls") else None
    distribution_cls = import_object(config["distribution_cls"], where=where) if config.get("distribution_cls") else None
    kwargs = dict(distribution_cls=distribution_cls, normalize_obs=bool(config.get("normalize_obs")), device=device,
                  obs_groups=config.get("obs_groups"))
    if S > 1:
        if member is None or not 0 <= member < S:
            raise ConfigError(f"{where}: the teacher run trained {S} members; choose one with teacher_member "
                              f"(0 <= i < {S}), got {member}")
        from rlx.members.stacked import stacked_model_cls

        stacked = Policy(env.observation_spec, env.action_spec, model_cls=model_cls or stacked_model_cls(Policy.default_model_cls),
                         model_config={**(config.get("model_config") or {}), "num_seeds": S}, num_seeds=S, **kwargs)
        stacked.load_state_dict(policy_state)
        teacher = Policy(env.observation_spec, env.action_spec, model_config=config.get("model_config"), **kwargs)
        teacher.load_member_(stacked, member)  # one member: the single-seed model and its normalizers
    else:
        try:
            teacher = Policy(env.observation_spec, env.action_spec, model_cls=model_cls,
                             model_config=config.get("model_config"), **kwargs)
            teacher.load_state_dict(policy_state)
        except (RuntimeError, ValueError, TypeError) as e:
            raise ConfigError(f"{where}: the checkpoint's policy does not fit this env ({str(e).splitlines()[0]})") from e
    teacher.requires_grad_(False)
    return teacher.eval()


class _RslRlTeacher(torch.nn.Module):
    """An rsl_rl ``MLPModel`` actor as a teacher: its deterministic output, on the
    observation groups it reads."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, obs: Any) -> Tensor:
        return self.model(obs)


def rsl_rl_teacher(path: str | Path, train_cfg: dict[str, Any], env: Any, device: torch.device,
                   *, where: str = "DistillationConfig.teacher") -> torch.nn.Module:
    """rsl_rl 5.x's trained actor (``actor_state_dict`` of ``path``, or the
    ``teacher_state_dict`` of its distillation checkpoint) as a frozen module
    ``obs -> mean action``, rebuilt by rsl_rl's ``MLPModel`` from ``train_cfg``'s
    ``actor`` section and ``obs_groups``.

    Raises:
        ConfigError: rsl_rl is not installed, the checkpoint or the config is not rsl_rl
            5.x's, or the weights do not fit.
    """
    try:
        from rsl_rl.models import MLPModel
    except ImportError as e:
        raise ConfigError(f"{where}: an rsl_rl teacher needs rsl_rl (pip install rsl-rl-lib): {e}") from e
    state = torch.load(path, map_location=device, weights_only=False)
    weights = state.get("actor_state_dict") or state.get("teacher_state_dict")
    if weights is None:
        raise ConfigError(f"{where}: {path} has no actor_state_dict (rsl_rl 5.x's PPO checkpoint) or "
                          "teacher_state_dict (its distillation's)")
    actor = dict(train_cfg.get("actor") or {})
    if actor.pop("class_name", "MLPModel") != "MLPModel":
        raise ConfigError(f"{where}: teacher_rsl_rl_cfg's actor must be an MLPModel (recurrent and CNN teachers: not yet)")
    obs = env.observation_spec.zero((1,)).to(device)
    action_dim = int(torch.Size(env.action_spec.shape).numel())
    try:
        model = MLPModel(obs, train_cfg.get("obs_groups") or {"actor": ["policy"]}, "actor", action_dim, **actor).to(device)
        model.load_state_dict(weights)
    except (RuntimeError, KeyError, TypeError) as e:
        raise ConfigError(f"{where}: the rsl_rl checkpoint does not fit teacher_rsl_rl_cfg ({str(e).splitlines()[0]})") from e
    teacher = _RslRlTeacher(model)
    teacher.requires_grad_(False)
    return teacher.eval()


class Distillation(WholeStepGraph, Algorithm):
    """Teacher-student distillation (module docstring); build it with
    ``DistillationConfig(teacher=..., ...).build(env_cls)``."""

    config: DistillationConfig
    captures = True  # cudagraphs captures its whole step

    def __init__(self, env_cls: EnvFactory, config: DistillationConfig) -> None:
        super().__init__(env_cls, config)
        where = f"{type(config).__name__}.teacher"
        #: The frozen teacher: an rlx policy, or rsl_rl's actor.
        if config.teacher_rsl_rl_cfg is not None:
            self.teacher = rsl_rl_teacher(config.teacher, config.teacher_rsl_rl_cfg, self.env, self.device, where=where)
        else:
            self.teacher = load_teacher(config.teacher, self.env, self.device, config.teacher_member, where=where)
        probe = self.env.observation_spec.zero((2,)).to(self.device)
        with torch.no_grad():
            got = self.teacher_actions(probe).shape[1:]
            want = self.policy._actor_distribution(self.env.observation_spec.zero((2 * self.num_seeds,)).to(self.device)).mode().shape[1:]
        if got != want:
            raise ConfigError(f"{where}: the teacher's actions have shape {tuple(got)}, the student's {tuple(want)}")
        self._loss = torch.nn.functional.mse_loss if config.loss_type == "mse" else torch.nn.functional.huber_loss
        #: Discrete actions: the student matches the teacher's distribution (KL), not its mode.
        self.discrete = not self.env.action_spec.dtype.is_floating_point
        if self.discrete and not isinstance(self.teacher, PolicyBase):
            raise ConfigError(f"{where}: a teacher of discrete actions must be an rlx policy (its distribution is matched)")
        self._params = [p for p in self.policy.model.parameters() if p.requires_grad]
        self._loss_scaled = self.grad_scaler.is_enabled()  # float16 AMP (a compiled update cannot ask)
        #: The minibatches' summed losses, each member's, accumulated on the device.
        self._loss_sum = torch.zeros(self.members.lead, device=self.device)
        #: Why ``compile`` leaves the minibatch update eager (``None``: it compiles whole,
        #: or no compile): an optimizer rlx does not step itself.
        self.compile_fallback = None
        if self.compiles and not steps_functionally(self.optimizer, self.grad_scaler):
            self.compile_fallback = (f"optimizer_cls {type(self.optimizer).__name__} with these options (the program "
                                     "steps Adam and AdamW with one param group, without maximize, differentiable or "
                                     "a float16 loss scale)")
        #: :meth:`minibatch_update` compiled whole (the student's forward pass, the loss, the
        #: backward, the clipped optimizer step), with ``compile``.
        self.compiled_update = (CompiledCall(self.minibatch_update, device=self.device)
                                if self.compiles and self.compile_fallback is None else None)
        self.update = self._wrapped_update()
        #: What step() runs on the device: :meth:`update_phase`, through one CUDA graph with ``cudagraphs``.
        self.run_update_phase = self._wrapped_phase()

    @property
    def needs_tensor_lr(self) -> bool:
        # A compiled update steps Adam with the LR as a tensor (a float would be baked into its program).
        compiled_adam = self.compiles and self.config.optimizer_cls in (torch.optim.Adam, torch.optim.AdamW)
        return self.uses_cuda_graphs or compiled_adam

    def _wrapped_update(self) -> Callable[[dict[str, Any]], Tensor]:
        if self.compiled_update is None:
            return self.minibatch_update
        # The Adam state the program reads and writes exists before it runs (after a load
        # too): a program traced on a missing state would make it on every call.
        adam_state(self.optimizer, self._params)
        return self.compiled_update

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)  # the step's graph made again (WholeStepGraph)
        self.update = self._wrapped_update()

    def teacher_actions(self, obs: Any) -> Tensor:
        """``[N, *action]`` the teacher's mean actions on raw observations."""
        with torch.no_grad():
            if isinstance(self.teacher, PolicyBase):
                return self.teacher._actor_distribution(obs).mode()
            return self.teacher(obs).reshape(obs.shape[0], *self.env.action_spec.shape)

    def _teacher_means(self, obs: Any) -> Tensor:
        """The teacher's mean actions on ``[N]`` raw observations, in cache-sized passes."""
        n, rows = obs.shape[0], 16384
        return torch.cat([self.teacher_actions(obs[lo : lo + rows]) for lo in range(0, n, rows)])

    def step(self) -> dict[str, float]:
        """Regress the student on the teacher over the rollout the student collected.

        Returns:
            ``losses/behavior`` (the mean loss over the minibatches; ``member{i}/...`` per
            member), ``monitors/lr`` and ``profiling/step_ms``.
        """
        self._check_buffered()
        start = time.perf_counter()
        recheck_values()  # what changed since collect() (a config field, the optimizer's options) is seen
        lr = self.lr
        stats = self.run_update_phase()
        self._finish_step()
        host = stats.to_host()  # SYNC: the stats of step()
        out = {**{k: v for k, v in host.items() if k != "params/finite"}, "monitors/lr": lr,
               "profiling/step_ms": 1e3 * (time.perf_counter() - start)}
        self._check_params_finite(host, out)
        return out

    def update_phase(self) -> Stats:
        """All of step()'s work on the device: the teacher's targets, the epochs of
        minibatch updates (:meth:`minibatch_update`, each epoch's order drawn on the
        device) and the statistics (returned still on the device). The host decides
        nothing inside it, so one CUDA graph holds it whole (``cudagraphs``)."""
        cfg, members = self.config, self.members
        obs = flatten_time(self.buffer.get(OBS)[:, : self.horizon])
        target = None if self.discrete else self._teacher_means(obs).float()
        n = obs.shape[0] // self.num_seeds
        m = min(cfg.sgd_minibatch_size or n, n)
        self._loss_sum.zero_()
        count = 0
        for _ in range(cfg.num_sgd_iters):
            order = members.epoch_order(n, m, shuffle=True)
            for lo, rows in members.minibatch_bounds(n, m):
                index = order[lo : lo + rows] if order is not None else torch.arange(lo, lo + rows, device=self.device)
                mb = {OBS: obs[index]} if target is None else {OBS: obs[index], "target": target[index]}
                self.update(mb)
                count += 1
        stats = Stats()
        members.stats(stats)("losses/behavior", self._loss_sum / max(count, 1))
        members.add_activity(stats)
        stats.add("params/finite", self._params_finite(), "min")
        return stats

    def minibatch_update(self, mb: dict[str, Any]) -> Tensor:
        """One minibatch: the student's loss against the teacher (the mean-action gap, or
        for discrete actions ``KL(teacher || student)``), its backward and the clipped
        optimizer step; adds the loss (each member's) into the step's sum and returns it.
        The one implementation, which eager runs, ``compile`` compiles whole and
        ``cudagraphs`` captures inside :meth:`update_phase`."""
        obs, members = mb[OBS], self.members
        with self.autocast():
            student = self.policy._actor_distribution(obs)
        if self.discrete:
            with torch.no_grad():
                teacher = self.teacher._actor_distribution(obs)
            error = teacher.kl(student).float()
        else:
            error = self._loss(student.mode().float(), mb["target"], reduction="none")
        loss = members.mean_each(error.reshape(error.shape[0], -1).mean(dim=1, keepdim=True))
        loss = loss if self.num_seeds > 1 else loss.reshape(())
        total = loss.sum()
        (self.grad_scaler.scale(total) if self._loss_scaled else total).backward()
        self.optimizer_step(self._params)
        loss = loss.detach()
        self._loss_sum.add_(loss)
        return loss
