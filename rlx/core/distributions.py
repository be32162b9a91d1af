"""Action distributions built from a flat ``[N, P]`` parameter tensor.

Every distribution here takes the parameters a model produced for ``N`` observations,
works in float32 whatever the autocast dtype, and returns ``log_prob`` and ``entropy`` as
``[N, 1]``, so a ``[N]`` vs ``[N, A]`` broadcasting bug cannot reach a loss.

The tensor stored in the buffer under ``actions`` is the distribution's own sample
(:meth:`Distribution.sample`); the tensor handed to the env is
:meth:`Distribution.env_actions` of it. They differ only for bounded continuous actions:
:class:`Normal` clips the env action and keeps ``log_prob`` on the unclipped sample, and
:class:`SquashedNormal` squashes the sample with ``tanh`` into the bounds.

A model provides the parameters in the layout given by :meth:`Distribution.param_layout`:
``(num_state_dependent, num_state_independent)``. The default model produces the first
part from its actor head and holds the second (the log-std of a Gaussian) as a free
parameter, concatenating both along the last dimension.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
import torch.nn.functional as F
from torch import Tensor
from torchrl.data import Bounded, Categorical as CategoricalSpec, MultiCategorical as MultiCategoricalSpec
from torchrl.data import TensorSpec

__all__ = [
    "Distribution",
    "Categorical",
    "MultiCategorical",
    "Normal",
    "SquashedNormal",
    "default_distribution_cls",
]

# Bounds on a Gaussian log-std: keep exp() finite and the density well conditioned.
LOG_STD_MIN, LOG_STD_MAX = -20.0, 5.0
_LOG_2PI = math.log(2.0 * math.pi)


class Distribution(ABC):
    """A batch of action distributions.

    Args:
        params: ``[N, P]`` parameters from the model, ``P = sum(param_layout(spec))``.
        action_spec: Spec of ONE env's action.
        action_mask: Optional ``[N, ...]`` boolean mask of valid discrete actions (only
            discrete distributions accept one).
    """

    def __init__(
        self, params: Tensor, action_spec: TensorSpec, *, action_mask: Tensor | None = None
    ) -> None:
        self.action_spec = action_spec
        # Half-precision parameters (under autocast) are upcast; float64 stays float64.
        self.params = params.float() if params.dtype in (torch.float16, torch.bfloat16) else params

    @classmethod
    @abstractmethod
    def param_layout(cls, action_spec: TensorSpec) -> tuple[int, int]:
        """Number of state-dependent and state-independent parameters per observation."""

    def _as_spec(self, actions: Tensor) -> Tensor:
        """``[N, ...]`` actions in the spec's shape and dtype (``[N, *spec.shape]``): what
        the buffer, which the spec allocates, holds. A no-op when they already match."""
        return actions.reshape(actions.shape[0], *self.action_spec.shape).to(self.action_spec.dtype)

    @classmethod
    def num_params(cls, action_spec: TensorSpec) -> int:
        """Width ``P`` of the flat parameter tensor."""
        return sum(cls.param_layout(action_spec))

    @abstractmethod
    def sample(self) -> Tensor:
        """Draw actions, ``[N, *action]``, in the buffer's representation."""

    @abstractmethod
    def mode(self) -> Tensor:
        """The most likely action (deterministic evaluation), ``[N, *action]``."""

    @abstractmethod
    def log_prob(self, actions: Tensor) -> Tensor:
        """Log-density of buffer actions, ``[N, 1]``."""

    @abstractmethod
    def entropy(self) -> Tensor:
        """Entropy, ``[N, 1]``."""

    @abstractmethod
    def kl(self, other: Distribution) -> Tensor:
        """``KL(self || other)`` per observation, ``[N, 1]``."""

    def env_actions(self, actions: Tensor) -> Tensor:
        """Map buffer actions to what the env receives (identity unless bounded)."""
        return actions

    def fisher_product(self, u: Tensor) -> Tensor:
        """``M u`` per observation: the Fisher information of the distribution with
        respect to its own flat parameters, times ``u`` (``[N, P] -> [N, P]``).

        ``M`` is the Hessian of ``KL(self || p(params + e))`` in ``e`` at ``e = 0``, so
        ``Jᵀ M J`` (``J`` the Jacobian of the parameters in the network weights) is the
        Gauss-Newton form of the policy's Fisher matrix, used by natural gradients.
        Distributions without a closed form raise ``NotImplementedError``, and NPG then
        falls back to double backpropagation through :meth:`kl`.
        """
        raise NotImplementedError


