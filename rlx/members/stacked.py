"""Seed-stacked models: S agents' networks evaluated as one batched matmul per layer.

The rows of every input are *seed-major* (:func:`seed_rows`): ``S * n`` rows, rows
``i*n:(i+1)*n`` for seed ``i`` (:mod:`rlx.members.axis` explains the layout). Each stacked
layer holds its S copies' weights with a leading seed dim and runs them with
``torch.baddbmm`` over ``[S, n, in]``:

* :class:`StackedLinear` and :class:`StackedMLPActorCritic` (the feedforward default);
* :class:`StackedRNNCell` (S ``nn.LSTMCell`` or ``nn.GRUCell``, PyTorch's gate order and
  equations) and :class:`StackedRecurrentActorCritic` (the recurrent default).

Each stacked model is built from S single models (``seed + i`` for seed ``i``), so seed
i starts where a single-seed run with ``seed + i`` starts, and ``unstack(i)`` gives seed
i's agent back as a single model (what ``rlx eval`` / ``rlx export --seed i`` run).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torchrl.data import TensorSpec

from rlx.models import MLPActorCritic, RecurrentActorCritic, as_model_dtype

__all__ = [
    "seed_rows",
    "StackedLinear",
    "StackedMLPActorCritic",
    "StackedRNNCell",
    "StackedRecurrentActorCritic",
    "stacked_model_cls",
    "STACKED_MODELS",
]


def seed_rows(x: Tensor, num_seeds: int) -> Tensor:
    """``[S * n, ...]`` -> ``[S, n, ...]`` (a view where the layout allows), refusing a row count that S does not divide."""
    if x.shape[0] % num_seeds:
        raise ValueError(f"seed_rows: {x.shape[0]} rows do not split into {num_seeds} seeds of equal size")
    return x.reshape(num_seeds, x.shape[0] // num_seeds, *x.shape[1:])



class StackedLinear(nn.Module):
    """S linear layers in one: ``y[i] = x[i] @ weight[i] + bias[i]`` by ``torch.baddbmm``.

    ``weight`` is ``[S, in, out]`` (transposed from ``nn.Linear``'s ``[out, in]``) and
    ``bias`` ``[S, 1, out]``; ``x`` is ``[S, n, in]``. ``float32`` computes in float32
    under autocast, as :class:`~rlx.models.Float32Linear` does for the output heads.
    """

    def __init__(self, linears: Sequence[nn.Linear], *, float32: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.stack([l.weight.detach().t() for l in linears]).contiguous())
        self.bias = nn.Parameter(torch.stack([l.bias.detach() for l in linears]).unsqueeze(1).contiguous())
        self.float32 = float32

    def forward(self, x: Tensor) -> Tensor:
        if self.float32 and torch.is_autocast_enabled(x.device.type):
            with torch.autocast(device_type=x.device.type, enabled=False):
                return torch.baddbmm(self.bias, x.float(), self.weight)
        return torch.baddbmm(self.bias, x, self.weight)


def _stack_mlp(mlps: Sequence[nn.Sequential]) -> nn.Sequential:
    """One stacked MLP from S MLPs of the same shape (their activations are stateless)."""
    layers: list[nn.Module] = []
    for modules in zip(*mlps):
        first = modules[0]
        if isinstance(first, nn.Linear):
            layers.append(StackedLinear(modules, float32=type(first).__name__ == "Float32Linear"))
        else:
            layers.append(first)
    return nn.Sequential(*layers)


class _Stacked:
    """Construction shared by the stacked models: S single ``single_cls`` models built (or
    given), then stacked by the subclass's ``_load_from``."""

    single_cls: type[nn.Module]

    def __init__(
        self,
        observation_spec: TensorSpec,
        action_spec: TensorSpec,
        /,
        *,
        num_params: tuple[int, int],
        num_seeds: int,
        seed: int | None = None,
        **model_kwargs,
    ) -> None:
        nn.Module.__init__(self)  # the layers come stacked from S single models, not built here
        self._load_from(_single_models(type(self), self.single_cls, observation_spec, action_spec, num_params,
                                       num_seeds, seed, model_kwargs))

    @classmethod
    def from_models(cls, models: Sequence[nn.Module]):
        """The stack of existing single-seed models (their parameters copied, in order)."""
        if not models:
            raise ValueError(f"{cls.__name__}.from_models: needs at least one model")
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self._load_from(list(models))
        return self


class StackedMLPActorCritic(_Stacked, MLPActorCritic):
    """S :class:`~rlx.models.MLPActorCritic` agents evaluated at once, for ``num_seeds = S``.

    It follows the model interface (:mod:`rlx.models`) over seed-major rows: ``obs`` of
    ``N = S * n`` rows, rows ``i*n:(i+1)*n`` for seed i, maps to ``(dist_params [N, .],
    values [N, 1])``, each seed's rows through its own weights. Parameters carry a leading
    seed dim (``[S, in, out]``, ``[S, 1, out]``, ``log_std [S, I]``). ``forward``,
    ``value``, ``dist_params`` and the NPG parameter split are the single model's, over
    the stacked layers.

    Args:
        observation_spec, action_spec, num_params, **mlp_kwargs: As for
            :class:`~rlx.models.MLPActorCritic` (``hiddens``, ``activation_fn``, ...).
        num_seeds: ``S``.
        seed: Seed i's initial parameters are those an ``MLPActorCritic`` gets after
            ``torch.manual_seed(seed + i)`` (the global RNG is left as it was); ``None``
            draws them in turn from the global RNG.
    """

    single_cls = MLPActorCritic

    def _load_from(self, models: list[MLPActorCritic]) -> None:
        first = models[0]
        _check_same_shapes(models, type(self).__name__)
        self.num_seeds = len(models)
        self.observation_spec = first.observation_spec
        self.actor_spec, self.critic_spec = first.actor_spec, first.critic_spec
        self.actor = _stack_mlp([m.actor for m in models])
        self.critic = _stack_mlp([m.critic for m in models])
        self.log_std = (
            nn.Parameter(torch.stack([m.log_std.detach() for m in models]).contiguous())
            if first.log_std is not None else None
        )
        # The architecture unstack() rebuilds; set past nn.Module so that it is no
        # submodule and its (stale) parameters stay out of ours.
        object.__setattr__(self, "_template", first)

    def _rows(self, features: Tensor) -> Tensor:
        return seed_rows(as_model_dtype(self.actor, features), self.num_seeds)

    def _params(self, features: Tensor) -> Tensor:
        x = self._rows(features)  # [S, n, F]
        head = self.actor(x)  # [S, n, D]
        if self.log_std is not None:
            head = torch.cat([head, self.log_std.to(head.dtype).unsqueeze(1).expand(-1, head.shape[1], -1)], dim=-1)
        return head.reshape(features.shape[0], -1)

    def _value(self, features: Tensor) -> Tensor:
        return self.critic(self._rows(features)).reshape(features.shape[0], 1)

    @torch.no_grad()
    def unstack(self, i: int) -> MLPActorCritic:
        """Seed ``i``'s agent as a single-seed :class:`~rlx.models.MLPActorCritic` (a copy:
        what ``rlx eval`` / ``rlx export --seed i`` would run)."""
        if not 0 <= i < self.num_seeds:
            raise IndexError(f"StackedMLPActorCritic.unstack: seed {i} is not in [0, {self.num_seeds})")
        first = next(self.parameters())
        model = copy.deepcopy(self._template).to(first.dtype)  # a float64 stack unstacks to float64
        for single, stacked in ((model.actor, self.actor), (model.critic, self.critic)):
            _copy_linears(single, stacked, i)
        if self.log_std is not None:
            model.log_std.copy_(self.log_std[i])
        return model.to(first.device)


class _SeedRows(nn.Module):
    """A stacked module on seed-major rows of any leading shape: ``[*lead, F]`` ->
    ``[S, n, F]`` -> the module -> ``[*lead, out]``."""

    def __init__(self, module: nn.Module, num_seeds: int) -> None:
        super().__init__()
        self.module, self.num_seeds = module, num_seeds

    def forward(self, x: Tensor) -> Tensor:
        out = self.module(x.reshape(self.num_seeds, -1, x.shape[-1]))
        return out.reshape(*x.shape[:-1], out.shape[-1])


class StackedRNNCell(nn.Module):
    """S ``nn.LSTMCell`` (or ``nn.GRUCell``) in one, on ``[S * n, in]`` seed-major rows.

    The weights are the cells' transposed and stacked (``weight_ih [S, in, G*H]``,
    ``weight_hh [S, H, G*H]``, biases ``[S, 1, G*H]``) and the step is PyTorch's:
    LSTM gates in the order input, forget, cell, output; GRU's reset, update, new with
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))`` and ``h' = (1 - z) n + z h``.
    Called as the single cell is: ``(h, c) = cell(x, (h, c))``, ``h = cell(x, h)``.
    """

    def __init__(self, cells: Sequence[nn.Module]) -> None:
        super().__init__()
        first = cells[0]
        if not all(type(c) is type(first) for c in cells) or not isinstance(first, (nn.LSTMCell, nn.GRUCell)):
            raise ValueError(f"StackedRNNCell: needs nn.LSTMCell or nn.GRUCell of one kind, got {[type(c).__name__ for c in cells]}")
        self.lstm = isinstance(first, nn.LSTMCell)
        self.num_seeds, self.hidden_size = len(cells), first.hidden_size
        def stack(name: str) -> Tensor:
            return torch.stack([getattr(c, name).detach() for c in cells])

        self.weight_ih = nn.Parameter(stack("weight_ih").transpose(1, 2).contiguous())
        self.weight_hh = nn.Parameter(stack("weight_hh").transpose(1, 2).contiguous())
        self.bias_ih = nn.Parameter(stack("bias_ih").unsqueeze(1).contiguous())
        self.bias_hh = nn.Parameter(stack("bias_hh").unsqueeze(1).contiguous())

    def forward(self, x: Tensor, state):
        S = self.num_seeds
        xs = seed_rows(x, S)
        h = state[0] if self.lstm else state
        hs = seed_rows(h, S)
        gi = torch.baddbmm(self.bias_ih, xs, self.weight_ih)  # [S, n, G*H]
        gh = torch.baddbmm(self.bias_hh, hs, self.weight_hh)
        if self.lstm:
            i, f, g, o = (gi + gh).chunk(4, dim=-1)
            c = torch.sigmoid(f) * seed_rows(state[1], S) + torch.sigmoid(i) * torch.tanh(g)
            h_new = torch.sigmoid(o) * torch.tanh(c)
            return h_new.reshape(h.shape), c.reshape(h.shape)
        ir, iz, i_n = gi.chunk(3, dim=-1)
        hr, hz, h_n = gh.chunk(3, dim=-1)
        r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
        n = torch.tanh(i_n + r * h_n)
        return ((1 - z) * n + z * hs).reshape(h.shape)

    @torch.no_grad()
    def copy_to(self, cell: nn.Module, i: int) -> None:
        """Write seed ``i``'s weights into a single cell."""
        cell.weight_ih.copy_(self.weight_ih[i].t())
        cell.weight_hh.copy_(self.weight_hh[i].t())
        cell.bias_ih.copy_(self.bias_ih[i, 0])
        cell.bias_hh.copy_(self.bias_hh[i, 0])


class StackedRecurrentActorCritic(_Stacked, RecurrentActorCritic):
    """S :class:`~rlx.models.RecurrentActorCritic` agents evaluated at once, for
    ``num_seeds = S`` with a recurrent algorithm.

    ``forward(obs [B, L, ...], state [B, ...], resets [B, L])`` is the single model's over
    ``B = S * b`` seed-major sub-envs: each seed's rows through its own encoder, cells and
    heads (:class:`StackedRNNCell`), the state still one row per sub-env. Parameters
    carry a leading seed dim.

    Args:
        observation_spec, action_spec, num_params, **model_kwargs: As for
            :class:`~rlx.models.RecurrentActorCritic` (``hiddens``, ``cell``,
            ``hidden_size``, ``num_layers``, ``obs_groups``, ...).
        num_seeds: ``S``.
        seed: Seed i's initial parameters are those a ``RecurrentActorCritic`` gets after
            ``torch.manual_seed(seed + i)`` (the global RNG is left as it was).
    """

    single_cls = RecurrentActorCritic

    def _load_from(self, models: list[RecurrentActorCritic]) -> None:
        first, S = models[0], len(models)
        _check_same_shapes(models, type(self).__name__)
        self.num_seeds = S
        for name in ("observation_spec", "cell", "hidden_size", "num_layers", "state_tensors", "actor_spec",
                     "critic_spec", "separate_critic"):
            setattr(self, name, getattr(first, name))
        self.encoder = _SeedRows(_stack_mlp([m.encoder for m in models]), S)
        self.cells = nn.ModuleList(StackedRNNCell([m.cells[k] for m in models]) for k in range(first.num_layers))
        if first.separate_critic:
            self.critic_encoder = _SeedRows(_stack_mlp([m.critic_encoder for m in models]), S)
            self.critic_cells = nn.ModuleList(
                StackedRNNCell([m.critic_cells[k] for m in models]) for k in range(first.num_layers)
            )
        self.actor = _SeedRows(StackedLinear([m.actor for m in models], float32=True), S)
        self.critic = _SeedRows(StackedLinear([m.critic for m in models], float32=True), S)
        self.log_std = (
            nn.Parameter(torch.stack([m.log_std.detach() for m in models]).contiguous())
            if first.log_std is not None else None
        )
        object.__setattr__(self, "_template", first)

    def _with_log_std(self, head: Tensor) -> Tensor:
        if self.log_std is None:
            return head
        B, L = head.shape[:2]
        S = self.num_seeds
        log_std = self.log_std.to(head.dtype).view(S, 1, 1, -1).expand(S, B // S, L, -1).reshape(B, L, -1)
        return torch.cat([head, log_std], dim=-1)

    @torch.no_grad()
    def unstack(self, i: int) -> RecurrentActorCritic:
        """Seed ``i``'s agent as a single-seed :class:`~rlx.models.RecurrentActorCritic` (a copy)."""
        if not 0 <= i < self.num_seeds:
            raise IndexError(f"StackedRecurrentActorCritic.unstack: seed {i} is not in [0, {self.num_seeds})")
        model = copy.deepcopy(self._template).to(next(self.parameters()).dtype)
        pairs = [(model.encoder, self.encoder.module), (nn.Sequential(model.actor), nn.Sequential(self.actor.module)),
                 (nn.Sequential(model.critic), nn.Sequential(self.critic.module))]
        cells = [(model.cells, self.cells)]
        if self.separate_critic:
            pairs.append((model.critic_encoder, self.critic_encoder.module))
            cells.append((model.critic_cells, self.critic_cells))
        for single, stacked in pairs:
            _copy_linears(single, stacked, i)
        for single_cells, stacked_cells in cells:
            for cell, stacked_cell in zip(single_cells, stacked_cells):
                stacked_cell.copy_to(cell, i)
        if self.log_std is not None:
            model.log_std.copy_(self.log_std[i])
        return model.to(next(self.parameters()).device)


def _single_models(stack_cls: type, cls: type, observation_spec, action_spec, num_params, num_seeds, seed, kwargs,
                   ) -> list[nn.Module]:
    """S single ``cls`` models, seed i's drawn after ``torch.manual_seed(seed + i)`` (the
    global RNG left as it was), or in turn from the global RNG when ``seed`` is None."""
    if not isinstance(num_seeds, int) or isinstance(num_seeds, bool) or num_seeds < 1:
        raise ValueError(f"{stack_cls.__name__}.num_seeds: must be a positive int, got {num_seeds!r}")
    models = []
    for i in range(num_seeds):
        if seed is None:
            models.append(cls(observation_spec, action_spec, num_params=num_params, **kwargs))
            continue
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + i)
            models.append(cls(observation_spec, action_spec, num_params=num_params, **kwargs))
    return models


def _check_same_shapes(models: Sequence[nn.Module], name: str) -> None:
    shapes = [[tuple(p.shape) for p in m.parameters()] for m in models]
    if any(s != shapes[0] for s in shapes):
        raise ValueError(f"{name}: the models differ in shape; seeds must share an architecture")


@torch.no_grad()
def _copy_linears(single: nn.Sequential, stacked: nn.Sequential, i: int) -> None:
    """Seed ``i``'s slice of each :class:`StackedLinear` into the matching ``nn.Linear``."""
    linears = [m for m in single if isinstance(m, nn.Linear)]
    for linear, layer in zip(linears, (m for m in stacked if isinstance(m, StackedLinear))):
        linear.weight.copy_(layer.weight[i].t())
        linear.bias.copy_(layer.bias[i, 0])


#: The stacked model that stands for each default model when ``num_seeds > 1``.
STACKED_MODELS: dict[type[nn.Module], type[nn.Module]] = {
    MLPActorCritic: StackedMLPActorCritic,
    RecurrentActorCritic: StackedRecurrentActorCritic,
}


def stacked_model_cls(default_cls: type[nn.Module]) -> type[nn.Module]:
    """The seed-stacked counterpart of a policy's default model class."""
    try:
        return STACKED_MODELS[default_cls]
    except KeyError:
        raise ValueError(f"no seed-stacked model for {default_cls.__name__}; pass a model with a seed dim") from None
