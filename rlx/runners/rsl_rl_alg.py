"""rsl_rl 5's algorithm and model interface over an rlx algorithm: what scripts, exporters
and runner subclasses (mjlab's ``MjlabOnPolicyRunner``, Isaac Lab's exporters) call on
``runner.alg``.

:class:`RslRlAlgorithm` wraps the rlx algorithm (any other attribute is the rlx
algorithm's: ``runner.alg.policy``, ``runner.alg.collect()``, ...) and adds rsl_rl's
``actor``, ``critic``, ``get_policy()``, ``learning_rate``, ``train_mode()`` /
``eval_mode()``, ``save()`` and ``load(state, load_cfg, strict)``.

:class:`ModelView` is one network of the rlx policy as rsl_rl's ``MLPModel``: its
parameters and normalizer statistics are the policy's own tensors (loading into the
view loads the policy; moving it moves the policy), ``forward(obs)`` acts (or values)
on the VecEnv's TensorDict, ``reset(dones)`` clears a recurrent policy's state for the
envs that ended, and ``as_jit()`` / ``as_onnx()`` give rsl_rl's deployable modules: one
``obs`` input, the actor's observation groups concatenated in ``obs_groups`` order.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor, nn

__all__ = ["ModelView", "RslRlAlgorithm"]


def _attach(root: nn.Module, name: str, tensor: Tensor, parameter: bool) -> None:
    """Register ``tensor`` under the dotted ``name`` in a tree of plain modules."""
    *path, leaf = name.split(".")
    module = root
    for part in path:
        if part not in module._modules:
            module.add_module(part, nn.Module())
        module = module._modules[part]
    if parameter:
        module.register_parameter(leaf, tensor)
    else:
        module.register_buffer(leaf, tensor)


class ModelView(nn.Module):
    """The actor or the critic of an rlx policy as rsl_rl 5's model (module docstring).

    Args:
        policy: The rlx policy.
        part: ``"actor"`` or ``"critic"``.
        groups: The observation groups the part reads, in ``obs_groups`` order.
        to_obs: What a VecEnv's ``get_observations()`` becomes for the policy.
    """

    def __init__(self, policy: nn.Module, part: str, groups: list[str], to_obs: Any) -> None:
        super().__init__()
        object.__setattr__(self, "_policy", policy)  # not a submodule: its state is the policy's
        self.part, self.groups, self._to_obs = part, list(groups), to_obs
        self.is_recurrent = bool(policy.recurrent)
        self._state: Tensor | None = None
        self._mirror()

    def _mirror(self) -> None:
        """(Re)register the policy's tensors of this part."""
        for name in list(self._modules):
            del self._modules[name]
        model = self._policy.model
        own = getattr(model, f"{self.part}_parameters", None)
        ids = {id(p) for p in own()} if callable(own) else {id(p) for p in model.parameters()}
        for name, p in self._policy.named_parameters():
            if id(p) in ids:
                _attach(self, name, p, parameter=True)
        for name, rms in self._policy.obs_normalizers.items():
            if self._policy._norm_keys[name][0] in self.groups:
                for leaf, buf in rms.named_buffers():
                    _attach(self, f"obs_normalizers.{name}.{leaf}", buf, parameter=False)

    def _apply(self, fn: Any, recurse: bool = True) -> ModelView:
        # ``.to(device)``, ``.double()``: the policy's tensors move, as rsl_rl's model's would.
        self._policy._apply(fn, recurse)
        self._state = None
        self._mirror()
        return self

    def train(self, mode: bool = True) -> ModelView:
        self._policy.train(mode)
        return super().train(mode)

    @property
    def output_std(self) -> Tensor:
        """The Gaussian's std (rsl_rl's ``output_std``, which its logger reads)."""
        log_std = getattr(self._policy.model, "log_std", None)
        if log_std is None:
            raise AttributeError("output_std: the policy has no state-independent std (not a Gaussian)")
        return log_std.detach().exp()

    @torch.no_grad()
    def forward(self, obs: Any, masks: Any = None, hidden_state: Any = None, stochastic_output: bool = False) -> Tensor:
        """The actor: env actions (the mean, or a sample with ``stochastic_output``); the
        critic: values ``[N, 1]``. A recurrent policy carries its state from call to call."""
        obs = self._to_obs(obs)
        policy, n = self._policy, obs.batch_size[0]
        if not self.is_recurrent:
            if self.part == "critic":
                return policy.value(obs)
            return policy.sample_actions(obs, deterministic=not stochastic_output).env_actions
        if self._state is None or self._state.shape[0] != n:
            self._state = policy.initial_state(n)
        resets = torch.zeros(n, 1, dtype=torch.bool, device=self._state.device)
        if self.part == "critic":
            return policy.value_step(obs, self._state, resets)  # the state stays (values do not advance it)
        step = policy.act_step(obs, self._state, resets, deterministic=not stochastic_output)
        self._state = step.state
        return step.env_actions

    def reset(self, dones: Tensor | None = None, hidden_state: Any = None) -> None:
        """Start the envs that ended (``dones``; all of them without) from the initial
        state. A feedforward policy has none: nothing to do."""
        if self._state is None or dones is None:
            self._state = None
            return
        ended = dones.reshape(-1).bool().to(self._state.device).view(-1, *([1] * (self._state.dim() - 1)))
        self._state = torch.where(ended, self._policy.initial_state(self._state.shape[0]), self._state)

    def get_hidden_state(self) -> Tensor | None:
        """The carried state ``[N, *state]`` (``None`` before the first call)."""
        return self._state

    def as_jit(self) -> nn.Module:
        """A TorchScript-traceable module: ``forward(obs [N, D])``, the actor's groups
        concatenated, and ``reset()``."""
        if self.is_recurrent:
            # Tracing the recurrent model's TensorDict sequence pass fails on traced sizes.
            raise ValueError("TorchScript export of a recurrent policy from the runner is not supported yet; deploy it "
                             "with rlx.load_policy (a checkpoint) or the runner's inference policy")
        return _Deployable(self)

    def as_onnx(self, verbose: bool = False) -> nn.Module:
        """The module rsl_rl's ONNX export takes (``input_names``, ``output_names``,
        ``get_dummy_inputs()``)."""
        if self.is_recurrent:
            raise ValueError("ONNX export of a recurrent policy from the runner is not supported yet; export_policy_to_jit "
                             "writes it (with reset()), or rlx.export_onnx with a tensor observation")
        return _Deployable(self)


