"""Random network distillation (Burda et al., 2018, https://arxiv.org/abs/1810.12894; rsl_rl's
``rnd_cfg``, Schwarke et al., 2023): an intrinsic reward for states the agent has rarely seen.

A *target* network with fixed random weights embeds a state; a *predictor* network is
trained to reproduce that embedding on the states the policy visits. On familiar states
the predictor is accurate; on novel ones it is not, and its error is the novelty bonus.

In rlx (``AlgorithmConfig.rnd``):

* the intrinsic reward of transition ``t`` is ``weight * ||target(s) - predictor(s)||``
  at the observation the step led to (the buffer's column ``t + 1``; as rsl_rl, the
  first observation of the next episode after an episode end), computed for the whole
  ``[B, T]`` rollout at once before GAE and added to the (scaled) extrinsic reward, so the
  critic learns their sum. The episode statistics stay extrinsic;
* the predictor takes one Adam step per PPO minibatch on the mean squared embedding
  error of the minibatch's observations (its own optimizer and learning rate; under
  torchrun its gradient is averaged over the ranks, so every rank keeps one predictor);
* optionally the RND state is normalized by its running mean and std
  (``normalize_state``; updated with every rollout, before the rewards are computed), and
  the intrinsic reward is divided by the running std of its discounted return
  (``normalize_reward``, rlx's :class:`~rlx.core.normalization.RewardScaler`);
* ``weight_schedule``: ``[(env_steps, weight), ...]`` with ``weight_schedule_kind``
  ``"step"`` or ``"interp"``, over the env steps collected so far (this rollout's included).

``step()`` reports ``losses/rnd`` (the predictor's loss, mean over its steps),
``rnd/intrinsic_reward`` and ``rnd/weight``. Checkpoints hold both networks, the
predictor's optimizer and the normalizers.

Its work is tensor arithmetic on state it owns, so PPO's one update function runs it as
it runs the policy's step, eagerly, compiled into the same program and captured in the
same CUDA graph: the intrinsic rewards inside the step's first phase (GAE and the batch),
the predictor's Adam step inside each minibatch update, held wherever the policy's step
is held (a KL early stop's later epochs, a frozen member). The schedule's weight is a
device tensor set on the host after each collect (:meth:`RND.set_weight`), which the
programs read rather than bake in.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from rlx.algorithms.base import Algorithm
from rlx.collect.rollout import envs_start_afresh
from rlx.core import distributed as rdist
from rlx.core.config_fields import ConfigError, settings_from_dict
from rlx.core.normalization import RewardScaler, RunningMeanStd
from rlx.core.layout import by_member, from_by_member, member_lead
from rlx.core.schedulers import Schedule
from rlx.env import OBS, TERMINATED, TRUNCATED
from rlx.policy import flatten_time
from rlx.members.ops import seed_means
from rlx.members.optim import adam_state, adam_step_, seed_optimizer
from rlx.members.stacked import _stack_mlp

__all__ = ["RND", "RNDConfig", "IntrinsicRewards"]


@dataclasses.dataclass
class RNDConfig:
    """The settings of random network distillation (``AlgorithmConfig.rnd``, a mapping
    of these fields)."""

    #: Scale of the intrinsic reward (in the units of the scaled extrinsic reward).
    weight: float = 0.0
    #: The top-level observation keys of the RND state (a Composite observation); ``None``:
    #: every float observation entry.
    obs_keys: list[str] | None = None
    #: Hidden widths of the predictor and of the target (-1: the RND state's size, as rsl_rl).
    predictor_hiddens: list[int] = dataclasses.field(default_factory=lambda: [256, 256])
    target_hiddens: list[int] = dataclasses.field(default_factory=lambda: [256, 256])
    #: Width of the embedding both networks output.
    embedding_dim: int = 16
    #: Activation between the hidden layers.
    activation: str = "elu"
    #: The predictor's Adam learning rate.
    learning_rate: float = 1e-3
    #: Normalize the RND state by its running mean and std.
    normalize_state: bool = False
    #: Divide the intrinsic reward by the running std of its discounted return.
    normalize_reward: bool = False
    #: ``[(env_steps, weight), ...]``; ``None``: ``weight`` throughout.
    weight_schedule: list[tuple[int, float]] | None = None
    #: ``"step"`` or ``"interp"``.
    weight_schedule_kind: str = "step"

    @classmethod
    def from_dict(cls, data: Any, where: str = "AlgorithmConfig.rnd") -> RNDConfig:
        out = settings_from_dict(cls, data, where)
        out.check(where)
        return out

    def check(self, where: str) -> None:
        from rlx.models import ACTIVATIONS

        def bad(field: str, message: str) -> None:
            raise ConfigError(f"{where}.{field}: {message}")

        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or self.weight < 0:
            bad("weight", f"must be a number >= 0, got {self.weight!r}")
        if not isinstance(self.learning_rate, (int, float)) or not self.learning_rate > 0:
            bad("learning_rate", f"must be > 0, got {self.learning_rate!r}")
        for field in ("predictor_hiddens", "target_hiddens"):
            widths = getattr(self, field)
            if not isinstance(widths, (list, tuple)) or any(isinstance(w, bool) or not isinstance(w, int) or (w < 1 and w != -1)
                                                            for w in widths):
                bad(field, f"must be a list of positive ints (or -1: the state's size), got {widths!r}")
        if isinstance(self.embedding_dim, bool) or not isinstance(self.embedding_dim, int) or self.embedding_dim < 1:
            bad("embedding_dim", f"must be a positive int, got {self.embedding_dim!r}")
        if self.activation not in ACTIVATIONS:
            bad("activation", f"{self.activation!r} is not one of {sorted(ACTIVATIONS)}")
        if self.obs_keys is not None and (not isinstance(self.obs_keys, (list, tuple)) or not self.obs_keys
                                          or not all(isinstance(k, str) for k in self.obs_keys)):
            bad("obs_keys", f"must be a non-empty list of observation keys, got {self.obs_keys!r}")
        if self.weight_schedule_kind not in ("step", "interp"):
            bad("weight_schedule_kind", f"must be 'step' or 'interp', got {self.weight_schedule_kind!r}")


def _mlp(sizes: list[int], activation: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


class RND(nn.Module):
    """The predictor, the target, their optimizer and normalizers (module docstring).

    Args:
        config: :class:`RNDConfig`.
        observation_spec: The env's observation spec (the RND state's keys are checked
            against it).
        num_envs: ``B`` (the intrinsic reward's scaler keeps a return per env).
        gamma: The discount of the intrinsic reward's normalizer.
        device: Where everything lives.
    """

    def __init__(self, config: RNDConfig, observation_spec: Any, num_envs: int, gamma: float,
                 device: torch.device, *, members: int = 1, where: str = "AlgorithmConfig.rnd") -> None:
        super().__init__()
        from torchrl.data import Composite

        from rlx.models import ACTIVATIONS, flatten_obs

        self.config = config
        self._flatten = flatten_obs
        if config.obs_keys is not None:
            if not isinstance(observation_spec, Composite):
                raise ConfigError(f"{where}.obs_keys: names keys of a Composite observation, but the env's observation "
                                  "is a tensor (leave obs_keys out)")
            missing = [k for k in config.obs_keys if k not in observation_spec.keys()]
            if missing:
                raise ConfigError(f"{where}.obs_keys: {missing} not in the observation (keys: "
                                  f"{sorted(observation_spec.keys())})")
            observation_spec = Composite({k: observation_spec[k] for k in config.obs_keys}, device=observation_spec.device)
        self.spec = observation_spec
        sample = observation_spec.zero((1,))
        size = flatten_obs(sample, observation_spec).shape[-1]
        act = ACTIVATIONS[config.activation]
        def widths(hiddens: list[int]) -> list[int]:
            return [size if w == -1 else w for w in hiddens]

        # With S members, S predictors and S targets stacked (each member's own; Adam is
        # elementwise, so one Adam over the stacks keeps them apart).
        self.members = members

        def net(hiddens: list[int]) -> nn.Sequential:
            nets = [_mlp([size, *widths(hiddens), config.embedding_dim], act) for _ in range(members)]
            return (nets[0] if members == 1 else _stack_mlp(nets)).to(device)

        self.predictor = net(config.predictor_hiddens)
        self.target = net(config.target_hiddens)
        self.target.requires_grad_(False)
        params = list(self.predictor.parameters())
        if members > 1:  # each member's own step count (SeedAdam): held where its policy's step is
            self.optimizer = seed_optimizer(torch.optim.Adam, params, members, {"lr": config.learning_rate})
        else:
            self.optimizer = torch.optim.Adam(params, lr=config.learning_rate)
        adam_state(self.optimizer, list(self.predictor.parameters()))  # made now: a compiled update reads it
        self.state_stats = (RunningMeanStd((*member_lead(members), size), device=device, sync_ranks=True)
                            if config.normalize_state else None)
        self.reward_scaler = (RewardScaler(num_envs, gamma, device=device, num_seeds=members)
                              if config.normalize_reward else None)
        self.schedule = Schedule(config.weight_schedule, config.weight_schedule_kind, initial=float(config.weight),
                                 name="rnd.weight_schedule")
        #: The intrinsic reward's weight for the rollout in the buffer (:meth:`set_weight`):
        #: a tensor, read by the compiled and captured programs; :attr:`weight_value` its host mirror.
        self.weight = torch.zeros((), device=device)
        self.weight_value: float | None = None

    def set_weight(self, env_steps: int, horizon: int) -> None:
        """Before the update phase that reads them: the schedule's weight at ``env_steps``
        (the rollout's included) into :attr:`weight` (written only when it changed), and
        the intrinsic reward scaler's scratch for ``horizon`` steps made, so the programs
        allocate nothing of their own."""
        value = self.schedule.value(env_steps)
        if value != self.weight_value:
            self.weight.fill_(value)
            self.weight_value = value
        if self.reward_scaler is not None:
            self.reward_scaler.scratch(horizon)

    def state(self, obs: Any) -> Tensor:
        """``[N, D]`` the RND state of raw observations (normalized when configured; with
        S members, seed-major rows against each member's statistics), in the networks' dtype."""
        x = self._flatten(obs, self.spec)
        if self.state_stats is not None:
            x = from_by_member(self.state_stats.normalize(by_member(x, self.members, 1)), self.members, x.shape)
        return x.to(next(self.predictor.parameters()).dtype)

    def embed(self, net: nn.Module, s: Tensor) -> Tensor:
        """``[N, E]``: the embedding of ``[N, D]`` states by ``net`` (each member's rows by
        its own network)."""
        if self.members == 1:
            return net(s)
        return net(s.view(self.members, -1, s.shape[-1])).reshape(s.shape[0], -1)

    def update_state_stats(self, obs: Any) -> None:
        if self.state_stats is not None:
            self.state_stats.update(by_member(self._flatten(obs, self.spec), self.members, 1))

    @torch.no_grad()
    def intrinsic_rewards(self, next_obs: Any, dones: Tensor) -> Tensor:
        """``[B, T, 1]`` intrinsic rewards of a rollout from ``next_obs`` (``[B, T, ...]``,
        the observation each step led to) and its episode ends (``[B, T, 1]`` bool), at
        :attr:`weight`."""
        B, T = dones.shape[:2]
        flat = next_obs.reshape(B * T, *next_obs.shape[2:]) if isinstance(next_obs, Tensor) else next_obs.reshape(B * T)
        s = self.state(flat)
        error = torch.linalg.vector_norm(self.embed(self.target, s) - self.embed(self.predictor, s), dim=-1).view(B, T, 1)
        if self.reward_scaler is not None:
            self.reward_scaler.update(error, dones)
            error = self.reward_scaler.scale_rewards(error)
        return self.weight * error

    def loss(self, obs: Any) -> Tensor:
        """The predictor's mean squared embedding error on a minibatch of raw observations
        (0-d; ``[S]`` each member's with S members)."""
        with torch.no_grad():
            s = self.state(obs)
            target = self.embed(self.target, s)
        error = (self.embed(self.predictor, s) - target).square()
        return seed_means(self.members)(error)

    def train_step(self, obs: Any, update: Tensor | None = None) -> Tensor:
        """One Adam step of the predictor on ``obs``; returns its loss (detached; ``[S]``
        with S members). ``update``: 1 or 0, 0-d or ``[S]``, where the step is taken (the
        step count, moments and weights of a member held elsewhere stay as they were);
        ``None``: everywhere. Tensor arithmetic only (:func:`~rlx.members.optim.adam_step_`
        on the optimizer's state), so PPO's compiled update traces it and a CUDA graph
        captures it."""
        loss = self.loss(obs)
        params = list(self.predictor.parameters())
        # The gradients as values (no .grad written: a traced backward() would also mark
        # every other leaf of the program, the policy's parameters among them).
        grads = list(torch.autograd.grad(loss.sum(), params))
        rdist.all_reduce_mean_(grads)  # under torchrun: one predictor on every rank
        held = {} if update is None else {"update": update > 0, "factor": update}  # neither state nor weights move
        adam_step_(self.optimizer, params, grads, **held)
        return loss.detach()

    def extra_state(self) -> dict[str, Any]:
        return {"module": self.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_extra_state(self, state: Mapping[str, Any], *, envs_afresh: bool = False) -> None:
        """Load :meth:`extra_state`. ``envs_afresh``: the run restarts its envs' per-env
        state (:func:`~rlx.collect.rollout.envs_start_afresh`), so the intrinsic reward
        scaler's running returns restart too, as the extrinsic one's do."""
        module = dict(state["module"])
        if envs_afresh and self.reward_scaler is not None:  # every other key loads, strictly
            module["reward_scaler.returns"] = torch.zeros_like(self.reward_scaler.returns)
        self.load_state_dict(module)
        self.optimizer.load_state_dict(state["optimizer"])
        for p, s in self.optimizer.state.items():  # step counts on the device, as adam_step_ keeps them
            if isinstance(s.get("step"), Tensor):
                step = s["step"].to(device=p.device, dtype=torch.float32)
                if self.members > 1 and step.ndim == 0:  # saved before members counted their steps apart
                    step = step.expand(self.members).clone()
                s["step"] = step


class IntrinsicRewards:
    """RND's part of :class:`~rlx.algorithms.ppo.PPO` (its methods, on its state): the
    intrinsic rewards GAE adds, the predictor's step in each minibatch update, their
    statistics, checkpoints. Inert without ``config.rnd``."""

    def _init_rnd(self, config: Any) -> None:
        #: Random network distillation (``config.rnd``), else ``None``.
        self.rnd: RND | None = None
        if getattr(config, "rnd", None) is not None:  # PPO's (A2C has none)
            self.rnd = RND(RNDConfig.from_dict(config.rnd), self.env.observation_spec, self.num_envs, config.gamma,
                           self.device, members=self.num_seeds, where=f"{type(config).__name__}.rnd")
            if self.world_size > 1:
                rdist.broadcast_module_(self.rnd)  # one target and one predictor on every rank
        # RND's statistics, accumulated on the device: the predictor's loss and steps (each
        # member's), the mean intrinsic reward of the rollout.
        self._rnd_loss = torch.zeros(self.members.lead, device=self.device)
        self._rnd_steps = torch.zeros(self.members.lead, device=self.device)
        self._intrinsic = torch.zeros(self.members.lead, device=self.device)

    def collect(self, *, env_config: dict[str, Any] | None = None, deterministic: bool = False) -> dict[str, float]:
        out = super().collect(env_config=env_config, deterministic=deterministic)
        self._set_rnd_weight()  # the weight GAE's intrinsic rewards read in step()
        return out

    collect.__doc__ = Algorithm.collect.__doc__

    def _set_rnd_weight(self) -> None:
        """The weight of the rollout's intrinsic rewards, at the env steps so far."""
        if self.rnd is not None:
            self.rnd.set_weight(self.env_steps, self.horizon)

    def _rnd_step(self, mb: Mapping[str, Any], running: Tensor | None) -> None:
        """The RND predictor's own step on this minibatch, held where the policy's optimizer
        state is (a KL early stop's later epochs, a frozen or finished member), so that
        ending the epoch loop at the stop and running it held take the same steps."""
        held = running if self.members.size == 1 else self.members.active() * (1.0 if running is None else running)
        loss = self.rnd.train_step(mb[OBS], held)
        self._rnd_loss.add_(loss if held is None else loss * held)
        self._rnd_steps.add_(1.0 if held is None else held)

    def _with_intrinsic_rewards(self, rewards: Tensor) -> Tensor:
        if self.rnd is None:
            return rewards
        buf, T = self.buffer, self.horizon
        next_obs = buf.get(OBS)[:, 1 : T + 1]  # the observation each step led to
        self.rnd.update_state_stats(flatten_time(next_obs))
        dones = buf.get(TERMINATED)[:, :T] | buf.get(TRUNCATED)[:, :T]
        intrinsic = self.rnd.intrinsic_rewards(next_obs, dones)
        self._intrinsic.copy_(self.members.mean_each(intrinsic.reshape(intrinsic.shape[0], -1)).reshape(self.members.lead))
        return torch.add(rewards, intrinsic.to(rewards.dtype), out=self._scaled_rewards)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.rnd is not None:
            state["rnd"] = copy.deepcopy(self.rnd.extra_state())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.rnd is not None:
            self.rnd.load_extra_state(state["rnd"], envs_afresh=envs_start_afresh(state, self.num_envs, self.world_size))
            self._set_rnd_weight()
