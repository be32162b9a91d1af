"""The policy: a model, its action distribution and the observation normalizer.

Two explicit entry points, never one function whose return type flips on flags:

* :meth:`Policy.act` for collection: actions, env actions, ``logp`` and values, no grad;
* :meth:`Policy.evaluate` for updates: ``logp``, entropy and values of given actions,
  with grad.

:class:`RecurrentPolicy` does the same with a hidden state per sub-env:
:meth:`~RecurrentPolicy.act_step` (one step, returning the next state) and
:meth:`~RecurrentPolicy.evaluate_sequences` (whole sequences, with grad).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from tensordict import TensorDictBase
from torch import Tensor, nn
from torchrl.data import Composite, TensorSpec

from rlx.distributions import Distribution, default_distribution_cls
from rlx.env import ACTION_MASK
from rlx.models import MLPActorCritic, RecurrentActorCritic
from rlx.normalization import RunningMeanStd

__all__ = ["Policy", "RecurrentPolicy", "ActOutput", "ActionSample", "EvalOutput", "flatten_time"]

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


class Policy(nn.Module):
    """Acting and evaluating with a model and an action distribution.

    Args:
        observation_spec: Spec of one env's observation.
        action_spec: Spec of one env's action.
        model: A ready model instance (mutually exclusive with ``model_cls``).
        model_cls: Model class, built as ``model_cls(observation_spec, action_spec,
            num_params=..., **model_config)``; defaults to :class:`MLPActorCritic`.
        model_config: Keyword arguments for ``model_cls``.
        distribution_cls: Action distribution; defaults from the action spec.
        normalize_obs: Keep a running mean/std of every floating observation entry and
            feed the model normalized observations.
        device: Device of the parameters.
    """

    #: The model class built when neither ``model`` nor ``model_cls`` is given.
    default_model_cls: type[nn.Module] = MLPActorCritic
    #: Whether the policy carries a state per sub-env (see :class:`RecurrentPolicy`).
    recurrent: bool = False
    #: :meth:`sample_actions` runs the actor in passes of at most this many rows (``None``:
    #: one pass). Algorithms set it on a CPU, where a pass over a few thousand rows of a
    #: 256-wide MLP spills out of cache and costs up to twice as much per row.
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
    ) -> None:
        super().__init__()
        self.observation_spec = observation_spec
        self.action_spec = action_spec
        self.distribution_cls = distribution_cls or default_distribution_cls(action_spec)
        self.num_params = self.distribution_cls.param_layout(action_spec)
        if model is None:
            model = (model_cls or self.default_model_cls)(
                observation_spec, action_spec, num_params=self.num_params, **(model_config or {})
            )
        if callable(getattr(model, "initial_state", None)) and not self.recurrent:
            raise TypeError(
                f"model {type(model).__name__} is recurrent (it has initial_state); train it with "
                "RecurrentAlgorithmConfig (algorithm: recurrent_ppo)"
            )
        self.model = model.to(device)
        self._has_mask = isinstance(observation_spec, Composite) and ACTION_MASK in observation_spec.keys()
        self._norm_keys: dict[str, tuple[str, ...]] = {}
        self.obs_normalizers = nn.ModuleDict()
        if normalize_obs:
            for path, spec in _float_leaves(observation_spec).items():
                name = "__".join(path) or "obs"
                self._norm_keys[name] = path
                self.obs_normalizers[name] = RunningMeanStd(
                    tuple(spec.shape), clip=OBS_CLIP, device=device, sync_ranks=True
                )

    # -- observation normalization -------------------------------------------------

    def normalize(self, obs: Obs) -> Obs:
        """Normalize every floating observation entry with the running statistics."""
        if not self._norm_keys:
            return obs
        if isinstance(obs, Tensor):
            return self.obs_normalizers["obs"].normalize(obs)
        obs = obs.copy()  # shallow: never write normalized values into the caller's data
        for name, path in self._norm_keys.items():
            obs.set(path, self.obs_normalizers[name].normalize(obs.get(path)))
        return obs

    @torch.no_grad()
    def update_obs_stats(self, obs: Obs) -> None:
        """Merge a ``[N, *obs]`` batch of raw observations into the running statistics."""
        for name, path in self._norm_keys.items():
            x = obs if isinstance(obs, Tensor) else obs.get(path)
            self.obs_normalizers[name].update(x)

    # -- acting and evaluating -------------------------------------------------------

    def distribution(self, params: Tensor, obs: Obs) -> Distribution:
        """The action distribution for model outputs ``params`` at observations ``obs``."""
        mask = obs.get(ACTION_MASK) if self._has_mask else None
        return self.distribution_cls(params, self.action_spec, action_mask=mask)

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

    @property
    def separate_heads(self) -> bool:
        """The model computes actions and values apart (``dist_params`` and ``value``)."""
        return callable(getattr(self.model, "dist_params", None)) and callable(getattr(self.model, "value", None))

    @torch.no_grad()
    def sample_actions(self, obs: Obs, *, deterministic: bool = False) -> ActionSample:
        """Like :meth:`act` without the values: only the actor runs when the model has a
        ``dist_params`` head (collect then computes the values of the whole rollout in
        batched passes)."""
        normalized = self.normalize(obs)
        head = self.model.dist_params if self.separate_heads else (lambda x: self.model(x)[0])
        n, rows = normalized.shape[0], self.max_rows_per_pass
        if rows is None or n <= rows:
            params = head(normalized)
        else:  # cache-sized passes: see max_rows_per_pass
            params = torch.cat([head(normalized[lo : lo + rows]) for lo in range(0, n, rows)])
        dist = self.distribution(params, obs)
        actions = dist.mode() if deterministic else dist.sample()
        return ActionSample(actions, dist.env_actions(actions), dist.log_prob(actions))

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


def flatten_time(x: Obs) -> Obs:
    """``[B, T, ...]`` -> ``[B * T, ...]`` for a tensor or a TensorDict (copies if strided)."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


