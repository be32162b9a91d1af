"""PPO's epochs over a rollout: each epoch's order and gather, its minibatches, and the
minibatch updates that run over them (:class:`Epochs`, a part of :class:`~rlx.algorithms.ppo.PPO`).

The statistics stay on the device: each minibatch update adds its loss terms and KL
into the algorithm's accumulators (``_sums``, ``_kl_max``); the only host sync is one
per epoch when the KL early stop is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from rlx.core._sync import allowed_sync

if TYPE_CHECKING:
    from rlx.algorithms.minibatches import Batch
    from rlx.core.stats import Stats
    from rlx.policy import Obs

__all__ = ["Epochs"]


def _gather(x: Obs, index: Tensor, out: Tensor | None) -> Obs:
    if isinstance(x, Tensor):
        return torch.index_select(x, 0, index, out=out)
    return x[index]


class Epochs:
    """The epoch loop of :class:`~rlx.algorithms.ppo.PPO` (its methods, on its state)."""

    def minibatch_bounds(self) -> list[tuple[int, int]]:
        """``(first unit, units)`` of each minibatch of an epoch: ``minibatch_size`` samples
        of every member each (the last minibatch gets the rest)."""
        units = self.minibatches.num_units(self.config.num_envs, self.horizon)  # per member
        return self.members.minibatch_bounds(units, self.config.minibatch_size // self.minibatches.unit_samples)

    def run_epochs(self, batch: Batch) -> tuple[Stats, int]:
        """The epochs of minibatch updates over ``batch`` (from :attr:`minibatches`): their
        statistics (on the device) and the number of epochs run."""
        cfg, control, members = self.config, self.kl_stop, self.members
        bounds = self.minibatch_bounds()
        num_minibatches, N = len(bounds), sum(size for _, size in bounds)
        # The statistics the update accumulates on the device, in place (loss_fields' order).
        sums, kl_max = self._sums.zero_(), self._kl_max.zero_()
        kl_index = self._kl_index
        if control is not None:
            control.begin()
        epochs_run = 0
        # A member's statistics cover the epochs a run of its own would have run: those
        # it was still open at the start of (the KL early stop ends them member by member).
        member_epochs = torch.zeros(members.lead, device=self.device) if control is not None else None
        for _ in range(cfg.num_sgd_iters):
            if control is not None:
                member_epochs += control.start_epoch()
            epoch = self._epoch(batch, N, num_minibatches)
            kl_so_far = torch.zeros((), device=self.device) if cfg.accumulate_grads else None
            for k, mb in enumerate(self._minibatch_views(epoch, bounds)):
                if not cfg.accumulate_grads:
                    self.update(mb)
                else:
                    # Each minibatch mean is weighted by its share of the buffer, so the
                    # summed gradient is exactly the full-batch one.
                    weight = bounds[k][1] / N
                    losses = self.update(mb, weight=weight, step=k == num_minibatches - 1, kl_so_far=kl_so_far)
                    kl_so_far = kl_so_far + weight * losses[kl_index]
                if self.rnd is not None and (not cfg.accumulate_grads or k == num_minibatches - 1):
                    self._rnd_steps += 1  # the predictor stepped with this minibatch
            epochs_run += 1
            if control is not None:
                with allowed_sync():
                    if control.stopped(members.active()).item():  # SYNC: one per epoch, the KL early stop
                        break
        epochs = member_epochs.clamp(min=1) if member_epochs is not None else epochs_run
        means = self.loss_fields(*(sums / (epochs * num_minibatches)).unbind())
        return self._step_stats(means, batch, kl_max), epochs_run

    def _epoch(self, batch: Batch, N: int, num_minibatches: int) -> Batch:
        """The batch in this epoch's order: one gather per epoch into contiguous memory,
        whose minibatches are views."""
        index = None
        if num_minibatches > 1:  # one whole-batch minibatch takes the same mean in any order
            units = N // self.num_seeds
            index = self.members.epoch_order(units, self.config.minibatch_size // self.minibatches.unit_samples,
                                             shuffle=self.config.shuffle_minibatches)
        if index is None:
            return batch
        if not self._epoch_batch:  # the epoch's buffers, made once: its minibatches are views of them
            self._epoch_batch = {k: torch.empty((index.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
                                 for k, x in batch.items() if isinstance(x, Tensor)}
        return self.gather(batch, index)

    def gathered(self, batch: Batch, index: Tensor) -> Batch:
        """``batch`` in the order ``index``, tensors written into the epoch's buffers (one
        compiled program with ``compile``)."""
        return {key: _gather(x, index, self._epoch_batch.get(key)) for key, x in batch.items()}

    def _minibatch_views(self, epoch: Batch, bounds: list[tuple[int, int]]) -> list[Batch]:
        """The minibatches of ``epoch``, as views: made once for the epoch's own buffers
        (no op per minibatch), else sliced."""
        if len(bounds) == 1 and bounds[0] == (0, next(iter(epoch.values())).shape[0]):
            return [epoch]
        own = all(epoch.get(k) is v for k, v in self._epoch_batch.items()) and len(epoch) == len(self._epoch_batch)
        key = tuple(bounds)
        if own and self._views is not None and self._views[0] == key:
            return self._views[1]
        views = [{k: x[lo : lo + size] for k, x in epoch.items()} for lo, size in bounds]
        if own:
            self._views = (key, views)
        return views
