"""``DistillationRunner``: rsl_rl's distillation runner calls, trained by rlx.

An Isaac Lab, mjlab or Genesis script that distils a student switches by changing one
import, as for PPO::

    from rlx.runners import DistillationRunner   # was: from rsl_rl.runners import DistillationRunner

    runner = DistillationRunner(env, agent_cfg.to_dict(), log_dir=log_dir, device=agent_cfg.device)
    runner.load(teacher_checkpoint)              # the trained teacher
    runner.learn(num_learning_iterations=agent_cfg.max_iterations)

``train_cfg`` is rsl_rl's distillation dict
(:func:`~rlx.runners.rsl_rl_cfg.distillation_config_from_rsl_rl` maps it; its fields are
checked when the runner is made). As in rsl_rl, the algorithm needs its teacher before
it learns: :meth:`DistillationRunner.load` takes

* a teacher: an rlx :class:`~rlx.runners.OnPolicyRunner` checkpoint or ``rlx train``
  checkpoint file, or an rsl_rl 5.x PPO checkpoint (``actor_state_dict``, rebuilt from
  ``train_cfg``'s ``teacher`` section) or distillation checkpoint
  (``teacher_state_dict``): a new student is made to distil it;
* or a checkpoint this runner saved: the student, its optimizer, the iteration and the
  teacher (saved inside it, so the teacher's file may be gone) are restored, and the
  next :meth:`learn` continues exactly.

The student is rlx's :class:`~rlx.algorithms.distillation.Distillation` (DAgger: the
student acts, and regresses its mean action on the teacher's); it saves, exports
(``export_policy_to_jit/onnx``) and deploys (``get_inference_policy``) as the PPO
runner's policy does, on the student's observation groups alone.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import torch

from rlx import __version__
from rlx.config import ConfigError
from rlx.core.yaml_types import config_to_dict
from rlx.envs.rsl_rl import RslRlVecEnv
from rlx.run.checkpoint import load_checkpoint, save_checkpoint_atomic
from rlx.runners.on_policy import OnPolicyRunner
from rlx.runners.rsl_rl_alg import RslRlAlgorithm
from rlx.runners.rsl_rl_teacher import rlx_teacher_from_rsl_rl
from rlx.runners.rsl_rl_cfg import distillation_config_from_rsl_rl, rsl_rl_teacher_cfg, teacher_kind

__all__ = ["DistillationRunner"]

#: The ``format`` of a distillation runner checkpoint.
DISTILLATION_CHECKPOINT = "rlx-distillation-runner-1"


class DistillationRunner(OnPolicyRunner):
    """rsl_rl's ``DistillationRunner`` interface over rlx's distillation (module
    docstring). ``alg`` is ``None`` until a teacher is loaded."""

    def __init__(self, env: Any, train_cfg: dict[str, Any], log_dir: str | None = None, device: str = "cpu") -> None:
        self._open(env, train_cfg, log_dir, device)
        #: The mapped config, its ``teacher`` a placeholder until :meth:`load` (the fields
        #: are checked now).
        self.config = distillation_config_from_rsl_rl(self.cfg, env.num_envs, self.device)
        self.alg: Any = None
        self._teacher: dict[str, Any] | None = None  # {"kind": "rlx" | "rsl_rl", "checkpoint": its state}

    def learn(self, num_learning_iterations: int, init_at_random_ep_len: bool = False) -> None:
        """Distil ``num_learning_iterations`` iterations (the student collects, then
        regresses on the teacher); rsl_rl's arguments."""
        if self.alg is None:
            raise ValueError("Teacher model parameters not loaded: load the teacher's checkpoint with "
                             "DistillationRunner.load(path) before learn()")
        super().learn(num_learning_iterations, init_at_random_ep_len)

    def save(self, path: str, infos: dict[str, Any] | None = None) -> None:
        """Write the student's whole state, the iteration, ``train_cfg`` and the teacher
        to ``path`` (atomically)."""
        if self.alg is None:
            raise ValueError("DistillationRunner.save: nothing to save before a teacher is loaded")
        payload = {"format": DISTILLATION_CHECKPOINT, "rlx_version": __version__, "algorithm": self.alg.state_dict(),
                   "iter": self.current_learning_iteration, "infos": infos, "train_cfg": self.cfg,
                   "teacher": self._teacher,
                   "config": {"algorithm": "distillation", "config": config_to_dict(self.config)}}
        save_checkpoint_atomic(payload, path)

    def load(self, path: str, load_cfg: dict[str, Any] | None = None, strict: bool = True,
             map_location: str | None = None) -> dict[str, Any] | None:
        """Load a teacher (a new student distils it) or this runner's own checkpoint (the
        distillation resumes); see the module docstring. Returns the checkpoint's
        ``infos``. ``load_cfg``, ``strict`` and ``map_location`` are rsl_rl's arguments:
        rlx loads everything a checkpoint holds, strictly, onto the runner's device.

        Raises:
            ConfigError: naming the checkpoint: neither a teacher nor a distillation of
                this runner's, or a teacher unlike the env's.
        """
        state = torch.load(path, map_location="cpu", weights_only=False)  # rsl_rl's files are not weights-only
        if not isinstance(state, dict):
            raise ConfigError(f"DistillationRunner.load: {path} is not a checkpoint")
        if state.get("format") == DISTILLATION_CHECKPOINT:
            self._build(state["teacher"])
            self.alg.load_state_dict(state["algorithm"])
            self.current_learning_iteration = int(state["iter"])
            return state.get("infos")
        where = f"DistillationRunner.load: {path}"
        if teacher_kind(state, where) == "rlx":
            teacher = {"kind": "rlx", "checkpoint": load_checkpoint(path)}  # rlx's own: weights only
        else:  # rsl_rl's (5.x or 3.x/4.x), rebuilt as an rlx policy on the env's specs
            env = self.env
            specs = RslRlVecEnv.factory(lambda num_envs, device: env, reset_env=False)(env.num_envs, device=self.device)
            teacher = {"kind": "rlx", "checkpoint": rlx_teacher_from_rsl_rl(state, self.cfg, specs.observation_spec,
                                                                            specs.action_spec, where)}
        self._build(teacher)
        return state.get("infos")

    def _build(self, teacher: dict[str, Any]) -> None:
        """A new student of ``teacher`` (its checkpoint state, through a temporary file
        that the algorithm reads while it is built)."""
        rsl_rl = teacher["kind"] == "rsl_rl"
        fd, tmp = tempfile.mkstemp(suffix=".pt", prefix="rlx-teacher-")
        os.close(fd)
        try:
            torch.save(teacher["checkpoint"], tmp)
            config = distillation_config_from_rsl_rl(self.cfg, self.env.num_envs, self.device, teacher=tmp,
                                                     teacher_rsl_rl_cfg=rsl_rl_teacher_cfg(self.cfg) if rsl_rl else None)
            env = self.env
            algorithm = config.build(RslRlVecEnv.factory(lambda num_envs, device: env, reset_env=False))
            groups = config.obs_groups or {}
            self.alg = RslRlAlgorithm(algorithm, {"actor": groups.get("actor", ["policy"]),
                                                  "critic": groups.get("critic", ["policy"])})
        finally:
            os.unlink(tmp)
        self.config, self._teacher = config, teacher
        self.current_learning_iteration = 0
        self._open_logger()
