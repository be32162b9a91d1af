"""Running statistics for observation normalization and reward scaling.

Both classes are torch modules whose state lives in registered buffers, so they move
with ``.to(device)``, travel in ``state_dict()`` checkpoints, and update on the device
without reading a value back to the host.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor, nn

from rlx.core.layout import by_member, member_lead, member_rows

__all__ = ["RewardScaler", "RunningMeanStd", "merged_moments"]

# Division guard for a merge of two empty statistics: 0 / tiny = 0 keeps the old moments.
_TINY = torch.finfo(torch.float64).tiny


def merged_moments(mean: Tensor, var: Tensor, count: Tensor, other_mean: Tensor, other_var: Tensor,
                   other_count: Tensor | float) -> tuple[Tensor, Tensor, Tensor]:
    """``(mean, var, count)`` of two sets of samples from each one's mean, population
    variance and count (float64 tensors; ``other_count`` may be a number, and 0 changes
    nothing). Pure: new tensors, so a compiled program can compute it."""
    # With w the other side's share of the merged count, the merged moments are
    #   mean' = mean + w * delta
    #   var'  = (1 - w) * var + w * var_b + w * (1 - w) * delta^2,
    # the pooled M2 divided by the merged count, without ever forming M2 (which
    # grows with the count and loses precision).
    total = count + other_count
    weight = other_count / total.clamp_min(_TINY)
    delta = other_mean - mean
    return (torch.lerp(mean, other_mean, weight),
            torch.lerp(var, other_var + (1.0 - weight) * delta.square(), weight),
            total)


class RunningMeanStd(nn.Module):
    """Mean and population variance of every sample seen so far, per feature.

    Batches are merged with the parallel algorithm of Chan, Golub and LeVeque, "Updating
    Formulae and a Pairwise Algorithm for Computing Sample Variances" (1979), so the
    statistics equal those of the concatenation of all batches, whatever their sizes.
    The moments are kept in float64: after millions of samples a float32 count and mean
    would stop moving.

    Buffers:
        mean: ``[*shape]`` float64 running mean (0 initially).
        var: ``[*shape]`` float64 running population variance (1 initially, so
            normalizing before any update leaves inputs unchanged up to ``epsilon``).
        count: ``[1]`` float64 number of samples merged (0 initially); ``[1]``, not
            0-d, since torch 2.13's dynamo takes a read-only 0-d float64 CPU tensor as a
            Python number and restarts its analysis of a compiled program that reads it
            (see :class:`RewardScaler`). A checkpoint with a 0-d count loads.

    Args:
        shape: Shape of one sample; ``()`` for scalars.
        epsilon: Added to the variance before the square root in :meth:`normalize`.
        clip: If set, normalized values are clamped to ``[-clip, clip]``.
        device: Where the buffers live.
        sync_ranks: Under torch.distributed, merge every rank's batch in :meth:`update`
            (a collective: every rank must call it), so all ranks keep the same
            statistics. The policy's observation normalizers and the reward scaler set
            it; off, each instance keeps its own process's samples.
    """

    mean: Tensor
    var: Tensor
    count: Tensor

    def __init__(
        self,
        shape: Sequence[int] = (),
        *,
        epsilon: float = 1e-8,
        clip: float | None = None,
        device: torch.device | str | None = None,
        sync_ranks: bool = False,
    ) -> None:
        super().__init__()
        self.sync_ranks = bool(sync_ranks)
        if epsilon < 0:
            raise ValueError(f"epsilon must be >= 0, got {epsilon}")
        if clip is not None and not clip > 0:
            raise ValueError(f"clip must be > 0 or None, got {clip}")
        self.shape = tuple(int(n) for n in shape)
        self.epsilon = float(epsilon)
        self.clip = None if clip is None else float(clip)
        kwargs = {"dtype": torch.float64, "device": device}
        self.register_buffer("mean", torch.zeros(self.shape, **kwargs))
        self.register_buffer("var", torch.ones(self.shape, **kwargs))
        self.register_buffer("count", torch.zeros(1, **kwargs))
        self.register_load_state_dict_pre_hook(_one_element_from_0d)

    def extra_repr(self) -> str:
        return f"shape={self.shape}, epsilon={self.epsilon}, clip={self.clip}"

    @property
    def merges_across_ranks(self) -> bool:
        """Whether :meth:`update` is a collective: ``sync_ranks`` under torch.distributed."""
        return self.sync_ranks and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Merge a batch of samples into the running statistics.

        Args:
            x: ``[N, *shape]`` samples; more leading dims (``[B, T, *shape]``) are
                flattened into the batch. An empty batch changes nothing.

        Raises:
            ValueError: The trailing dims of ``x`` are not ``shape``.
        """
        k = len(self.shape)
        if x.ndim <= k or tuple(x.shape[x.ndim - k :]) != self.shape:
            raise ValueError(
                f"x has shape {tuple(x.shape)}; expected [N, *{self.shape}] (one or more "
                "batch dims followed by the sample shape)"
            )
        x = x.reshape(-1, *self.shape)  # [*batch, *shape] -> [N, *shape]
        n = x.shape[0]
        if n == 0:  # host-side shape, not data: no sync
            return
        if self.merges_across_ranks:
            # Data-parallel training: merge every rank's batch, so all ranks keep the
            # same statistics. One all-reduce of [count, Σx, Σx²] in float64.
            x64 = x.to(torch.float64)
            moments = torch.cat([torch.full((1,), float(n), dtype=torch.float64, device=x.device),
                                 x64.sum(0).reshape(-1), x64.square().sum(0).reshape(-1)])
            dist.all_reduce(moments)
            total = moments[0]
            size = x64[0].numel()
            batch_mean = (moments[1 : 1 + size] / total).reshape(self.shape)
            batch_var = (moments[1 + size :] / total).reshape(self.shape) - batch_mean.square()
            self.merge_(batch_mean, batch_var.clamp(min=0.0), total)
            return
        self.assign_(self.updated(x))

    def updated(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The ``(mean, var, count)`` that merging this process's ``[N, *shape]`` samples
        ``x`` would leave, as new tensors; the buffers stay as they are. What :meth:`update`
        assigns on a single process, and what a compiled program computes in place of
        updating the buffers in place (collect's tail: :meth:`assign_` sets them after
        it; while ``count`` was 0-d, torch 2.13's CPU programs took it as a number and
        lost an in-place update of it)."""
        batch_var, batch_mean = torch.var_mean(x.to(torch.float64), dim=0, correction=0)
        return merged_moments(self.mean, self.var, self.count.reshape(()), batch_mean, batch_var, x.shape[0])

    @torch.no_grad()
    def assign_(self, moments: Sequence[Tensor]) -> None:
        """Set ``(mean, var, count)`` to :meth:`updated`'s moments: one op."""
        torch._foreach_copy_([self.mean, self.var, self.count], list(moments))

    @torch.no_grad()
    def merge_(self, mean: Tensor, var: Tensor, count: Tensor | float) -> None:
        """Merge externally computed moments, e.g. another rank's statistics.

        Args:
            mean: ``[*shape]`` mean of the other samples.
            var: ``[*shape]`` population variance of the other samples.
            count: one-element tensor or number: how many samples those moments describe.
                Zero is allowed and changes nothing.
        """
        for name, moment in (("mean", mean), ("var", var)):
            if tuple(moment.shape) != self.shape:
                raise ValueError(
                    f"{name} has shape {tuple(moment.shape)}; expected {self.shape}"
                )
        like = {"dtype": torch.float64, "device": self.mean.device}
        mean = mean.to(**like)
        var = var.to(**like)
        if isinstance(count, Tensor):
            count = count.to(**like).reshape(())
        self.assign_(merged_moments(self.mean, self.var, self.count.reshape(()), mean, var, count))

    def normalize(self, x: Tensor) -> Tensor:
        """``(x - mean) / sqrt(var + epsilon)``, clamped to ``[-clip, clip]`` if set.

        Args:
            x: ``[..., *shape]`` values.

        Returns:
            Normalized values shaped like ``x``, in ``x``'s dtype (float32 for a
            non-floating ``x``). The arithmetic runs in at least float32; the float64
            statistics are cast down once rather than casting ``x`` up.
        """
        dtype = torch.promote_types(x.dtype, torch.float32)
        inv_std = torch.rsqrt(self.var + self.epsilon).to(dtype)
        y = (x.to(dtype) - self.mean.to(dtype)) * inv_std
        if self.clip is not None:
            y = y.clamp(-self.clip, self.clip)
        return y.to(x.dtype) if x.is_floating_point() else y

    def denormalize(self, x: Tensor) -> Tensor:
        """``x * sqrt(var + epsilon) + mean``: the inverse of an unclipped normalize.

        Args:
            x: ``[..., *shape]`` normalized values.

        Returns:
            Values in the original units, shaped like ``x`` and in ``x``'s dtype
            (float32 for a non-floating ``x``).
        """
        dtype = torch.promote_types(x.dtype, torch.float32)
        std = torch.sqrt(self.var + self.epsilon).to(dtype)
        y = torch.addcmul(self.mean.to(dtype), x.to(dtype), std)
        return y.to(x.dtype) if x.is_floating_point() else y


class RewardScaler(nn.Module):
    """Scales rewards by the running std of the discounted return, which restarts at episode ends.

    Each env keeps a running discounted return ``ret = gamma * ret + r_t``; after a step
    that ends the episode, it restarts from zero, so returns never sum rewards of two
    episodes. Every recorded return feeds a :class:`RunningMeanStd`, and rewards are
    divided (not centred) by its std, which keeps the value targets at a steady scale
    without changing which policy is optimal. The running returns persist across
    :meth:`update` calls: an episode usually spans several rollouts.

    Buffers:
        returns: ``[num_envs]`` float32 running discounted return of each env.

    Submodules:
        stats: ``RunningMeanStd((S,))`` over the recorded discounted returns, ``S =
            num_seeds`` (``(1,)`` for one run): never 0-d, since torch 2.13's dynamo takes
            a read-only 0-d float64 CPU tensor as a Python number and restarts its analysis
            of every compiled program that reads the scale (a second trace and AOTAutograd
            pass, measured in docs/performance.md) and reads it back with an eager
            ``item()`` at each call. A checkpoint of the 0-d layout loads.

    Args:
        num_envs: B, the number of batched envs.
        gamma: Discount factor in ``[0, 1]``.
        epsilon: Added to the variance before the square root in :meth:`scale`.
        device: Where the buffers live.
        num_seeds: ``S`` independent scalers over equal blocks of envs (seeds, rows
            ``i*B/S:(i+1)*B/S``): ``stats`` is then ``[S]`` and each block's rewards are
            divided by its own scale.
    """

    returns: Tensor

    def __init__(
        self,
        num_envs: int,
        gamma: float,
        *,
        epsilon: float = 1e-8,
        device: torch.device | str | None = None,
        num_seeds: int = 1,
    ) -> None:
        super().__init__()
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if num_seeds < 1 or num_envs % num_seeds:
            raise ValueError(f"num_seeds must be >= 1 and divide num_envs={num_envs}, got {num_seeds}")
        self.num_seeds = int(num_seeds)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if epsilon < 0:
            raise ValueError(f"epsilon must be >= 0, got {epsilon}")
        self.num_envs = int(num_envs)
        self.gamma = float(gamma)
        #: ``[B]`` each env's gamma (members that differ in it), else ``None``: :meth:`set_gamma`.
        self.gamma_rows: Tensor | None = None
        self.epsilon = float(epsilon)
        self.stats = RunningMeanStd((self.num_seeds,), epsilon=epsilon, device=device, sync_ranks=True)
        self.register_buffer("returns", torch.zeros(num_envs, dtype=torch.float32, device=device))
        # Per-rollout scratch, [B, T] each, allocated on the first update and reused while
        # the horizon stays the same. Not persistent: nothing in them outlives a call.
        self.register_buffer("_history", None, persistent=False)
        self.register_buffer("_decay", None, persistent=False)

    def extra_repr(self) -> str:
        return f"num_envs={self.num_envs}, gamma={self.gamma}, epsilon={self.epsilon}"

    def set_gamma(self, gamma_rows: Tensor) -> None:
        """Give each env its own gamma (``[num_envs]``, kept by reference: a change in
        place is seen by the next update), as members that differ in gamma need."""
        if gamma_rows.numel() != self.num_envs:
            raise ValueError(f"gamma_rows has {gamma_rows.numel()} values; expected one per env, {self.num_envs}")
        self.gamma_rows = gamma_rows

    @torch.no_grad()
    def update(self, rewards: Tensor, dones: Tensor) -> None:
        """Advance the running returns through a rollout and merge them into ``stats``.

        For each step ``t``: ``ret = gamma * ret + rewards_t``; record ``ret``; then
        ``ret = 0`` where ``dones_t``.

        Args:
            rewards: ``[B, T, 1]`` floating rewards (a non-contiguous view is fine).
            dones: ``[B, T, 1]`` bool, terminated or truncated.

        Raises:
            ValueError: A shape does not match ``[num_envs, T, 1]``.
            TypeError: ``dones`` is not bool.
        """
        if rewards.ndim != 3 or rewards.shape[0] != self.num_envs or rewards.shape[2] != 1:
            raise ValueError(
                f"rewards has shape {tuple(rewards.shape)}; expected [{self.num_envs}, T, 1]"
            )
        if dones.shape != rewards.shape:
            raise ValueError(
                f"dones has shape {tuple(dones.shape)}; expected {tuple(rewards.shape)} "
                "(the shape of rewards)"
            )
        if dones.dtype != torch.bool:
            raise TypeError(f"dones must be a bool tensor, got dtype {dones.dtype}")
        horizon = rewards.shape[1]
        if horizon == 0:
            return
        history, decay = self.scratch(horizon)
        self.advance(rewards[..., 0], dones[..., 0], history, decay, self.returns, self.gamma, self.gamma_rows)
        self.record(history)

    @torch.no_grad()
    def record(self, history: Tensor) -> None:
        """Merge a rollout's ``[B, T]`` running returns (:meth:`advance`'s ``history``) into ``stats``."""
        self.stats.update(self._returns_by_member(history))

    def recorded(self, history: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The statistics' ``(mean, var, count)`` after :meth:`record` on this process
        alone, as new tensors (:meth:`RunningMeanStd.updated`; collect's tail program
        computes them, and ``stats.assign_`` sets them)."""
        return self.stats.updated(self._returns_by_member(history))

    def _returns_by_member(self, history: Tensor) -> Tensor:
        # [B, T] -> [B/S * T, S]: each member's returns are its column
        return by_member(history.reshape(-1), self.num_seeds, 0).reshape(-1, self.num_seeds)

    @staticmethod
    def advance(rewards: Tensor, dones: Tensor, history: Tensor, decay: Tensor, returns: Tensor, gamma: float,
                gamma_rows: Tensor | None) -> None:
        """The running returns through a rollout, in place: ``history`` ``[B, T]`` gets
        every step's return and ``returns`` ``[B]`` the one carried into the next rollout
        (``decay`` ``[B, T]`` is scratch). :meth:`update`'s recursion, on plain tensors
        (part of collect's tail program with ``compile``: :meth:`rlx.collect.rollout.Rollout.tail`)."""
        # Unrolled, the rule is h_t = r_t + decay_{t-1} * h_{t-1} with
        # decay_t = gamma * (1 - done_t) and h_{-1} the carried return: one multiply-add
        # per step, each column a tensor of its own, stacked into the history once (as
        # GAE's recursion, rlx.core.gae: column by column in place, a compiled program
        # re-derives the whole history at every step).
        rewards = rewards.to(history.dtype)
        if gamma_rows is None:
            decay.fill_(gamma).masked_fill_(dones, 0.0)
            column = torch.add(rewards[:, 0], returns, alpha=gamma)
        else:
            g = gamma_rows.reshape(-1, 1).to(decay.dtype)
            decay.copy_(g.expand_as(decay)).masked_fill_(dones, 0.0)
            column = torch.addcmul(rewards[:, 0], returns, g[:, 0])
        columns = [column]
        for t in range(1, history.shape[1]):
            column = torch.addcmul(rewards[:, t], decay[:, t - 1], column)
            columns.append(column)
        history.copy_(torch.stack(columns, dim=1))
        # The return carried into the next rollout restarts if the last step ended.
        returns.copy_(history[:, -1]).masked_fill_(dones[:, -1], 0.0)

    @torch.no_grad()
    def reset(self) -> None:
        """Restart every env's running return (call when all envs are reset)."""
        self.returns.zero_()

    def scale(self) -> Tensor:
        """The float32 ``sqrt(stats.var + epsilon)``, ``[S]`` (0-d for one run); 1 before any update.

        While the recorded returns have no spread (variance at most ``epsilon``: every
        return so far was the same, as in a first rollout of T=1 with a constant reward,
        or with ``gamma=0`` and a constant reward), the scale is 1: dividing by
        ``sqrt(epsilon)`` would multiply the rewards by 10^4.
        """
        var = self.stats.var
        scale = torch.where(var > self.epsilon, torch.sqrt(var + self.epsilon), 1.0).to(torch.float32)
        return scale.reshape(member_lead(self.num_seeds))

    def scale_rewards(self, rewards: Tensor, out: Tensor | None = None) -> Tensor:
        """Rewards divided by :meth:`scale`.

        Args:
            rewards: ``[...]`` floating rewards.
            out: Optional preallocated output shaped like ``rewards``; may be
                ``rewards`` itself to scale in place.

        Returns:
            The scaled rewards (``out`` when given), in ``rewards``' dtype.
        """
        # A 0-d divisor does not promote the result, so bf16 rewards stay bf16.
        return torch.div(rewards, member_rows(self.scale(), self.num_seeds, rewards), out=out)

    def scratch(self, horizon: int) -> tuple[Tensor, Tensor]:
        """The ``[B, T]`` float32 history and decay tensors, allocated once per horizon."""
        if self._history is None or self._history.shape[1] != horizon:
            shape = (self.num_envs, horizon)
            self._history = torch.empty(shape, dtype=torch.float32, device=self.returns.device)
            self._decay = torch.empty(shape, dtype=torch.float32, device=self.returns.device)
        return self._history, self._decay


def _one_element_from_0d(module: nn.Module, state_dict: dict, prefix: str, *_: object) -> None:
    """A :class:`RunningMeanStd`'s load pre-hook: a checkpoint written while its ``count``
    (and a one-run reward scaler's ``mean`` and ``var``) were 0-d loads into their ``[1]``
    layout."""
    for name in ("mean", "var", "count"):
        value = state_dict.get(prefix + name)
        if isinstance(value, Tensor) and value.dim() == 0 and getattr(module, name).shape == (1,):
            state_dict[prefix + name] = value.reshape(1)
