"""The policy: a model, its action distribution and the observation normalizer.

Every policy carries a state per sub-env, possibly empty, and offers one interface to
the rollout (:class:`PolicyBase`):

* :meth:`~PolicyBase.initial_state` — the state of a sub-env at an episode's start;
* :meth:`~PolicyBase.act_step` — one step of acting: a :class:`StepOutput` (actions,
  env actions, ``logp``, the values when the same forward pass computes them, and the
  next state), no grad;
* :meth:`~PolicyBase.value_step` — values of one step, no grad.

:class:`Policy` (feedforward, an empty ``[B, 0]`` state) adds the stateless forms
:meth:`~Policy.act`, :meth:`~Policy.evaluate` and :meth:`~Policy.value`;
:class:`RecurrentPolicy` adds :meth:`~RecurrentPolicy.evaluate_sequences` for updates
on whole sequences. No method returns one type or another depending on a flag.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from tensordict import TensorDictBase
from torch import Tensor, nn
from torchrl.data import Composite, TensorSpec

from rlx.core.distributions import Distribution, default_distribution_cls
from rlx.env import ACTION_MASK, EnvOutputError, check_obs_groups
from rlx.core.layout import by_member, cat_passes, from_by_member, member_lead, pass_rows, passes
from rlx.models import MLPActorCritic, RecurrentActorCritic
from rlx.core.normalization import RunningMeanStd

__all__ = [
    "ActOutput",
    "ActionSample",
    "EvalOutput",
    "Obs",
    "Policy",
    "PolicyBase",
    "RecurrentPolicy",
    "StepOutput",
    "flatten_time",
]

#: Observations: a tensor, or a TensorDict for a ``Composite`` observation spec.
Obs = Tensor | TensorDictBase
#: Normalized observations are clipped to this many standard deviations.
OBS_CLIP = 10.0


class ActOutput(NamedTuple):
    """What :meth:`Policy.act` returns for ``N`` observations."""

    actions: Tensor  #: ``[N, *action]``, as stored in the buffer
    env_actions: Tensor  #: ``[N, *action]``, as given to the env (clipped or squashed)
    logp: Tensor  #: ``[N, 1]``
    values: Tensor  #: ``[N, 1]``


class ActionSample(NamedTuple):
    """What :meth:`Policy.sample_actions` returns for ``N`` observations: no values."""

    actions: Tensor  #: ``[N, *action]``, as stored in the buffer
    env_actions: Tensor  #: ``[N, *action]``, as given to the env
    logp: Tensor  #: ``[N, 1]``


class StepOutput(NamedTuple):
    """What :meth:`PolicyBase.act_step` returns for one step of ``N`` sub-envs."""

    actions: Tensor  #: ``[N, *action]``, as stored in the buffer
    env_actions: Tensor  #: ``[N, *action]``, as given to the env
    logp: Tensor  #: ``[N, 1]``
    #: ``[N, 1]`` when the policy computes values in the same forward pass
    #: (:attr:`PolicyBase.values_while_acting`), else ``None``: the rollout then values
    #: every column in batched passes after the T loop.
    values: Tensor | None
    state: Tensor  #: ``[N, *state]`` after this step (``[N, 0]`` for a stateless policy)


class EvalOutput(NamedTuple):
    """What :meth:`Policy.evaluate` returns for ``N`` observations."""

    logp: Tensor  #: ``[N, 1]``
    entropy: Tensor  #: ``[N, 1]``
    values: Tensor  #: ``[N, 1]``
    dist: Distribution


def _float_leaves(spec: TensorSpec, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], TensorSpec]:
    if isinstance(spec, Composite):
        out: dict[tuple[str, ...], TensorSpec] = {}
        for key in sorted(spec.keys()):
            if key != ACTION_MASK:
                out.update(_float_leaves(spec[key], prefix + (key,)))
        return out
    return {prefix: spec} if spec.dtype.is_floating_point else {}


def flatten_time(x: Obs) -> Obs:
    """``[B, T, ...]`` -> ``[B * T, ...]`` for a tensor or a TensorDict (copies if strided)."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


