"""``OnPolicyRunner``: rsl_rl's runner calls, trained by rlx.

An Isaac Lab, mjlab or Genesis training script switches by changing one import::

    from rlx.runners import OnPolicyRunner   # was: from rsl_rl.runners import OnPolicyRunner

    runner = OnPolicyRunner(env, agent_cfg.to_dict(), log_dir=log_dir, device=agent_cfg.device)
    runner.learn(num_learning_iterations=agent_cfg.max_iterations, init_at_random_ep_len=True)

``env`` is the script's rsl_rl ``VecEnv``; ``train_cfg`` its dict
(:func:`~rlx.runners.rsl_rl_cfg.algorithm_config_from_rsl_rl` maps it). ``learn``,
``save``, ``load``, ``get_inference_policy``, ``export_policy_to_jit`` and
``export_policy_to_onnx`` take rsl_rl's arguments. Checkpoints are rlx's (algorithm
state, iteration, the ``train_cfg``), written atomically as ``model_<it>.pt`` in
``log_dir`` every ``save_interval`` iterations and at the end; TensorBoard events go to
``log_dir`` when ``logger`` is ``"tensorboard"`` (the default), and every iteration's
statistics (the env's ``extras["log"]`` included, as ``env/...``) to a Weights & Biases
run when it is ``"wandb"`` (``wandb_project``, ``run_name``; ``pip install 'rlx[wandb]'``).
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any, Callable

import torch
from tensordict import TensorDictBase
from torch import Tensor

from rlx import __version__
from rlx.config import ConfigError
from rlx.core import distributed as rdist
from rlx.envs.rsl_rl import RslRlVecEnv
from rlx.run.checkpoint import load_checkpoint, save_checkpoint_atomic
from rlx.core.yaml_types import config_to_dict
from rlx.runners.rsl_rl_cfg import algorithm_config_from_rsl_rl

__all__ = ["OnPolicyRunner"]

#: The ``format`` of a runner checkpoint.
RUNNER_CHECKPOINT = "rlx-on-policy-runner-1"


class OnPolicyRunner:
    """rsl_rl's ``OnPolicyRunner`` interface over an rlx PPO (module docstring).

    Attributes:
        alg: The rlx algorithm (``alg.policy``, ``alg.optimizer``, ...).
        current_learning_iteration: Iterations trained so far (rsl_rl's counter).
    """

    def __init__(self, env: Any, train_cfg: dict[str, Any], log_dir: str | None = None, device: str = "cpu") -> None:
        self._open(env, train_cfg, log_dir, device)
        self.config = algorithm_config_from_rsl_rl(self.cfg, env.num_envs, self.device, env=env)
        self.alg = self.config.build(RslRlVecEnv.factory(lambda num_envs, device: env))
        self._open_logger()

    def _open(self, env: Any, train_cfg: dict[str, Any], log_dir: str | None, device: str) -> None:
        """What every runner keeps of its arguments; the logger's name checked."""
        self.env, self.cfg, self.device = env, copy.deepcopy(dict(train_cfg)), str(device)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        logger = self.cfg.get("logger", "tensorboard")
        logger = logger.get("class_name") if isinstance(logger, dict) else logger
        self._logger = {"TensorboardLogWriter": "tensorboard", "WandbLogWriter": "wandb"}.get(logger, logger)
        if self._logger not in (None, "tensorboard", "wandb"):
            raise ConfigError(f"train_cfg['logger']: {logger!r} is not supported yet (tensorboard and wandb are)")
        self.save_interval = int(self.cfg.get("save_interval", 50))
        self.current_learning_iteration = 0
        self._writer = self._wandb = None
        #: Files whose git repositories' state the first logged iteration records (rsl_rl's
        #: ``git_status_repos``; rlx's own first).
        self.git_status_repos: list[str] = [__file__]
        self._code_state_stored = False

    @property
    def is_distributed(self) -> bool:
        """Whether the runner trains data-parallel under torchrun (rsl_rl's attribute)."""
        return rdist.world_size() > 1

    def add_git_repo_to_log(self, repo_file_path: str) -> None:
        """Record the git state (status and diff) of the repository holding
        ``repo_file_path`` in ``log_dir/git/`` when training starts, as rsl_rl does."""
        self.git_status_repos.append(str(repo_file_path))

    def _store_code_state(self) -> None:
        """``log_dir/git/<repo>.diff`` for each recorded repository, once (rank 0)."""
        if self._code_state_stored or self.log_dir is None or rdist.rank() != 0:
            return
        self._code_state_stored = True
        for path in dict.fromkeys(self.git_status_repos):
            _store_git_state(Path(path), self.log_dir / "git")

    def _open_logger(self) -> None:
        """The TensorBoard writer or W&B run (with :attr:`config`), once."""
        if self._writer is not None or self._wandb is not None:
            return
        if self._logger == "wandb":
            self._wandb = _wandb_run(self.cfg, self.log_dir, self.config)
        elif self.log_dir is not None and self._logger is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is an optional extra
                SummaryWriter = None
            if SummaryWriter is not None:
                self._writer = SummaryWriter(str(self.log_dir))

    def learn(self, num_learning_iterations: int, init_at_random_ep_len: bool = False) -> None:
        """Train ``num_learning_iterations`` iterations (collect, then update) from where
        the runner is; ``init_at_random_ep_len`` spreads the envs' episode clocks first
        (rsl_rl's exploration trick), then resets the collect on them."""
        if init_at_random_ep_len:
            adapter = self.alg.env
            if self.alg.resets_next_collect:  # after the reset it opens with (which would zero the clocks)
                adapter.randomize_episode_lengths_at_reset = True
            else:
                adapter.randomize_episode_lengths()
        self._store_code_state()
        end = self.current_learning_iteration + int(num_learning_iterations)
        while self.current_learning_iteration < end:
            start = time.perf_counter()
            stats = {**self.alg.collect(), **self.alg.step()}
            self.current_learning_iteration += 1
            it = self.current_learning_iteration
            self._log(it, stats, time.perf_counter() - start)
            if self.log_dir is not None and self.save_interval and it % self.save_interval == 0:
                self.save(str(self.log_dir / f"model_{it}.pt"))
        if self.log_dir is not None:
            self.save(str(self.log_dir / f"model_{self.current_learning_iteration}.pt"))
            if self._writer is not None:
                self._writer.flush()

    def close(self) -> None:
        """Finish the logger's run (W&B's ``finish``; TensorBoard's files are closed)."""
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _log(self, it: int, stats: dict[str, float], seconds: float) -> None:
        finite = {k: v for k, v in stats.items() if isinstance(v, float) and math.isfinite(v)}
        if self._writer is not None:
            for key, value in finite.items():
                self._writer.add_scalar(key, value, it)
        if self._wandb is not None:
            self._wandb.log({**finite, "env_steps": self.alg.env_steps}, step=it, commit=True)
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
        """Restore what :meth:`save` wrote (the next :meth:`learn` continues exactly);
        returns its ``infos``. ``load_cfg``, ``strict`` and ``map_location`` are rsl_rl's
        arguments: rlx always loads everything, strictly, onto the runner's device."""
        state = load_checkpoint(path)
        if state.get("format") != RUNNER_CHECKPOINT:
            raise ValueError(f"{path}: not an rlx OnPolicyRunner checkpoint (format {state.get('format')!r})")
        self.alg.load_state_dict(state["algorithm"])
        self.current_learning_iteration = int(state["iter"])
        return state.get("infos")

    def get_inference_policy(self, device: str | None = None) -> Callable[[TensorDictBase], Tensor]:
        """``policy(obs) -> actions``: the deterministic policy on the VecEnv's
        observations (its TensorDict of groups)."""
        policy = self.alg.policy if device is None else self.alg.policy.to(device)
        groups = self.alg.env.groups

        def act(obs: TensorDictBase) -> Tensor:
            with torch.no_grad():
                return policy.act(groups(obs), deterministic=True).env_actions

        return act

    def export_policy_to_jit(self, path: str, filename: str = "policy.pt") -> None:
        """TorchScript of the deterministic policy, taking the actor group's tensor."""
        self._export(Path(path) / filename, "jit")

    def export_policy_to_onnx(self, path: str, filename: str = "policy.onnx", verbose: bool = False) -> None:
        """ONNX of the deterministic policy (``pip install 'rlx[onnx]'``): one input per
        observation group the actor reads, in sorted order."""
        self._export(Path(path) / filename, "onnx")

    def _export(self, out: Path, kind: str) -> None:
        from rlx.run.export import DeployedPolicy, export_onnx

        out.parent.mkdir(parents=True, exist_ok=True)
        if kind == "onnx":
            export_onnx(self.alg.policy, out)
            return
        keys = self.alg.policy.actor_obs_keys or []
        if len(keys) != 1:
            raise ValueError(f"export_policy_to_jit: the actor reads {keys}; TorchScript export takes one group")
        policy = copy.deepcopy(self.alg.policy).cpu()  # SYNC: export copies the policy to the CPU, once
        module = _OneGroup(DeployedPolicy(policy, deterministic=True), keys[0])
        example = self.alg.policy.observation_spec[keys[0]].zero((2,)).cpu()  # SYNC: export
        torch.jit.trace(module, (example,), check_trace=False).save(str(out))


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
                      config={"train_cfg": cfg, "rlx": config_to_dict(config)}, reinit="finish_previous")


class _OneGroup(torch.nn.Module):
    """A deployed policy called with the one observation group its actor reads."""

    def __init__(self, deployed: torch.nn.Module, key: str) -> None:
        super().__init__()
        self.deployed, self.key = deployed, key

    def forward(self, obs: Tensor) -> Tensor:
        from tensordict import TensorDict

        return self.deployed(TensorDict({self.key: obs}, batch_size=obs.shape[:1]))
