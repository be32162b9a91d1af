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
import itertools
import math
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlx.members.optim import load_optimizer_state

__all__ = ["ModelView", "PolicyView", "RslRlAlgorithm", "RUNNER_CHECKPOINT"]

#: The ``format`` of an :class:`rlx.runners.OnPolicyRunner` checkpoint.
RUNNER_CHECKPOINT = "rlx-on-policy-runner-1"
#: The key :meth:`RslRlAlgorithm.save` marks its dict with (its tensors carry rlx's names).
RLX_NAMES = "rlx_names"


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
        concatenated, and ``reset()`` (a recurrent policy: one env, its state inside)."""
        return _Deployable(self)

    def as_onnx(self, verbose: bool = False) -> nn.Module:
        """The module rsl_rl's ONNX export takes (``input_names``, ``output_names``,
        ``get_dummy_inputs()``); a recurrent policy's takes and returns its state."""
        return _Deployable(self, onnx=True)


class PolicyView(nn.Module):
    """The whole rlx policy as rsl_rl 3.x/4.x's ``ActorCritic`` (``runner.alg.policy``),
    for the scripts and exporters written against it (Isaac Lab's play script and its
    ``export_policy_as_jit`` / ``export_policy_as_onnx``): ``is_recurrent``, ``actor`` (a
    plain module from the normalized actor observation, its groups concatenated in
    ``obs_groups`` order, to the mean action; ``actor[0].in_features`` its width),
    ``actor_obs_normalizer`` (that normalization, a snapshot of the statistics),
    ``act_inference(obs)`` and ``reset(dones)`` (the actor view's). Its state, its
    parameters and every other attribute are the rlx policy's (``state_dict()``,
    ``model``, ``actor_obs_keys``, ...).
    """

    def __init__(self, policy: nn.Module, actor: ModelView) -> None:
        super().__init__()
        object.__setattr__(self, "_policy", policy)  # not submodules: the view adds no state
        object.__setattr__(self, "_actor", actor)
        self.groups, self.is_recurrent = actor.groups, actor.is_recurrent

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if "_policy" not in self.__dict__:  # a half-built copy (deepcopy, unpickling)
                raise
            return getattr(self.__dict__["_policy"], name)

    def forward(self, obs: Any) -> Tensor:
        return self._actor(obs)

    def act_inference(self, obs: Any) -> Tensor:
        """The deterministic actions (rsl_rl 4's name)."""
        return self._actor(obs)

    def reset(self, dones: Tensor | None = None, hidden_state: Any = None) -> None:
        """Restart a recurrent policy's state for the envs that ended (the actor view's)."""
        self._actor.reset(dones)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self._policy.state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self._policy.load_state_dict(*args, **kwargs)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Any:
        return self._policy.named_parameters(*args, **kwargs)

    def named_buffers(self, *args: Any, **kwargs: Any) -> Any:
        return self._policy.named_buffers(*args, **kwargs)

    def _apply(self, fn: Any, recurse: bool = True) -> PolicyView:
        self._actor._apply(fn, recurse)  # moves the policy
        return self

    def train(self, mode: bool = True) -> PolicyView:
        self._policy.train(mode)
        return self

    @property
    def training(self) -> bool:  # type: ignore[override]
        """The rlx policy's mode."""
        return self.__dict__["_policy"].training if "_policy" in self.__dict__ else True

    @training.setter
    def training(self, mode: bool) -> None:  # nn.Module's own flag: the policy's is the one
        pass

    @property
    def actor(self) -> nn.Module:
        model = self._policy.model
        from rlx.models import MLPActorCritic

        if self.is_recurrent or not isinstance(model, MLPActorCritic):
            raise AttributeError(f"actor: rsl_rl 4's plain actor MLP exists for rlx's MLPActorCritic only, not "
                                 f"{type(model).__name__}; export with the runner's export_policy_to_jit/onnx")
        return nn.Sequential(sorted_columns(self._policy, self.groups), *(_plain(m) for m in model.actor))

    @property
    def actor_obs_normalizer(self) -> nn.Module:
        return flat_normalizer(self._policy, self.groups)


def sorted_columns(policy: nn.Module, groups: list[str]) -> nn.Module:
    """The flat observation of ``groups`` (concatenated in this order) re-laid in rlx's
    sorted key order, which :func:`rlx.models.flatten_obs` gives the networks."""
    spec = policy.observation_spec
    widths = {k: math.prod(spec[k].shape) for k in groups}
    starts = dict(zip(groups, itertools.accumulate([0, *widths.values()])))
    return _Reorder([c for k in sorted(groups) for c in range(starts[k], starts[k] + widths[k])])