class _Deployable(nn.Module):
    """The deterministic actor on the concatenated groups (rsl_rl's deployed input)."""

    def __init__(self, view: ModelView) -> None:
        super().__init__()
        from rlx.run.export import DeployedPolicy, DeployedRecurrentPolicy

        policy = copy.deepcopy(view._policy).cpu()  # SYNC: export copies the policy to the CPU, once
        spec = policy.observation_spec
        self.keys = list(view.groups)
        self.shapes = [tuple(spec[k].shape) for k in self.keys]
        self.widths = [int(torch.Size(s).numel()) for s in self.shapes]
        self.recurrent = view.is_recurrent
        self.deployed: nn.Module = DeployedRecurrentPolicy(policy) if self.recurrent else DeployedPolicy(policy)
        initial = self.deployed.initial_state(1) if self.recurrent else torch.zeros(1, 0)
        self.register_buffer("state", initial.clone())  # a feedforward policy's is empty
        self.register_buffer("initial", initial)
        self.input_names, self.output_names = ["obs"], ["actions"]

    def get_dummy_inputs(self) -> tuple[Tensor]:
        return (torch.zeros(1, sum(self.widths)),)

    def forward(self, obs: Tensor) -> Tensor:
        n = obs.shape[0]
        parts = torch.split(obs, self.widths, dim=-1)
        groups = TensorDict({k: p.reshape(n, *s) for k, p, s in zip(self.keys, parts, self.shapes)}, batch_size=[n])
        if not self.recurrent:
            return self.deployed(groups)
        actions, state = self.deployed(groups, self.state, torch.zeros(n, dtype=torch.bool))
        self.state.copy_(state)
        return actions

    def reset(self) -> Tensor:
        """Back to the initial state (a recurrent policy's; a feedforward one's is empty);
        returns it (a traced method must return something)."""
        return self.state.copy_(self.initial)


class RslRlAlgorithm:
    """rsl_rl 5's algorithm interface over an rlx algorithm (module docstring).

    Args:
        algorithm: The rlx algorithm (PPO or recurrent PPO).
        obs_groups: rsl_rl's ``{"actor": [...], "critic": [...]}``.
    """

    def __init__(self, algorithm: Any, obs_groups: dict[str, list[str]]) -> None:
        self.__dict__["_algorithm"] = algorithm
        to_obs = algorithm.env.groups
        self.__dict__["actor"] = ModelView(algorithm.policy, "actor", obs_groups["actor"], to_obs)
        self.__dict__["critic"] = ModelView(algorithm.policy, "critic", obs_groups["critic"], to_obs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_algorithm"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "learning_rate":
            self._algorithm._set_lr(float(value))
            return
        setattr(self._algorithm, name, value)

    @property
    def algorithm(self) -> Any:
        """The rlx algorithm itself."""
        return self._algorithm

    @property
    def learning_rate(self) -> float:
        """The current learning rate (the adaptive schedule's)."""
        return float(self._algorithm.lr)

    @property
    def student(self) -> ModelView:
        """A distillation's student (rsl_rl's ``Distillation.student``): the actor."""
        return self.actor

    def get_policy(self) -> ModelView:
        """The actor (rsl_rl's policy model)."""
        return self.actor

    def train_mode(self) -> None:
        self._algorithm.policy.train()

    def eval_mode(self) -> None:
        self._algorithm.policy.eval()

    def save(self) -> dict[str, Any]:
        """rsl_rl's algorithm dict: the actor's and the critic's state (the policy's
        tensors, rlx's names) and the optimizer's."""
        return {"actor_state_dict": self.actor.state_dict(), "critic_state_dict": self.critic.state_dict(),
                "optimizer_state_dict": self._algorithm.optimizer.state_dict()}

    def load(self, loaded_dict: dict[str, Any], load_cfg: dict[str, bool] | None = None, strict: bool = True) -> bool:
        """Load what :meth:`save` returned, the parts ``load_cfg`` names (all by default:
        ``actor``, ``critic``, ``optimizer``, ``iteration``); returns whether the
        iteration should be loaded too."""
        load_cfg = load_cfg if load_cfg is not None else {"actor": True, "critic": True, "optimizer": True,
                                                          "iteration": True}
        if load_cfg.get("actor"):
            self.actor.load_state_dict(loaded_dict["actor_state_dict"], strict=strict)
        if load_cfg.get("critic"):
            self.critic.load_state_dict(loaded_dict["critic_state_dict"], strict=strict)
        if load_cfg.get("optimizer"):
            alg = self._algorithm
            alg._load_optimizer_state(loaded_dict["optimizer_state_dict"])
            lr = float(alg.optimizer.param_groups[0]["lr"])
            if alg._lr_applied is not None:  # a tensor LR: the groups get back the live one
                for group in alg.optimizer.param_groups:
                    group["lr"] = alg._lr_applied
            alg._set_lr(lr)
        return bool(load_cfg.get("iteration", False))
