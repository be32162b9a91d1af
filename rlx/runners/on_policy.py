"""``OnPolicyRunner``: rsl_rl's runner calls, trained by rlx.

An Isaac Lab, mjlab or Genesis training script switches by changing one import::

    from rlx.runners import OnPolicyRunner   # was: from rsl_rl.runners import OnPolicyRunner

    runner = OnPolicyRunner(env, agent_cfg.to_dict(), log_dir=log_dir, device=agent_cfg.device)
    runner.learn(num_learning_iterations=agent_cfg.max_iterations, init_at_random_ep_len=True)

``env`` is the script's rsl_rl ``VecEnv``; ``train_cfg`` its dict
(:func:`~rlx.runners.rsl_rl_cfg.algorithm_config_from_rsl_rl` maps it: MLP, RNN and CNN
models). ``learn``, ``save``, ``load``, ``get_inference_policy``, ``export_policy_to_jit``
and ``export_policy_to_onnx`` take rsl_rl's arguments and number iterations as rsl_rl
does; ``alg`` is rsl_rl 5's algorithm interface (:mod:`rlx.runners.rsl_rl_alg`) and
``logger`` its logger's attributes. Checkpoints are rlx's (algorithm state, iteration,
the ``train_cfg``), written atomically as ``model_<it>.pt`` in ``log_dir``; ``load``
also reads rsl_rl's (:mod:`rlx.runners.rsl_rl_checkpoint`). TensorBoard events go to
``log_dir`` under rsl_rl's tags when ``logger`` is ``"tensorboard"`` (the default), and
every iteration's statistics (the env's ``extras["log"]`` included, as ``env/...``) to a
Weights & Biases run when it is ``"wandb"`` (``wandb_project``, ``run_name``;
``pip install 'rlx[wandb]'``). docs/envs.md lists what differs from rsl_rl.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rlx import __version__
from rlx.config import ConfigError
from rlx.core import distributed as rdist
from rlx.envs.rsl_rl import RslRlVecEnv
from rlx.run.checkpoint import load_checkpoint, save_checkpoint_atomic
from rlx.core.yaml_types import config_to_dict
from rlx.runners.rsl_rl_alg import RUNNER_CHECKPOINT, ModelView, RslRlAlgorithm
from rlx.runners.rsl_rl_cfg import algorithm_config_from_rsl_rl
from rlx.runners.rsl_rl_logging import RunnerLogger, join_torchrun as _join_torchrun, obs_sets as _obs_sets, rsl_rl_tags

__all__ = ["OnPolicyRunner"]



class OnPolicyRunner:
    """rsl_rl's ``OnPolicyRunner`` interface over an rlx PPO (module docstring).

    Attributes:
        alg: The rlx algorithm (``alg.policy``, ``alg.optimizer``, ...).
        current_learning_iteration: Iterations trained so far (rsl_rl's counter).
    """

    def __init__(self, env: Any, train_cfg: dict[str, Any], log_dir: str | None = None, device: str = "cpu") -> None:
        self._open(env, train_cfg, log_dir, device)
        self.config = algorithm_config_from_rsl_rl(self.cfg, env.num_envs, self.device, env=env)
        algorithm = self.config.build(RslRlVecEnv.factory(lambda num_envs, device: env, reset_env=False))
        self.alg = RslRlAlgorithm(algorithm, _obs_sets(self.cfg, algorithm.env.observation_spec.keys()))
        self._open_logger()

    def _open(self, env: Any, train_cfg: dict[str, Any], log_dir: str | None, device: str) -> None:
        """What every runner keeps of its arguments; the logger's name checked."""
        self.env, self.cfg, self.device = env, copy.deepcopy(dict(train_cfg)), str(device)
        _join_torchrun(self.device)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        #: rsl_rl's ``runner.logger``: ``log_dir`` (a str or None), ``writer`` and ``git_status_repos``.
        self.logger = RunnerLogger(log_dir)
        logger = self.cfg.get("logger", "tensorboard")
        logger = logger.get("class_name") if isinstance(logger, dict) else logger
        self._logger = {"TensorboardLogWriter": "tensorboard", "WandbLogWriter": "wandb"}.get(logger, logger)
        if self._logger not in (None, "tensorboard", "wandb"):
            raise ConfigError(f"train_cfg['logger']: {logger!r} is not supported yet (tensorboard and wandb are)")
        self.save_interval = int(self.cfg.get("save_interval", 50))
        self.current_learning_iteration = 0
        self._wandb = None
        self._code_state_stored = False

    @property
    def git_status_repos(self) -> list[str]:
        """Files whose git repositories' state the first logged iteration records (rlx's own first)."""
        return self.logger.git_status_repos

    @property
    def _writer(self) -> Any:
        return self.logger.writer

    @property
    def is_distributed(self) -> bool:
        """Whether the runner trains data-parallel under torchrun (rsl_rl's attribute)."""
        return rdist.world_size() > 1

    def add_git_repo_to_log(self, repo_file_path: str) -> None:
        """Record the git state (status and diff) of the repository holding
        ``repo_file_path`` in ``log_dir/git/`` when training starts, as rsl_rl does."""
        self.logger.git_status_repos.append(str(repo_file_path))

    def _store_code_state(self) -> None:
        """``log_dir/git/<repo>.diff`` for each recorded repository, once (rank 0)."""
        if self._code_state_stored or self.log_dir is None or rdist.rank() != 0:
            return
        self._code_state_stored = True
        for path in dict.fromkeys(self.git_status_repos):
            _store_git_state(Path(path), self.log_dir / "git")

    def _open_logger(self) -> None:
        """The TensorBoard writer or W&B run (with :attr:`config`), once."""
        if self.logger.writer is not None or self._wandb is not None or rdist.rank() != 0:
            return
        if self._logger == "wandb":
            self._wandb = self.logger.writer = _wandb_run(self.cfg, self.log_dir, self.config)
        elif self.log_dir is not None and self._logger is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is an optional extra
                SummaryWriter = None
            if SummaryWriter is not None:
                self.logger.writer = SummaryWriter(str(self.log_dir))

    def learn(self, num_learning_iterations: int, init_at_random_ep_len: bool = False) -> None:
        """Train ``num_learning_iterations`` iterations (collect, then update) from where
        the runner is; ``init_at_random_ep_len`` spreads the envs' episode clocks first
        (rsl_rl's exploration trick). The env is never reset: the first collect starts
        from ``get_observations()``, as rsl_rl's runner does.

        Iterations are numbered as rsl_rl numbers them: they run from
        :attr:`current_learning_iteration` on, which then holds the last one's number
        (``learn(3)`` from a new runner runs 0, 1, 2 and leaves 2; a following ``learn``
        starts from 2 again, as rsl_rl's does); ``model_<it>.pt`` is written where
        ``it % save_interval == 0`` and after the last iteration."""
        if init_at_random_ep_len:
            adapter = self.alg.env
            if self.alg.resets_next_collect:  # after the reset it opens with (which would zero the clocks)
                adapter.randomize_episode_lengths_at_reset = True
            else:
                adapter.randomize_episode_lengths()
        self._store_code_state()
        self.alg.policy.train()
        start_it = self.current_learning_iteration
        writes = self.log_dir is not None and rdist.rank() == 0  # under torchrun, rank 0 alone (rsl_rl's rule)
        for it in range(start_it, start_it + int(num_learning_iterations)):
            start = time.perf_counter()
            stats = {**self.alg.collect(), **self.alg.step()}
            self.current_learning_iteration = it
            self._log(it, stats, time.perf_counter() - start)
            if writes and self.save_interval and it % self.save_interval == 0:
                self.save(str(self.log_dir / f"model_{it}.pt"))
        if writes:
            self.save(str(self.log_dir / f"model_{self.current_learning_iteration}.pt"))
            if self.logger.writer is not None and hasattr(self.logger.writer, "flush"):
                self.logger.writer.flush()

    def close(self) -> None:
        """Finish the logger's run (W&B's ``finish``; TensorBoard's files are closed)."""
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
        elif self.logger.writer is not None:
            self.logger.writer.close()
        self.logger.writer = None

    def _log(self, it: int, stats: dict[str, float], seconds: float) -> None:
        finite = {k: v for k, v in stats.items() if isinstance(v, float) and math.isfinite(v)}
        if self._writer is not None and self._wandb is None:
            for key, value in rsl_rl_tags(finite, self.alg, seconds).items():
                self._writer.add_scalar(key, value, it)
        if self._wandb is not None:
            self._wandb.log({**finite, "env_steps": self.alg.env_steps}, step=it, commit=True)
        if rdist.rank() != 0:  # under torchrun, rank 0 alone prints (as rsl_rl's)
            return
        ret = stats.get("episodes/return_mean", math.nan)
        print(f"rlx {type(self).__name__}: iteration {it} | env steps {self.alg.env_steps:,} | {seconds:.2f} s | "
              f"return {ret:.2f} | lr {stats.get('monitors/lr', math.nan):.2e}", flush=True)

    def save(self, path: str, infos: dict[str, Any] | None = None) -> None:
        """Write the algorithm's whole state, the iteration and ``train_cfg`` to ``path``
        (atomically)."""
        payload = {"format": RUNNER_CHECKPOINT, "rlx_version": __version__, "algorithm": self.alg.state_dict(),
                   "iter": self.current_learning_iteration, "infos": infos, "train_cfg": self.cfg,
                   # The config the policy was built with (what a distillation reads of its teacher).
                   "config": {"algorithm": "ppo", "config": config_to_dict(self.config)}}
        save_checkpoint_atomic(payload, path)

    def load(self, path: str, load_cfg: dict[str, Any] | None = None, strict: bool = True,
             map_location: str | None = None) -> dict[str, Any] | None:
        """Restore a checkpoint; returns its ``infos``.

        * Without ``load_cfg``: everything :meth:`save` wrote; the next :meth:`learn`
          continues exactly. A runner with another number of envs (a play script's 50)
          takes the shared state (policy, optimizer, normalizers, counters) and starts
          its envs afresh.
        * With ``load_cfg`` (rsl_rl's ``{"actor", "critic", "optimizer", "iteration"}``
          flags): those parts alone; ``strict`` as in ``load_state_dict``.
        * An rsl_rl checkpoint (``actor_state_dict``, or 3.x/4.x's ``model_state_dict``):
          its networks, normalizers and (when they match) optimizer state, mapped onto
          rlx's model (:mod:`rlx.runners.rsl_rl_checkpoint`).

        ``map_location`` is accepted; tensors always land on the runner's device.
        """
        state = load_checkpoint(path)
        if self.alg.load(state, load_cfg, strict, where=str(path)):  # rsl_rl's runner's two steps, which
            self.current_learning_iteration = int(state["iter"])   # subclasses (mjlab's) repeat
        return state.get("infos")

    def get_inference_policy(self, device: str | None = None) -> ModelView:
        """The actor as rsl_rl's policy model (:class:`~rlx.runners.rsl_rl_alg.ModelView`):
        ``policy(obs)`` takes the VecEnv's observations and returns the deterministic
        actions, ``policy.reset(dones)`` restarts a recurrent policy's state for the envs
        that ended (a no-op otherwise). Puts the policy in eval mode, as rsl_rl does."""
        self.alg.eval_mode()
        policy = self.alg.get_policy()
        return policy.to(device) if device is not None else policy

    def export_policy_to_jit(self, path: str, filename: str = "policy.pt") -> None:
        """TorchScript of the deterministic actor, as rsl_rl exports it: ``forward(obs)``
        on the actor's observation groups concatenated in ``obs_groups`` order (the
        normalizer inside), and ``reset()`` (a recurrent policy's one-env state)."""
        module = self.alg.get_policy().as_jit().eval()
        example = module.get_dummy_inputs()
        traced = torch.jit.trace_module(module, {"forward": example, "reset": ()}, check_trace=False)
        out = Path(path) / filename
        out.parent.mkdir(parents=True, exist_ok=True)
        traced.save(str(out))

    def export_policy_to_onnx(self, path: str, filename: str = "policy.onnx", verbose: bool = False) -> None:
        """ONNX of the deterministic actor (``pip install 'rlx[onnx]'``), as rsl_rl names
        it: input ``obs`` (the actor's groups concatenated in ``obs_groups`` order; the
        batch dimension dynamic), output ``actions``; a recurrent policy also takes
        ``h_in`` and returns ``h_out``, rlx's stacked state ``[N, *state]`` (rsl_rl splits
        an LSTM's into ``h`` and ``c``). Checked against the eager policy with onnxruntime
        when it is installed."""
        from rlx.run.export import _check_onnx, _require_onnx

        _require_onnx()
        module = self.alg.get_policy().as_onnx(verbose=verbose).eval()
        out = Path(path) / filename
        out.parent.mkdir(parents=True, exist_ok=True)
        def inputs(n: int) -> tuple[Tensor, ...]:  # random observations (and states)
            return tuple(torch.randn(n, *x.shape[1:]) for x in module.get_dummy_inputs())

        batch = torch.export.Dim("batch")
        torch.onnx.export(module, inputs(3), str(out), input_names=module.input_names,
                          output_names=module.output_names, dynamo=True, verbose=verbose,
                          dynamic_shapes=tuple({0: batch} for _ in module.input_names))
        _check_onnx(out, module, inputs(64), module.input_names)


def _store_git_state(path: Path, out_dir: Path) -> None:
    """Write ``git status`` and ``git diff`` of the repository holding ``path`` to
    ``out_dir/<repository name>.diff``; a path outside any repository (or no git) writes
    nothing."""
    import subprocess

    folder = path if path.is_dir() else path.parent
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout if proc.returncode == 0 else None

    root = git("rev-parse", "--show-toplevel")
    if not root:
        return
    status, diff = git("status", "--short"), git("diff")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{Path(root.strip()).name}.diff").write_text(
        f"--- git status ---\n{status or ''}\n\n--- git diff ---\n{diff or ''}")


def _wandb_run(cfg: dict[str, Any], log_dir: Path | None, config: Any) -> Any:
    """A W&B run for ``logger: wandb`` (``pip install 'rlx[wandb]'``): the project from
    ``wandb_project`` (or the logger dict's ``project_name``), the name from ``run_name``;
    ``WANDB_MODE=offline`` keeps it on disk."""
    try:
        import wandb
    except ImportError as e:
        raise ConfigError("train_cfg['logger']: 'wandb' needs the wandb package: pip install 'rlx[wandb]'") from e
    logger = cfg.get("logger")
    project = (logger.get("project_name") if isinstance(logger, dict) else None) or cfg.get("wandb_project") or "rlx"
    from rlx.core.yaml_types import config_to_dict

    return wandb.init(project=project, name=cfg.get("run_name") or None,
                      dir=str(log_dir) if log_dir is not None else None,
                      config={"train_cfg": cfg, "rlx": config_to_dict(config)}, reinit="finish_previous",
                      tags=list(cfg.get("wandb_tags") or []) or None)