def flat_normalizer(policy: nn.Module, groups: list[str]) -> nn.Module:
    """The policy's observation normalization on the flat observation of ``groups``
    (concatenated in this order): a snapshot of the statistics, on the CPU."""
    if not policy.obs_normalizers:
        return nn.Identity()
    spec, names = policy.observation_spec, {path: n for n, path in policy._norm_keys.items()}
    mean, inv_std, bound = [], [], []
    for k in groups:
        width = math.prod(spec[k].shape)
        rms = policy.obs_normalizers[names[(k,)]] if (k,) in names else None
        if rms is None:  # a group rlx leaves raw
            mean.append(torch.zeros(width)), inv_std.append(torch.ones(width)), bound.append(torch.full((width,), math.inf))
            continue
        mean.append(rms.mean.reshape(-1).float().cpu())  # SYNC: export, once
        inv_std.append(torch.rsqrt(rms.var + rms.epsilon).reshape(-1).float().cpu())  # SYNC: export, once
        bound.append(torch.full((width,), rms.clip if rms.clip is not None else math.inf))
    return _Normalizer(torch.cat(mean), torch.cat(inv_std), torch.cat(bound))


class _RecurrentStep(nn.Module):
    """One deterministic step of a recurrent actor on the flat observation of its groups
    (``obs_groups`` order): ``(obs [N, D], state [N, *state]) -> (actions, state)``, on
    the model's ``act_flat`` (plain tensors: it traces and exports)."""

    def __init__(self, policy: nn.Module, groups: list[str]) -> None:
        super().__init__()
        if not callable(getattr(policy.model, "act_flat", None)):
            raise ValueError(f"exporting a recurrent {type(policy.model).__name__} from the runner needs its act_flat(); "
                             "rlx's RecurrentActorCritic has it")
        self.normalizer, self.reorder = flat_normalizer(policy, groups), sorted_columns(policy, groups)
        self.model = policy.model.eval().requires_grad_(False)
        self.distribution_cls, self.action_spec = policy.distribution_cls, policy.action_spec

    def forward(self, obs: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        params, state = self.model.act_flat(self.reorder(self.normalizer(obs)), state)
        dist = self.distribution_cls(params, self.action_spec)
        return dist.env_actions(dist.mode()), state


class _Reorder(nn.Module):
    """Columns from ``obs_groups`` order into rlx's sorted one (``in_features``: the width)."""

    def __init__(self, index: list[int]) -> None:
        super().__init__()
        self.in_features = len(index)
        self.register_buffer("index", torch.tensor(index, dtype=torch.long))

    def forward(self, x: Tensor) -> Tensor:
        return x.index_select(-1, self.index)


class _Normalizer(nn.Module):
    """``clamp((x - mean) * inv_std, -bound, bound)``: rlx's normalization, flat."""

    def __init__(self, mean: Tensor, inv_std: Tensor, bound: Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("inv_std", inv_std)
        self.register_buffer("bound", bound)

    def forward(self, x: Tensor) -> Tensor:
        return torch.clamp((x - self.mean) * self.inv_std, min=-self.bound, max=self.bound)


def _plain(module: nn.Module) -> nn.Module:
    """A head ``Float32Linear`` as a plain ``Linear`` on the same parameters (scriptable)."""
    if isinstance(module, nn.Linear) and type(module) is not nn.Linear:
        linear = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None, device="meta")
        linear.weight, linear.bias = module.weight, module.bias
        return linear
    return module


class _Deployable(nn.Module):
    """The deterministic actor on the concatenated groups (rsl_rl's deployed input).

    Feedforward: ``forward(obs [N, D]) -> actions``. Recurrent, as TorchScript: one env's
    state inside (``forward(obs [1, D])``, ``reset()``), as rsl_rl's; as ONNX
    (``onnx=True``): ``forward(obs, h_in) -> (actions, h_out)``, the state ``[N, *state]``
    rlx's stacked one (``policy.initial_state``: zeros for rlx's models).
    """

    def __init__(self, view: ModelView, onnx: bool = False) -> None:
        super().__init__()
        from rlx.run.export import DeployedPolicy

        policy = copy.deepcopy(view._policy).cpu()  # SYNC: export copies the policy to the CPU, once
        spec = policy.observation_spec
        self.keys = list(view.groups)
        self.shapes = [tuple(spec[k].shape) for k in self.keys]
        self.widths = [int(torch.Size(s).numel()) for s in self.shapes]
        self.recurrent, self.onnx = view.is_recurrent, onnx
        if self.recurrent:
            self.step = _RecurrentStep(policy, self.keys)
            initial = policy.initial_state(1)
        else:
            self.deployed = DeployedPolicy(policy)
            initial = torch.zeros(1, 0)
        self.register_buffer("state", initial.clone())  # a feedforward policy's is empty
        self.register_buffer("initial", initial)
        recurrent_onnx = self.recurrent and onnx
        self.input_names = ["obs", "h_in"] if recurrent_onnx else ["obs"]
        self.output_names = ["actions", "h_out"] if recurrent_onnx else ["actions"]

    def get_dummy_inputs(self) -> tuple[Tensor, ...]:
        obs = torch.zeros(1, sum(self.widths))
        return (obs, self.initial.clone()) if self.recurrent and self.onnx else (obs,)

    @torch.no_grad()
    def forward(self, obs: Tensor, h_in: Tensor | None = None) -> Any:
        if self.recurrent:
            actions, state = self.step(obs, self.state if h_in is None else h_in)
            if h_in is not None:
                return actions, state
            self.state.copy_(state)
            return actions
        n = obs.shape[0]
        parts = torch.split(obs, self.widths, dim=-1)
        return self.deployed(TensorDict({k: p.reshape(n, *s) for k, p, s in zip(self.keys, parts, self.shapes)},
                                        batch_size=[n]))

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
        #: rsl_rl 3.x/4.x's ``alg.policy`` (:class:`PolicyView`); the rlx policy is ``algorithm.policy``.
        self.__dict__["policy"] = PolicyView(algorithm.policy, self.__dict__["actor"])

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
                "optimizer_state_dict": self._algorithm.optimizer.state_dict(), RLX_NAMES: True}

    def load(self, loaded_dict: dict[str, Any], load_cfg: dict[str, bool] | None = None, strict: bool = True,
             where: str = "checkpoint") -> bool:
        """Load a checkpoint's dict, the parts ``load_cfg`` names (all by default:
        ``actor``, ``critic``, ``optimizer``, ``iteration``); returns whether the caller
        should take its ``iter`` (rsl_rl's contract, which runner subclasses rely on).

        Takes what :meth:`save` returned, an :class:`rlx.runners.OnPolicyRunner`
        checkpoint (without ``load_cfg``: the whole algorithm state, an exact resume; a
        runner with another number of envs starts its envs afresh), and rsl_rl's own
        (5.x ``actor_state_dict``, 3.x/4.x ``model_state_dict``; mapped by
        :mod:`rlx.runners.rsl_rl_checkpoint`).

        Raises:
            ValueError: naming ``where``: none of these.
        """
        if loaded_dict.get("format") == RUNNER_CHECKPOINT:
            if load_cfg is None:
                self._algorithm.load_state_dict(loaded_dict["algorithm"])
                return True
            policy = loaded_dict["algorithm"]["policy"]
            loaded_dict = {"optimizer_state_dict": loaded_dict["algorithm"]["optimizer"],
                           **{f"{part}_state_dict": {k: policy[k] for k in getattr(self, part).state_dict() if k in policy}
                              for part in ("actor", "critic")}}
        elif not loaded_dict.get(RLX_NAMES):
            from rlx.runners.rsl_rl_checkpoint import is_rsl_rl_checkpoint, rsl_rl_to_rlx

            if not is_rsl_rl_checkpoint(loaded_dict):
                raise ValueError(f"{where}: neither an rlx OnPolicyRunner checkpoint nor an rsl_rl one (keys "
                                 f"{sorted(loaded_dict)[:8]})")
            loaded_dict = rsl_rl_to_rlx(loaded_dict, self, where=where)
        load_cfg = load_cfg if load_cfg is not None else {"actor": True, "critic": True, "optimizer": True,
                                                          "iteration": True}
        if load_cfg.get("actor"):
            self.actor.load_state_dict(loaded_dict["actor_state_dict"], strict=strict)
        if load_cfg.get("critic"):
            self.critic.load_state_dict(loaded_dict["critic_state_dict"], strict=strict)
        if load_cfg.get("optimizer"):
            alg = self._algorithm
            load_optimizer_state(alg.optimizer, loaded_dict["optimizer_state_dict"])
            lr = float(alg.optimizer.param_groups[0]["lr"])
            if alg._lr_applied is not None:  # a tensor LR: the groups get back the live one
                for group in alg.optimizer.param_groups:
                    group["lr"] = alg._lr_applied
            alg._set_lr(lr)
        return bool(load_cfg.get("iteration", False))