class Categorical(Distribution):
    """Independent categorical heads for a ``Categorical(n, shape=S)`` action spec.

    ``S = ()`` gives one head and actions ``[N]``; ``S = (k,)`` gives ``k`` independent
    heads over the same ``n`` choices and actions ``[N, k]``. An action mask has shape
    ``[N, *S, n]``; masked actions get zero probability.
    """

    def __init__(
        self, params: Tensor, action_spec: TensorSpec, *, action_mask: Tensor | None = None
    ) -> None:
        super().__init__(params, action_spec, action_mask=action_mask)
        n = action_spec.space.n
        logits = self.params.reshape(params.shape[0], -1, n)  # [N, k, n]
        if action_mask is not None:
            mask = action_mask.reshape(params.shape[0], -1, n).bool()
            logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
            self._mask = mask
        else:
            self._mask = None
        self.log_probs = torch.log_softmax(logits, dim=-1)  # [N, k, n]

    @classmethod
    def param_layout(cls, action_spec: TensorSpec) -> tuple[int, int]:
        return action_spec.space.n * max(1, math.prod(action_spec.shape)), 0

    def sample(self) -> Tensor:
        # Gumbel-max: one fused sample for every head, no multinomial per head.
        u = torch.rand_like(self.log_probs).clamp_(min=torch.finfo(torch.float32).tiny)
        return self._as_spec(torch.argmax(self.log_probs - torch.log(-torch.log(u)), -1))

    def mode(self) -> Tensor:
        return self._as_spec(torch.argmax(self.log_probs, dim=-1))

    def log_prob(self, actions: Tensor) -> Tensor:
        idx = actions.reshape(actions.shape[0], -1, 1).long()  # [N, k, 1]
        picked = self.log_probs.gather(-1, idx)
        if picked.shape[1] == 1:  # one head: its log-probability (a sum of one, a kernel less)
            return picked.view(-1, 1)
        return picked.sum(dim=(1, 2)).unsqueeze(-1)

    def _plogp(self, logq: Tensor) -> Tensor:
        p = self.log_probs.exp()
        terms = p * logq
        if self._mask is not None:
            terms = torch.where(self._mask, terms, torch.zeros_like(terms))
        return terms

    def entropy(self) -> Tensor:
        return -self._plogp(self.log_probs).sum(dim=(1, 2)).unsqueeze(-1)

    def kl(self, other: Distribution) -> Tensor:
        assert isinstance(other, Categorical)
        return self._plogp(self.log_probs - other.log_probs).sum(dim=(1, 2)).unsqueeze(-1)

    def fisher_product(self, u: Tensor) -> Tensor:
        # Per head, the Fisher of softmax logits is diag(p) - p pᵀ; masked entries have
        # p = 0 and drop out.
        p = self.log_probs.exp()  # [N, k, n]
        u = u.reshape(p.shape)
        return (p * (u - (p * u).sum(-1, keepdim=True))).reshape(u.shape[0], -1)


def _nvec(action_spec: TensorSpec) -> list[int]:
    # The head sizes are read from the (possibly CUDA) spec once and cached on it, so
    # building a distribution in the collect loop never syncs.
    nvec = getattr(action_spec, "_rlx_nvec", None)
    if nvec is None:
        nvec = [int(n) for n in action_spec.nvec.flatten().tolist()]  # SYNC: once per spec
        action_spec._rlx_nvec = nvec
    return nvec