class RecurrentPolicy(Policy):
    """A policy whose model carries a state per sub-env (see :mod:`rlx.models`).

    Takes the same arguments as :class:`Policy`; the default model is
    :class:`~rlx.models.RecurrentActorCritic`. ``resets`` arguments are bool, True where
    a step begins a new episode: the model starts that step from its initial state.
    """

    default_model_cls = RecurrentActorCritic
    recurrent = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for method in ("initial_state", "forward"):
            if not callable(getattr(self.model, method, None)):
                raise TypeError(
                    f"recurrent model {type(self.model).__name__} has no {method}(); a recurrent model "
                    "implements initial_state(batch_size) and forward(obs, state, resets) (see rlx.models)"
                )

    def initial_state(self, batch_size: int) -> Tensor:
        """The model's initial state for ``batch_size`` sub-envs, ``[B, *state]``."""
        return self.model.initial_state(batch_size)

    def sequence_forward(self, obs: Obs, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The model on raw ``[B, L, *obs]`` observations: ``(params [B, L, P], values [B, L, 1], state)``."""
        return self.model(self.normalize(obs), state, resets)

    @torch.no_grad()
    def act_step(
        self, obs: Obs, state: Tensor, resets: Tensor, *, deterministic: bool = False
    ) -> tuple[ActOutput, Tensor]:
        """Choose actions for one step of ``N`` sub-envs (no grad).

        Args:
            obs: ``[N, *obs]`` raw observations.
            state: ``[N, *state]`` states before this step.
            resets: ``[N]`` or ``[N, 1]`` bool, True where this step begins an episode.
            deterministic: Take the distribution's mode instead of sampling.

        Returns:
            The :class:`ActOutput` and the state after this step, ``[N, *state]``.
        """
        n = resets.shape[0]
        params, values, state = self.sequence_forward(obs.unsqueeze(1), state, resets.reshape(n, 1))
        dist = self.distribution(params[:, 0], obs)  # [N, P]
        actions = dist.mode() if deterministic else dist.sample()
        return ActOutput(actions, dist.env_actions(actions), dist.log_prob(actions), values[:, 0].float()), state

    @torch.no_grad()
    def value_step(self, obs: Obs, state: Tensor, resets: Tensor) -> Tensor:
        """State values ``[N, 1]`` of one step of raw observations (no grad)."""
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

    def act(self, obs: Obs, *, deterministic: bool = False) -> ActOutput:
        raise TypeError("a RecurrentPolicy acts with act_step(obs, state, resets), which carries its state")

    def evaluate(self, obs: Obs, actions: Tensor) -> EvalOutput:
        raise TypeError("a RecurrentPolicy evaluates with evaluate_sequences(obs, actions, state, resets)")

    def value(self, obs: Obs) -> Tensor:
        raise TypeError("a RecurrentPolicy computes values with value_step(obs, state, resets)")
