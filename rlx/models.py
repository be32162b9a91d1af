"""The default actor-critic model, and the interface a custom model implements.

A model is an ``nn.Module`` built as ``model_cls(observation_spec, action_spec,
num_params=(S, I), **model_config)`` whose ``forward(obs)`` maps a batch of ``N``
(already normalized) observations to ``(dist_params [N, S + I], values [N, 1])``.
Optional methods make it faster: ``value(obs)`` and ``dist_params(obs)`` (one head
only), and ``actor_parameters()`` / ``critic_parameters()`` for NPG (otherwise NPG finds
the split by autograd at build, and rejects parameters that both heads use).
``(S, I)`` is the distribution's :meth:`~rlx.core.distributions.Distribution.param_layout`:
state-dependent and state-independent parameters. ``obs`` is a ``[N, *obs]`` tensor, or
a TensorDict with batch size ``[N]`` for a ``Composite`` observation spec.

A recurrent model (for :class:`~rlx.config.RecurrentAlgorithmConfig`) is built the same
way and implements two methods instead of ``forward(obs)``:

* ``initial_state(batch_size) -> state``: the state of a sub-env at the start of an
  episode, one tensor ``[B, *state]`` on the model's device (several tensors, such as an
  LSTM's ``h`` and ``c``, are stacked into one);
* ``forward(obs, state, resets) -> (dist_params [B, L, S + I], values [B, L, 1],
  state)``: ``L`` steps of ``B`` sequences, ``obs`` ``[B, L, *obs]`` (or a TensorDict
  with batch size ``[B, L]``), ``state`` ``[B, *state]`` before the first step, and
  ``resets`` ``[B, L]`` bool, True where a step begins a new episode: the model must
  replace the state with the initial one before that step (with ``torch.where``, never
  a Python branch, so a NaN in a stale state cannot leak through). It returns the state after the last step.
  One step (``L = 1``) is how the policy acts; a sequence is how it trains, and the two
  must agree.

:class:`RecurrentActorCritic` is the default recurrent model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from torch import Tensor, nn
from torchrl.data import Composite, TensorSpec

from rlx.env import ACTION_MASK, group_spec

__all__ = ["MLPActorCritic", "RecurrentActorCritic", "flatten_obs", "obs_feature_size", "split_actor_critic", "ACTIVATIONS", "CELLS"]

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "leaky_relu": nn.LeakyReLU,
}


def _feature_keys(spec: Composite, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    keys = []
    for key in sorted(spec.keys()):
        sub = spec[key]
        if isinstance(sub, Composite):
            keys += _feature_keys(sub, prefix + (key,))
        elif key != ACTION_MASK:
            keys.append(prefix + (key,))
    return keys


def obs_feature_size(observation_spec: TensorSpec) -> int:
    """Number of features ``D`` of a flattened observation (``action_mask`` excluded)."""
    if isinstance(observation_spec, Composite):
        return sum(math.prod(observation_spec[k].shape) for k in _feature_keys(observation_spec))
    return math.prod(observation_spec.shape)


def flatten_obs(obs: Tensor | TensorDictBase, observation_spec: TensorSpec) -> Tensor:
    """Flatten a batch of observations into float features ``[N, D]``.

    Composite entries are flattened and concatenated in sorted key order; the
    ``action_mask`` entry is not a feature.
    """
    if isinstance(observation_spec, Composite):
        parts = [obs.get(k) for k in _feature_keys(observation_spec)]
        n = obs.batch_size[0]
        return torch.cat([p.reshape(n, -1).float() for p in parts], dim=-1)
    return obs.reshape(obs.shape[0], -1).float()


def _activation(name: str) -> type[nn.Module]:
    if name not in ACTIVATIONS:
        raise ValueError(f"model_config.activation_fn={name!r} is not one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def _widths(hiddens: Sequence[int], *, allow_empty: bool, name: str = "hiddens") -> list[int]:
    if not isinstance(hiddens, (list, tuple)):
        raise ValueError(f"model_config.{name} must be a list of positive ints, got {hiddens!r}")
    widths = list(hiddens)
    if (not widths and not allow_empty) or any(not isinstance(h, int) or isinstance(h, bool) or h <= 0 for h in widths):
        raise ValueError(f"model_config.{name} must be positive ints, got {widths}")
    return widths


class Float32Linear(nn.Linear):
    """A ``Linear`` that computes in float32 even under autocast: the output heads.

    Their outputs (logits, means, values) feed the losses and GAE directly; in bf16 a value
    near 100 is only resolved to 0.5, which the value loss would mostly measure. The heads
    are the smallest layers, so float32 there costs next to nothing; the hidden layers keep
    the mixed precision."""

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_autocast_enabled(x.device.type):
            with torch.autocast(device_type=x.device.type, enabled=False):
                return super().forward(x.float())
        return super().forward(x)


def _mlp(sizes: Sequence[int], activation: type[nn.Module], out_gain: float, *, head: bool = False) -> nn.Sequential:
    """Linear layers of ``sizes`` with ``activation`` between them; ``head``: the last
    layer is a :class:`Float32Linear`."""
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = i == len(sizes) - 2
        linear = (Float32Linear if head and last else nn.Linear)(fan_in, fan_out)
        # Orthogonal init (sqrt(2) hidden, small policy head): the usual PPO recipe that
        # starts the policy near uniform and the critic near zero.
        nn.init.orthogonal_(linear.weight, out_gain if last else math.sqrt(2.0))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(activation())
    return nn.Sequential(*layers)


def _widened(features: Tensor, wide: bool) -> Tensor:
    """``features`` (flatten_obs's float32) in float64 where the model is (``wide``): a
    reference run, as the tests' float64 equivalence checks build."""
    return features.double() if wide else features


def as_model_dtype(net: nn.Sequential, features: Tensor) -> Tensor:
    """``features`` for ``net`` (whose first layer has a ``weight``), :func:`_widened`."""
    return _widened(features, net[0].weight.dtype == torch.float64)


class MLPActorCritic(nn.Module):
    """Separate actor and critic MLPs over the flattened observation.

    Args:
        observation_spec: Spec of one env's observation.
        action_spec: Spec of one env's action (used only through ``num_params``).
        num_params: ``(S, I)`` from the distribution's ``param_layout``: the actor head
            outputs ``S`` values; ``I`` state-independent parameters (a Gaussian's
            log-std) are free parameters initialised to ``log_std_init``.
        hiddens: Hidden layer widths of the actor MLP (and of the critic's when
            ``critic_hiddens`` is not given).
        activation_fn: One of :data:`ACTIVATIONS`.
        log_std_init: Initial value of the state-independent parameters.
        obs_groups: ``{"actor": [keys], "critic": [keys]}``: the top-level keys of a
            Composite observation each MLP reads (a missing group reads every key).
        critic_hiddens: Hidden layer widths of the critic MLP, when it should differ from
            the actor's (a small deployed actor with a larger critic, as robot setups use).
    """

    def __init__(
        self,
        observation_spec: TensorSpec,
        action_spec: TensorSpec,
        /,
        *,
        num_params: tuple[int, int],
        hiddens: Sequence[int] = (256, 256),
        activation_fn: str = "relu",
        log_std_init: float = 0.0,
        obs_groups: dict[str, list[str]] | None = None,
        critic_hiddens: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        activation = _activation(activation_fn)
        hiddens = _widths(hiddens, allow_empty=False)
        critic_widths = hiddens if critic_hiddens is None else _widths(critic_hiddens, allow_empty=False, name="critic_hiddens")
        self.observation_spec = observation_spec
        groups = obs_groups or {}
        self.actor_spec = group_spec(observation_spec, groups.get("actor"))
        self.critic_spec = group_spec(observation_spec, groups.get("critic"))
        num_dependent, num_independent = num_params
        self.actor = _mlp([obs_feature_size(self.actor_spec), *hiddens, num_dependent], activation, out_gain=0.01, head=True)
        self.critic = _mlp([obs_feature_size(self.critic_spec), *critic_widths, 1], activation, out_gain=1.0, head=True)
        self.log_std = (
            nn.Parameter(torch.full((num_independent,), float(log_std_init))) if num_independent else None
        )

    def _params(self, features: Tensor) -> Tensor:
        head = self.actor(as_model_dtype(self.actor, features))  # [N, S]
        if self.log_std is None:
            return head
        return torch.cat([head, self.log_std.to(head.dtype).expand(head.shape[0], -1)], dim=-1)

    def _value(self, features: Tensor) -> Tensor:
        return self.critic(as_model_dtype(self.critic, features))

    def forward(self, obs: Tensor | TensorDictBase) -> tuple[Tensor, Tensor]:
        """Map observations to ``(dist_params [N, S + I], values [N, 1])``."""
        if self.actor_spec is self.critic_spec:  # one group: flatten once
            features = flatten_obs(obs, self.actor_spec)
            return self._params(features), self._value(features)
        return self.dist_params(obs), self.value(obs)

    def value(self, obs: Tensor | TensorDictBase) -> Tensor:
        """Critic only (the critic group): ``[N, 1]``."""
        return self._value(flatten_obs(obs, self.critic_spec))

    def dist_params(self, obs: Tensor | TensorDictBase) -> Tensor:
        """Actor only (the actor group): ``[N, S + I]``."""
        return self._params(flatten_obs(obs, self.actor_spec))

    def actor_parameters(self) -> list[nn.Parameter]:
        """The parameters that shape the action distribution (NPG's natural step)."""
        return list(self.actor.parameters()) + ([self.log_std] if self.log_std is not None else [])

    def critic_parameters(self) -> list[nn.Parameter]:
        """The parameters of the value function (NPG's critic regression)."""
        return list(self.critic.parameters())


def _recurrent_core(
    d: int, hiddens: list[int], activation: type[nn.Module], cell_cls: type[nn.Module], hidden_size: int, num_layers: int
) -> tuple[nn.Sequential, nn.ModuleList]:
    """An MLP encoder (Linear + activation per hidden width; none: the core reads the flat
    observation) and a stack of orthogonally initialised recurrent cells."""
    encoder = list(_mlp([d, *hiddens], activation, out_gain=math.sqrt(2.0))) if hiddens else []
    sizes = [hiddens[-1] if hiddens else d] + [hidden_size] * num_layers
    cells = nn.ModuleList(cell_cls(fan_in, hidden_size) for fan_in in sizes[:-1])
    for core in cells:
        nn.init.orthogonal_(core.weight_ih)
        nn.init.orthogonal_(core.weight_hh)
        nn.init.zeros_(core.bias_ih)
        nn.init.zeros_(core.bias_hh)
    return nn.Sequential(*encoder, *([activation()] if hiddens else [])), cells


def _head(fan_in: int, hiddens: list[int], out: int, activation: type[nn.Module], gain: float) -> nn.Module:
    """A linear head (``hiddens`` empty) or an MLP head, orthogonally initialised."""
    if hiddens:
        return _mlp([fan_in, *hiddens, out], activation, out_gain=gain, head=True)
    head = Float32Linear(fan_in, out)
    nn.init.orthogonal_(head.weight, gain)
    nn.init.zeros_(head.bias)
    return head


#: Recurrent cells of :class:`RecurrentActorCritic`: name -> (cell class, state tensors).
CELLS: dict[str, tuple[type[nn.Module], int]] = {"lstm": (nn.LSTMCell, 2), "gru": (nn.GRUCell, 1)}


class RecurrentActorCritic(nn.Module):
    """MLP encoder, a stack of LSTM or GRU cells, and linear actor and critic heads.

    The actor and critic share the encoder and the recurrent core (one state per
    sub-env). The state is one tensor ``[B, num_layers, k, hidden_size]`` with ``k = 2``
    (``h``, ``c``) for an LSTM and ``k = 1`` for a GRU; the initial state is zeros, and a
    step that resets starts from zeros whatever its stored state holds. With
    ``obs_groups`` whose actor and critic read different keys, the critic has its own
    encoder and core, and the state stacks both: ``[B, 2 * num_layers, k, hidden_size]``,
    the actor's layers first.

    Args:
        observation_spec: Spec of one env's observation.
        action_spec: Spec of one env's action (used only through ``num_params``).
        num_params: ``(S, I)`` from the distribution's ``param_layout``.
        hiddens: Widths of the encoder's hidden layers (empty: the flattened
            observation feeds the core directly).
        activation_fn: Encoder activation, one of :data:`ACTIVATIONS`.
        cell: ``"lstm"`` or ``"gru"``.
        hidden_size: Width of every recurrent layer.
        num_layers: Number of stacked recurrent layers.
        log_std_init: Initial value of the state-independent parameters.
        obs_groups: ``{"actor": [keys], "critic": [keys]}``: the top-level keys of a
            Composite observation each part reads (a missing group reads every key).
        head_hiddens: Hidden widths of an MLP between the core and each head (empty:
            linear heads). rsl_rl 5's ``RNNModel`` is ``hiddens=[]`` (the core reads
            the observation) with its ``hidden_dims`` here.
        separate_critic: The critic gets its own encoder, core and state even when it
            reads the actor's keys (rsl_rl's actor and critic are separate networks).
        critic_head_hiddens: The critic head's hidden widths, when they differ from
            ``head_hiddens``.
    """

    def __init__(
        self,
        observation_spec: TensorSpec,
        action_spec: TensorSpec,
        /,
        *,
        num_params: tuple[int, int],
        hiddens: Sequence[int] = (64,),
        activation_fn: str = "tanh",
        cell: str = "lstm",
        hidden_size: int = 64,
        num_layers: int = 1,
        log_std_init: float = 0.0,
        obs_groups: dict[str, list[str]] | None = None,
        head_hiddens: Sequence[int] = (),
        separate_critic: bool = False,
        critic_head_hiddens: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        activation = _activation(activation_fn)
        head_widths = _widths(head_hiddens, allow_empty=True, name="head_hiddens")
        critic_head_widths = head_widths if critic_head_hiddens is None else _widths(
            critic_head_hiddens, allow_empty=True, name="critic_head_hiddens")
        if cell not in CELLS:
            raise ValueError(f"model_config.cell={cell!r} is not one of {sorted(CELLS)}")
        hiddens = _widths(hiddens, allow_empty=True)
        for name, value in (("hidden_size", hidden_size), ("num_layers", num_layers)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"model_config.{name} must be a positive int, got {value!r}")
        self.observation_spec = observation_spec
        self.cell, self.hidden_size, self.num_layers = cell, hidden_size, num_layers
        cell_cls, self.state_tensors = CELLS[cell]
        groups = obs_groups or {}
        self.actor_spec = group_spec(observation_spec, groups.get("actor"))
        self.critic_spec = group_spec(observation_spec, groups.get("critic"))
        self.separate_critic = bool(separate_critic) or self.actor_spec is not self.critic_spec
        self.encoder, self.cells = _recurrent_core(
            obs_feature_size(self.actor_spec), hiddens, activation, cell_cls, hidden_size, num_layers
        )
        if self.separate_critic:  # the critic reads other keys: its own encoder, core and state
            self.critic_encoder, self.critic_cells = _recurrent_core(
                obs_feature_size(self.critic_spec), hiddens, activation, cell_cls, hidden_size, num_layers
            )
        num_dependent, num_independent = num_params
        # Linear heads keep the names they had before head_hiddens existed: checkpoints load.
        self.actor = _head(hidden_size, head_widths, num_dependent, activation, 0.01)
        self.critic = _head(hidden_size, critic_head_widths, 1, activation, 1.0)
        self.log_std = (
            nn.Parameter(torch.full((num_independent,), float(log_std_init))) if num_independent else None
        )

    def initial_state(self, batch_size: int) -> Tensor:
        """Zeros, ``[B, num_layers, k, hidden_size]`` (``2 * num_layers`` with a separate critic)."""
        layers = self.num_layers * (2 if self.separate_critic else 1)
        device = next(self.parameters()).device
        return torch.zeros(batch_size, layers, self.state_tensors, self.hidden_size, dtype=torch.float32, device=device)

    def _step(self, x: Tensor, state: Tensor, cells: nn.ModuleList) -> Tensor:
        """One step of a cell stack: ``[B, F]`` features, ``[B, layers, k, H]`` state."""
        new = []
        for layer, core in enumerate(cells):
            if self.state_tensors == 2:
                h, c = core(x, (state[:, layer, 0].to(x.dtype), state[:, layer, 1].to(x.dtype)))
                new.append(torch.stack([h, c], dim=1))  # [B, 2, H]
            else:
                h = core(x, state[:, layer, 0].to(x.dtype))
                new.append(h.unsqueeze(1))  # [B, 1, H]
            x = h
        return torch.stack(new, dim=1)  # [B, layers, k, H]

    def forward(self, obs: Tensor | TensorDictBase, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Run ``L`` steps: see the module docstring for the shapes."""
        B, L = resets.shape
        flat = obs.reshape(B * L, *obs.shape[2:])  # [B*L, *obs]
        # flatten_obs gives float32; a float64 model (the tests' reference runs) computes in float64.
        wide = self.cells[0].weight_ih.dtype == torch.float64
        features = self.encoder(_widened(flatten_obs(flat, self.actor_spec), wide)).view(B, L, -1)  # [B, L, F]
        if self.separate_critic:
            critic_features = self.critic_encoder(_widened(flatten_obs(flat, self.critic_spec), wide)).view(B, L, -1)
        # False where a new episode starts; any integer or bool resets. A where, not a
        # product, so a step that resets ignores its state even if it holds inf or NaN.
        keep = (resets == 0).view(B, L, 1, 1, 1)
        n = self.num_layers
        actor_out, critic_out = [], []
        for t in range(L):
            state = torch.where(keep[:, t], state, 0.0)
            actor_state = self._step(features[:, t], state[:, :n], self.cells)
            actor_out.append(actor_state[:, -1, 0])  # the top layer's h, [B, H]
            if self.separate_critic:
                critic_state = self._step(critic_features[:, t], state[:, n:], self.critic_cells)
                critic_out.append(critic_state[:, -1, 0])
                state = torch.cat([actor_state, critic_state], dim=1)  # [B, 2 * layers, k, H]
            else:
                state = actor_state
        core = torch.stack(actor_out, dim=1)  # [B, L, H]
        head = self._with_log_std(self.actor(core))  # [B, L, S + I]
        return head, self.critic(torch.stack(critic_out, dim=1) if critic_out else core), state

    def act_flat(self, features: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One actor step on flat normalized features ``[B, D]`` (:func:`flatten_obs`'s
        layout) from ``state``: ``(dist_params [B, S + I], state)``, no reset; a separate
        critic's part of the state passes unchanged. What a deployed step runs: plain
        tensors only, so it traces and exports at any batch size."""
        n = self.num_layers
        actor_state = self._step(self.encoder(features), state[:, :n], self.cells)
        head = self._with_log_std(self.actor(actor_state[:, -1, 0]).unsqueeze(1))[:, 0]
        new = torch.cat([actor_state, state[:, n:]], dim=1) if self.separate_critic else actor_state
        return head, new

    def actor_parameters(self) -> list[nn.Parameter]:
        """The parameters that shape the action distribution (the shared core included)."""
        return [*self.encoder.parameters(), *self.cells.parameters(), *self.actor.parameters(),
                *([self.log_std] if self.log_std is not None else [])]

    def critic_parameters(self) -> list[nn.Parameter]:
        """The value function's parameters (the shared core included, without a separate critic)."""
        if self.separate_critic:
            core = [*self.critic_encoder.parameters(), *self.critic_cells.parameters()]
        else:
            core = [*self.encoder.parameters(), *self.cells.parameters()]
        return [*core, *self.critic.parameters()]

    def _with_log_std(self, head: Tensor) -> Tensor:
        """``[B, L, S]`` head outputs, then the state-independent parameters (``[B, L, S + I]``)."""
        if self.log_std is None:
            return head
        B, L = head.shape[:2]
        return torch.cat([head, self.log_std.to(head.dtype).expand(B, L, -1)], dim=-1)


def split_actor_critic(model: nn.Module, sample_obs: Tensor | TensorDictBase, *, needed_by: str = "NPG",
                       ) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """The model's actor and critic parameters, which must not overlap.

    Uses ``actor_parameters()`` / ``critic_parameters()`` when the model has them, and
    otherwise asks autograd which parameters each output depends on.

    Raises:
        ValueError: a parameter feeds both the distribution and the value (a shared
            trunk): a natural step on it would also move the critic.
    """
    if callable(getattr(model, "actor_parameters", None)) and callable(getattr(model, "critic_parameters", None)):
        actor, critic = list(model.actor_parameters()), list(model.critic_parameters())
    else:
        params = [p for p in model.parameters() if p.requires_grad]
        dist_params, values = model(sample_obs)
        actor_grads = torch.autograd.grad(dist_params.sum(), params, allow_unused=True, retain_graph=True)
        critic_grads = torch.autograd.grad(values.sum(), params, allow_unused=True)
        actor = [p for p, g in zip(params, actor_grads) if g is not None]
        critic = [p for p, g in zip(params, critic_grads) if g is not None]
    shared = {id(p) for p in actor} & {id(p) for p in critic}
    if shared:
        names = [n for n, p in model.named_parameters() if id(p) in shared]
        raise ValueError(
            f"model: {needed_by} needs separate actor and critic parameters, but {names} feed both; "
            "use separate networks (the default model does)"
        )
    return actor, critic