class MultiCategorical(Distribution):
    """Independent categorical heads of different sizes for a ``MultiCategorical`` spec.

    Parameters are the concatenated logits of every head, ``[N, sum(nvec)]``; actions
    are ``[N, len(nvec)]``; an action mask is ``[N, sum(nvec)]``.
    """

    def __init__(
        self, params: Tensor, action_spec: TensorSpec, *, action_mask: Tensor | None = None
    ) -> None:
        super().__init__(params, action_spec, action_mask=action_mask)
        self._nvec = _nvec(action_spec)
        logits = self.params
        if action_mask is not None:
            mask = action_mask.reshape(params.shape[0], -1).bool()
            logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
            self._masks = list(torch.split(mask, self._nvec, dim=-1))
        else:
            self._masks = [None] * len(self._nvec)
        self.log_probs = [torch.log_softmax(x, -1) for x in torch.split(logits, self._nvec, -1)]

    @classmethod
    def param_layout(cls, action_spec: TensorSpec) -> tuple[int, int]:
        return sum(_nvec(action_spec)), 0

    def sample(self) -> Tensor:
        out = []
        for lp in self.log_probs:
            u = torch.rand_like(lp).clamp_(min=torch.finfo(torch.float32).tiny)
            out.append(torch.argmax(lp - torch.log(-torch.log(u)), -1))
        return self._as_spec(torch.stack(out, dim=-1))  # [N, k] -> [N, *spec.shape]

    def mode(self) -> Tensor:
        return self._as_spec(torch.stack([torch.argmax(lp, -1) for lp in self.log_probs], dim=-1))

    def log_prob(self, actions: Tensor) -> Tensor:
        actions = actions.reshape(actions.shape[0], -1).long()
        terms = [lp.gather(-1, actions[:, i : i + 1]) for i, lp in enumerate(self.log_probs)]
        return torch.stack(terms, 0).sum(0)

    def _sum_plogq(self, others: list[Tensor]) -> Tensor:
        total = torch.zeros(self.params.shape[0], 1, device=self.params.device)
        for lp, logq, mask in zip(self.log_probs, others, self._masks):
            terms = lp.exp() * logq
            if mask is not None:
                terms = torch.where(mask, terms, torch.zeros_like(terms))
            total = total + terms.sum(-1, keepdim=True)
        return total

    def entropy(self) -> Tensor:
        return -self._sum_plogq(self.log_probs)

    def kl(self, other: Distribution) -> Tensor:
        assert isinstance(other, MultiCategorical)
        return self._sum_plogq([p - q for p, q in zip(self.log_probs, other.log_probs)])

    def fisher_product(self, u: Tensor) -> Tensor:
        out = []
        for lp, u_head in zip(self.log_probs, torch.split(u, self._nvec, dim=-1)):
            p = lp.exp()
            out.append(p * (u_head - (p * u_head).sum(-1, keepdim=True)))
        return torch.cat(out, dim=-1)