class PolicyBase(nn.Module):
    """What every policy shares: the model, the distribution, the obs normalizer, and the
    stateful interface the rollout calls.

    Args:
        observation_spec: Spec of one env's observation.
        action_spec: Spec of one env's action.
        model: A ready model instance (mutually exclusive with ``model_cls``).
        model_cls: Model class, built as ``model_cls(observation_spec, action_spec,
            num_params=..., **model_config)``; defaults to :attr:`default_model_cls`.
        model_config: Keyword arguments for ``model_cls``.
        distribution_cls: Action distribution; defaults from the action spec.
        normalize_obs: Keep a running mean/std of every floating observation entry and
            feed the model normalized observations; the top-level keys a model lists in
            a ``raw_obs_keys`` attribute (:class:`~rlx.cnn.CNNActorCritic`'s images) stay raw.
        device: Device of the parameters.
        obs_groups: ``{"actor": [keys], "critic": [keys]}``: the top-level keys of a
            Composite observation the actor and the critic read (see
            :attr:`~rlx.config.base.CommonConfig.obs_groups`); passed to a built model.
    """

    #: The model class built when neither ``model`` nor ``model_cls`` is given.
    default_model_cls: type[nn.Module] = MLPActorCritic
    #: Whether the policy carries a non-empty state per sub-env.
    recurrent: bool = False
    #: Value passes (and :meth:`Policy.sample_actions`) run in passes of at most this many
    #: rows (``None``: one pass). Algorithms set it on a CPU, where a pass over a few
    #: thousand rows of a 256-wide MLP spills out of cache and costs up to twice as much
    #: per row.
    max_rows_per_pass: int | None = None

    def __init__(
        self,
        observation_spec: TensorSpec,
        action_spec: TensorSpec,
        *,
        model: nn.Module | None = None,
        model_cls: Any = None,
        model_config: dict[str, Any] | None = None,
        distribution_cls: type[Distribution] | None = None,
        normalize_obs: bool = False,
        device: torch.device | str = "cpu",
        obs_groups: dict[str, list[str]] | None = None,
        num_seeds: int = 1,
    ) -> None:
        super().__init__()
        self.observation_spec = observation_spec
        #: ``S > 1``: rows are S equal seed-major blocks, each normalized by its own statistics.
        self.num_seeds = num_seeds
        self.action_spec = action_spec
        self.distribution_cls = distribution_cls or default_distribution_cls(action_spec)
        self.num_params = self.distribution_cls.param_layout(action_spec)
        check_obs_groups(obs_groups, observation_spec)
        self.obs_groups = obs_groups
        if model is None:
            cls = model_cls or self.default_model_cls
            kwargs = {**(model_config or {}), **({"obs_groups": obs_groups} if obs_groups else {})}
            try:
                model = cls(observation_spec, action_spec, num_params=self.num_params, **kwargs)
            except TypeError as e:
                if obs_groups and "obs_groups" in str(e):
                    raise TypeError(f"model_cls {cls.__name__} does not take obs_groups ({e})") from e
                raise
        self._check_model(model)
        self.model = model.to(device)
        self._has_mask = isinstance(observation_spec, Composite) and ACTION_MASK in observation_spec.keys()
        self._norm_keys: dict[str, tuple[str, ...]] = {}
        self.obs_normalizers = nn.ModuleDict()
        if normalize_obs:
            raw = set(getattr(self.model, "raw_obs_keys", None) or ())  # a model's images, say
            for path, spec in _float_leaves(observation_spec).items():
                if path[:1] and path[0] in raw:
                    continue
                name = "__".join(path) or "obs"
                self._norm_keys[name] = path
                self.obs_normalizers[name] = RunningMeanStd(
                    (*member_lead(num_seeds), *spec.shape), clip=OBS_CLIP, device=device, sync_ranks=True
                )

    def _check_model(self, model: nn.Module) -> None:
        """Refuse a model this kind of policy cannot drive (raises ``TypeError``)."""

    # -- observation normalization -------------------------------------------------

    @property
    def normalizes_obs(self) -> bool:
        """Whether any observation entry has running statistics (``normalize_obs``)."""
        return bool(self._norm_keys)

    def normalize(self, obs: Obs) -> Obs:
        """Normalize every floating observation entry with the running statistics."""
        if not self._norm_keys:
            return obs
        if isinstance(obs, Tensor):
            return self._normalized("obs", obs)
        obs = obs.copy()  # shallow: never write normalized values into the caller's data
        present = obs.keys(include_nested=True)  # a deployed policy gets the actor's keys only
        for name, path in self._norm_keys.items():
            if path in present:
                obs.set(path, self._normalized(name, obs.get(path)))
        return obs

    def _normalized(self, name: str, x: Tensor) -> Tensor:
        """``x`` against its entry's statistics (each member's rows against its own)."""
        rms, S = self.obs_normalizers[name], self.num_seeds
        event_dims = len(rms.shape) - len(member_lead(S))
        return from_by_member(rms.normalize(by_member(x, S, event_dims)), S, x.shape)

    @property
    def actor_obs_keys(self) -> list[str] | None:
        """The top-level observation keys acting needs (the actor group, and the action
        mask), sorted; ``None`` for a tensor observation."""
        spec = self.observation_spec
        if not isinstance(spec, Composite):
            return None
        actor = (self.obs_groups or {}).get("actor")
        if actor is None:
            return sorted(spec.keys())
        return sorted({*actor, *([ACTION_MASK] if ACTION_MASK in spec.keys() else [])})

    @torch.no_grad()
    def load_member_(self, stacked: PolicyBase, i: int) -> None:
        """Become member ``i`` of a stacked (``num_seeds = S``) policy of the same config:
        its network (``unstack(i)``) and its slice of the observation normalizers."""
        self.model.load_state_dict(stacked.model.unstack(i).state_dict())
        for name, rms in self.obs_normalizers.items():
            many = stacked.obs_normalizers[name]
            rms.mean.copy_(many.mean[i])
            rms.var.copy_(many.var[i])
            rms.count.copy_(many.count)

    @torch.no_grad()
    def update_obs_stats(self, obs: Obs) -> None:
        """Merge a ``[N, *obs]`` batch of raw observations into the running statistics."""
        for name, path in self._norm_keys.items():
            x = obs if isinstance(obs, Tensor) else obs.get(path)
            rms = self.obs_normalizers[name]
            rms.update(by_member(x, self.num_seeds, len(rms.shape) - len(member_lead(self.num_seeds))))

    def distribution(self, params: Tensor, obs: Obs) -> Distribution:
        """The action distribution for model outputs ``params`` at observations ``obs``."""
        mask = obs.get(ACTION_MASK) if self._has_mask else None
        return self.distribution_cls(params, self.action_spec, action_mask=mask)

    def _check_params(self, params: Tensor, values: Tensor, batch_size: int) -> None:
        expected = (batch_size, sum(self.num_params))
        if tuple(params.shape) != expected:
            raise EnvOutputError(
                f"model output 'dist_params' has shape {list(params.shape)}, expected {list(expected)} "
                f"for {self.distribution_cls.__name__} over {type(self.action_spec).__name__}"
                f"{list(self.action_spec.shape)}"
            )
        if tuple(values.shape) != (batch_size, 1):
            raise EnvOutputError(f"model output 'values' has shape {list(values.shape)}, expected {[batch_size, 1]}")

    # -- the stateful interface the rollout calls --------------------------------------

    @property
    def values_while_acting(self) -> bool:
        """Whether :meth:`act_step` returns values (one forward pass computes both)."""
        return True

    def initial_state(self, batch_size: int) -> Tensor:
        """The state of ``batch_size`` sub-envs at an episode's start, ``[B, *state]``."""
        raise NotImplementedError

    def act_step(self, obs: Obs, state: Tensor, resets: Tensor, *, deterministic: bool = False) -> StepOutput:
        """Choose actions for one step of ``N`` sub-envs (no grad).

        Args:
            obs: ``[N, *obs]`` raw observations (normalized here).
            state: ``[N, *state]`` states before this step.
            resets: ``[N, 1]`` bool, True where this step begins an episode (the policy
                starts that sub-env from its initial state).
            deterministic: Take the distribution's mode instead of sampling.
        """
        raise NotImplementedError

    def value_step(self, obs: Obs, state: Tensor, resets: Tensor) -> Tensor:
        """State values ``[N, 1]`` of one step of raw observations (no grad)."""
        raise NotImplementedError

    def probe(self, obs: Obs) -> None:
        """Check the model's outputs on ``[B, *obs]`` reset observations against the specs
        (called once at build).

        Raises:
            EnvOutputError: naming the output, its shape and the expected one.
        """
        raise NotImplementedError