class Normal(Distribution):
    """Diagonal Gaussian with a state-independent log-std, for continuous actions.

    Parameters are ``[N, 2A]``: the means, then the log-stds. For a ``Bounded`` spec the
    env receives the sample clipped to the bounds, while the buffer keeps the unclipped
    sample so that ``log_prob`` stays the Gaussian density of what was drawn.
    """

    def __init__(
        self, params: Tensor, action_spec: TensorSpec, *, action_mask: Tensor | None = None
    ) -> None:
        if action_mask is not None:
            raise ValueError("action masks apply to discrete actions only; got a continuous action spec")
        super().__init__(params, action_spec)
        self.mean, log_std = self.params.chunk(2, dim=-1)  # [N, A] each
        self.log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        self.std = self.log_std.exp()

    @classmethod
    def param_layout(cls, action_spec: TensorSpec) -> tuple[int, int]:
        a = math.prod(action_spec.shape)
        return a, a

    def _flat(self, actions: Tensor) -> Tensor:
        return actions.reshape(actions.shape[0], -1).to(self.params.dtype)

    def sample(self) -> Tensor:
        return self._as_spec(self.mean + self.std * torch.randn_like(self.mean))

    def mode(self) -> Tensor:
        return self._as_spec(self.mean)

    def log_prob(self, actions: Tensor) -> Tensor:
        z = (self._flat(actions) - self.mean) / self.std
        return (-0.5 * z.square() - self.log_std - 0.5 * _LOG_2PI).sum(-1, keepdim=True)

    def entropy(self) -> Tensor:
        return (self.log_std + 0.5 * (1.0 + _LOG_2PI)).sum(-1, keepdim=True)

    def kl(self, other: Distribution) -> Tensor:
        assert isinstance(other, Normal)
        var_ratio = (self.std / other.std).square()
        mean_term = ((self.mean - other.mean) / other.std).square()
        return 0.5 * (var_ratio + mean_term - 1.0 - var_ratio.log()).sum(-1, keepdim=True)

    def fisher_product(self, u: Tensor) -> Tensor:
        # Fisher of (mean, log_std): 1/σ² for the mean and 2 for the log-std, which
        # has no effect where the clamp holds it beyond a bound. On a bound itself
        # clamp's gradient passes (as autograd's Fisher does), so the bounds count inside.
        u_mean, u_log_std = u.chunk(2, dim=-1)
        raw_log_std = self.params.chunk(2, dim=-1)[1]
        inside = (raw_log_std >= LOG_STD_MIN) & (raw_log_std <= LOG_STD_MAX)
        return torch.cat([u_mean / self.std.square(), 2.0 * u_log_std * inside], dim=-1)

    def env_actions(self, actions: Tensor) -> Tensor:
        if isinstance(self.action_spec, Bounded):
            low, high = self.action_spec.space.low, self.action_spec.space.high
            return torch.clamp(actions, low, high)
        return actions


class SquashedNormal(Normal):
    """Diagonal Gaussian squashed by ``tanh`` into a ``Bounded`` spec's box.

    The buffer keeps the pre-squash Gaussian sample ``u``; the env receives
    ``low + (tanh(u) + 1) (high - low) / 2``, and ``log_prob`` includes the log-det of
    that map. ``entropy`` is the base Gaussian's (the squashed entropy has no closed
    form); it serves as the exploration bonus, as is usual for squashed policies.
    """

    def __init__(
        self, params: Tensor, action_spec: TensorSpec, *, action_mask: Tensor | None = None
    ) -> None:
        if not isinstance(action_spec, Bounded):
            raise ValueError(
                f"SquashedNormal needs a Bounded action spec, got {type(action_spec).__name__}"
            )
        super().__init__(params, action_spec, action_mask=action_mask)
        low, high = action_spec.space.low, action_spec.space.high
        self._half_range = ((high - low) / 2).reshape(-1).float()  # [A]
        self._low = low.reshape(-1).float()

    def log_prob(self, actions: Tensor) -> Tensor:
        u = self._flat(actions)
        # log|d tanh(u)/du| = log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable.
        log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u)) + self._half_range.log()
        return super().log_prob(actions) - log_det.sum(-1, keepdim=True)

    def env_actions(self, actions: Tensor) -> Tensor:
        u = self._flat(actions)
        a = self._low + (torch.tanh(u) + 1.0) * self._half_range
        return a.reshape(actions.shape).to(actions.dtype)


def default_distribution_cls(action_spec: TensorSpec) -> type[Distribution]:
    """The distribution rlx uses for an action spec unless ``distribution_cls`` is given.

    Raises:
        ValueError: for a spec with no default (say, a ``Composite`` action).
    """
    if isinstance(action_spec, MultiCategoricalSpec):
        return MultiCategorical
    if isinstance(action_spec, CategoricalSpec):
        return Categorical
    if action_spec.domain == "continuous" and action_spec.dtype.is_floating_point:
        return Normal
    raise ValueError(
        f"no default distribution for action spec {type(action_spec).__name__}; "
        "pass distribution_cls"
    )