class Policy(PolicyBase):
    """A feedforward policy: its state is empty (``[B, 0]``).

    Two explicit stateless entry points, never one function whose return type flips on
    flags: :meth:`act` for collection (actions, env actions, ``logp`` and values, no grad)
    and :meth:`evaluate` for updates (``logp``, entropy and values of given actions, with
    grad). Takes :class:`PolicyBase`'s arguments; the default model is
    :class:`~rlx.models.MLPActorCritic`.
    """

    def _check_model(self, model: nn.Module) -> None:
        if callable(getattr(model, "initial_state", None)):
            raise TypeError(
                f"model {type(model).__name__} is recurrent (it has initial_state); train it with "
                "RecurrentAlgorithmConfig (algorithm: recurrent_ppo)"
            )

    @property
    def separate_heads(self) -> bool:
        """The model computes actions and values apart (``dist_params`` and ``value``)."""
        return callable(getattr(self.model, "dist_params", None)) and callable(getattr(self.model, "value", None))

    @property
    def values_while_acting(self) -> bool:
        """False with separate heads: collect's T loop then runs only the actor, and the
        values of the whole rollout come from batched passes after it."""
        return not self.separate_heads

    @torch.no_grad()
    def act(self, obs: Obs, *, deterministic: bool = False) -> ActOutput:
        """Choose actions for a batch of raw observations (no grad).

        Args:
            obs: ``[N, *obs]`` raw observations (normalized here).
            deterministic: Take the distribution's mode instead of sampling.
        """
        params, values = self.model(self.normalize(obs))
        dist = self.distribution(params, obs)
        actions = dist.mode() if deterministic else dist.sample()
        return ActOutput(actions, dist.env_actions(actions), dist.log_prob(actions), values.float())

    def _actor_distribution(self, obs: Obs) -> Distribution:
        """The action distribution at raw ``obs`` from the actor alone, when the model has a
        ``dist_params`` head, in passes of at most :attr:`max_rows_per_pass` rows."""
        normalized = self.normalize(obs)
        head = self.model.dist_params if self.separate_heads else (lambda x: self.model(x)[0])
        n, rows, S = normalized.shape[0], self.max_rows_per_pass, self.num_seeds
        if rows is None or n <= rows:
            params = head(normalized)
        else:  # cache-sized passes (see max_rows_per_pass), each with the same rows of every member
            params = cat_passes([head(pass_rows(normalized, lo, k, S)) for lo, k in passes(n, rows // S, S)], S)
        return self.distribution(params, obs)

    @torch.no_grad()
    def sample_actions(self, obs: Obs, *, deterministic: bool = False) -> ActionSample:
        """Like :meth:`act` without the values: only the actor runs when the model has a
        ``dist_params`` head."""
        dist = self._actor_distribution(obs)
        actions = dist.mode() if deterministic else dist.sample()
        return ActionSample(actions, dist.env_actions(actions), dist.log_prob(actions))

    @torch.no_grad()
    def log_prob(self, obs: Obs, actions: Tensor) -> Tensor:
        """``[N, 1]`` log-probabilities of buffer ``actions`` at raw ``obs`` (no grad; the
        actor only, where the model allows)."""
        return self._actor_distribution(obs).log_prob(actions)

    def evaluate(self, obs: Obs, actions: Tensor) -> EvalOutput:
        """Log-probabilities, entropy and values of ``actions`` at raw ``obs`` (with grad)."""
        params, values = self.model(self.normalize(obs))
        dist = self.distribution(params, obs)
        return EvalOutput(dist.log_prob(actions), dist.entropy(), values, dist)

    @torch.no_grad()
    def value(self, obs: Obs) -> Tensor:
        """State values of raw observations, ``[N, 1]`` (no grad)."""
        obs = self.normalize(obs)
        value_fn = getattr(self.model, "value", None)
        values = value_fn(obs) if value_fn is not None else self.model(obs)[1]
        return values.float()

    # -- the stateful interface: the state is empty and passes through ------------------

    def initial_state(self, batch_size: int) -> Tensor:
        """``[B, 0]``: a feedforward policy remembers nothing."""
        tensor = next(iter([*self.parameters(), *self.buffers()]), None)  # a model may have no parameters
        return torch.zeros(batch_size, 0, device=tensor.device if tensor is not None else "cpu")

    @torch.no_grad()
    def act_step(self, obs: Obs, state: Tensor, resets: Tensor, *, deterministic: bool = False) -> StepOutput:
        if self.separate_heads:
            sample = self.sample_actions(obs, deterministic=deterministic)
            return StepOutput(*sample, None, state)
        return StepOutput(*self.act(obs, deterministic=deterministic), state)

    @torch.no_grad()
    def value_step(self, obs: Obs, state: Tensor, resets: Tensor) -> Tensor:
        return self.value(obs)

    @torch.no_grad()
    def probe(self, obs: Obs) -> None:
        params, values = self.model(self.normalize(obs))
        self._check_params(params, values, obs.shape[0])


class RecurrentPolicy(PolicyBase):
    """A policy whose model carries a state per sub-env (see :mod:`rlx.models`).

    Takes :class:`PolicyBase`'s arguments; the default model is
    :class:`~rlx.models.RecurrentActorCritic`. ``resets`` arguments are bool, True where
    a step begins a new episode: the model starts that step from its initial state. It
    has no stateless ``act`` / ``evaluate`` / ``value``: every call carries the state.
    """

    default_model_cls = RecurrentActorCritic
    recurrent = True

    def _check_model(self, model: nn.Module) -> None:
        for method in ("initial_state", "forward"):
            if not callable(getattr(model, method, None)):
                raise TypeError(
                    f"recurrent model {type(model).__name__} has no {method}(); a recurrent model "
                    "implements initial_state(batch_size) and forward(obs, state, resets) (see rlx.models)"
                )

    def __getattr__(self, name: str) -> Any:
        if name in ("act", "evaluate", "value"):  # a hint where a feedforward habit leads
            raise AttributeError(
                f"a RecurrentPolicy has no stateless {name}(): it acts with act_step(obs, state, resets), "
                "values with value_step(...) and evaluates with evaluate_sequences(...), which carry its state"
            )
        return super().__getattr__(name)

    def initial_state(self, batch_size: int) -> Tensor:
        """The model's initial state for ``batch_size`` sub-envs, ``[B, *state]``."""
        return self.model.initial_state(batch_size)

    def sequence_forward(self, obs: Obs, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The model on raw ``[B, L, *obs]`` observations: ``(params [B, L, P], values [B, L, 1], state)``."""
        return self.model(self.normalize(obs), state, resets)

    @torch.no_grad()
    def act_step(self, obs: Obs, state: Tensor, resets: Tensor, *, deterministic: bool = False) -> StepOutput:
        n = resets.shape[0]
        params, values, state = self.sequence_forward(obs.unsqueeze(1), state, resets.reshape(n, 1))
        dist = self.distribution(params[:, 0], obs)  # [N, P]
        actions = dist.mode() if deterministic else dist.sample()
        return StepOutput(actions, dist.env_actions(actions), dist.log_prob(actions), values[:, 0].float(), state)

    @torch.no_grad()
    def value_step(self, obs: Obs, state: Tensor, resets: Tensor) -> Tensor:
        n = resets.shape[0]
        return self.sequence_forward(obs.unsqueeze(1), state, resets.reshape(n, 1))[1][:, 0].float()

    def evaluate_sequences(self, obs: Obs, actions: Tensor, state: Tensor, resets: Tensor) -> EvalOutput:
        """Log-probabilities, entropy and values along ``S`` sequences of ``L`` steps (with grad).

        Args:
            obs: ``[S, L, *obs]`` raw observations.
            actions: ``[S, L, *action]`` buffer actions.
            state: ``[S, *state]`` states before each sequence's first step.
            resets: ``[S, L]`` bool.

        Returns:
            :class:`EvalOutput` with ``[S * L, 1]`` entries, sequence-major.
        """
        params, values, _ = self.sequence_forward(obs, state, resets)
        dist = self.distribution(flatten_time(params), flatten_time(obs) if self._has_mask else obs)
        return EvalOutput(dist.log_prob(flatten_time(actions)), dist.entropy(), flatten_time(values), dist)

    @torch.no_grad()
    def probe(self, obs: Obs) -> None:
        B = obs.shape[0]
        state = self.initial_state(B)
        if not isinstance(state, Tensor) or state.shape[:1] != (B,):
            got = list(state.shape) if isinstance(state, Tensor) else type(state).__name__
            raise EnvOutputError(f"model initial_state({B}) returned {got}, expected a tensor [{B}, *state]")
        resets = torch.ones(B, 1, dtype=torch.bool, device=state.device)
        outputs = self.sequence_forward(obs.unsqueeze(1), state, resets)
        if not isinstance(outputs, tuple) or len(outputs) != 3:
            raise EnvOutputError("recurrent model forward(obs, state, resets) must return (dist_params, values, state)")
        params, values, new_state = outputs
        if new_state.shape != state.shape:
            raise EnvOutputError(
                f"recurrent model output 'state' has shape {list(new_state.shape)}, expected {list(state.shape)} "
                "(the shape of initial_state)"
            )
        for name, x, width in (("dist_params", params, sum(self.num_params)), ("values", values, 1)):
            if tuple(x.shape) != (B, 1, width):
                raise EnvOutputError(
                    f"recurrent model output '{name}' has shape {list(x.shape)}, expected {[B, 1, width]} "
                    "for obs [B, L=1, *obs]"
                )
        self._check_params(params[:, 0], values[:, 0], B)
