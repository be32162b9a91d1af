"""PPO's epochs over a rollout: each epoch's order and gather, its minibatches, and the
minibatch updates that run over them (:class:`Epochs`, a part of :class:`~rlx.algorithms.ppo.PPO`).

The statistics stay on the device: each minibatch update adds its loss terms and KL
into the algorithm's accumulators (``_sums``, ``_kl_max``, zeroed by the step's first
program), and one function turns them into the step's statistics; the only host sync is
one per epoch when the KL early stop is on.

With ``compile`` on a CPU the loop over every epoch's minibatches is one program where
nothing is decided between them (:meth:`Epochs.scan_updates`): the same minibatch update,
captured once and run by ``scan`` (:mod:`rlx.core.scanned`), and with it the batch, the
epochs' orders and the statistics, so that all of a step's device work is one program
(:meth:`Epochs.scanned_phase`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from rlx.core import distributed as rdist
from rlx.core._sync import allowed_sync
from rlx.core.scanned import ScannedCalls, ScanRefused
from rlx.core.stats import Stats
from rlx.members.optim import adam_state

if TYPE_CHECKING:
    from rlx.algorithms.minibatches import Batch
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
        kl_index = self._kl_index
        if control is not None:
            control.begin()
        epochs_run = 0
        # Every epoch's order, drawn first: the same random numbers whether the early stop
        # ends the loop (sync_kl_stop) or holds the later epochs' steps.
        orders = [self._epoch_order(N, num_minibatches) for _ in range(cfg.num_sgd_iters)]
        # A member's statistics cover the epochs a run of its own would have run: those
        # it was still open at the start of (the KL early stop ends them member by member).
        member_epochs = torch.zeros(members.lead, device=self.device) if control is not None else None
        # The epochs the loop runs (on the device): the first, then each begun before the stop.
        sgd_epochs = torch.ones((), device=self.device) if control is not None else None
        for e, order in enumerate(orders):
            if control is not None:
                member_epochs += control.start_epoch()
            epoch = self._epoch(batch, order)
            kl_so_far = torch.zeros((), device=self.device) if cfg.accumulate_grads else None
            for k, mb in enumerate(self._minibatch_views(epoch, bounds)):
                if not cfg.accumulate_grads:
                    self.update(mb)
                else:
                    # Each minibatch mean is weighted by its share of the buffer, so the
                    # summed gradient is exactly the full-batch one.
                    weight = bounds[k][1] / N
                    losses = self.update(mb, weight=weight, step=k == num_minibatches - 1, kl_so_far=kl_so_far,
                                         accumulated=k > 0)
                    kl_so_far = kl_so_far + weight * losses[kl_index]
            epochs_run += 1
            if control is not None and e + 1 < len(orders):
                stopped = control.stopped(members.active())
                sgd_epochs += ~stopped  # the next epoch runs unless the stop triggered
                if self.sync_kl_stop:
                    with allowed_sync():
                        if stopped.item():  # SYNC: one per epoch (sync_kl_stop)
                            break
        epochs = member_epochs.clamp(min=1) if member_epochs is not None else epochs_run
        return self.finish_statistics(batch, epochs * num_minibatches, sgd_epochs), epochs_run

    def scan_updates(self) -> tuple[ScannedCalls | None, str | None]:
        """What runs every minibatch update of a step as one program with ``compile`` on a
        CPU (:class:`~rlx.core.scanned.ScannedCalls` over :meth:`minibatch_update`), or
        ``None`` and why not (``None`` too without a whole compiled update)."""
        if not self.compiles or self.compile_fallback is not None:
            return None, None
        cfg, sizes = self.config, {size for _, size in self.minibatch_bounds()}
        why = ("a CUDA device (the step's CUDA graph holds the epochs)" if self.device.type != "cpu" else
               "observations that are not one tensor" if not self.phase_programs else
               "torch.distributed (the update's all-reduces)" if rdist.is_distributed() else
               "the KL early stop (a decision after each epoch)" if self.kl_stop is not None else
               "accumulate_grads (a step every few minibatches)" if cfg.accumulate_grads else
               "RND (a second optimizer)" if self.rnd is not None else
               # The LR carried from one minibatch to the next: inductor's C++ wrapper of
               # that scan crashed (segmentation fault, torch 2.13.0, 2026-11-28).
               "kl_adaptive_lr_per_minibatch" if cfg.kl_adaptive_lr_per_minibatch else
               "minibatches of unequal sizes" if len(sizes) > 1 else
               # Where a minibatch takes several passes its update is long enough that a
               # call's own cost is lost in it, and scanned it ran slower (vs_jax's
               # B = 4096: 0.95-1.15 s an iteration against 0.78-0.82 s, 2026-11-28).
               "minibatches of several micro-batches" if max(sizes) // self.num_seeds > self._micro_units else None)
        if why is not None:
            return None, why
        self._policy_modules = list(self.policy.modules())  # what update_tensors reads
        return ScannedCalls(self.minibatch_update, self.update_tensors, device=self.device, before=self._scan_rows,
                            after=self._scan_statistics), None

    def scanned_phase(self) -> tuple[Stats, int] | None:
        """All of step()'s device work as one program where :attr:`scanned_updates` runs
        the updates: the batch (:meth:`prepared_batch`), every epoch's order, every
        minibatch update and the statistics (:meth:`step_statistics`), with no Python
        between them. Returns the statistics and the epochs run, or ``None`` where the
        update cannot be scanned (then :attr:`scan_fallback` says why and the loop runs:
        the RNG state is as before the call)."""
        cfg = self.config
        layout = (cfg.num_sgd_iters, tuple(self.minibatch_bounds()), cfg.shuffle_minibatches)
        try:
            return self.scanned_updates.whole(layout), cfg.num_sgd_iters
        except ScanRefused as e:
            self.scanned_updates, self.scan_fallback = None, str(e)
            return None

    def _scan_rows(self) -> tuple[Batch, Tensor]:
        """The batch and every minibatch's rows (``[epochs x minibatches, rows]``): what the
        scanned updates run over. The minibatches are the equal, consecutive slices of
        each epoch's order, drawn as :meth:`run_epochs` draws them."""
        batch = self.prepared_batch()
        bounds = self.minibatch_bounds()
        num_minibatches, N = len(bounds), sum(size for _, size in bounds)
        orders = [self._epoch_order(N, num_minibatches) for _ in range(self.config.num_sgd_iters)]
        if any(order is None for order in orders):  # the batch's own order (one minibatch, or no shuffle)
            whole = torch.arange(N, device=self.device)
            orders = [whole if order is None else order for order in orders]
        return batch, torch.stack(orders).reshape(len(orders) * num_minibatches, -1)

    def _scan_statistics(self, batch: Batch) -> Stats:
        """The statistics of a scanned step: every minibatch of every epoch ran."""
        return self.step_statistics(batch, self.config.num_sgd_iters * len(self.minibatch_bounds()), None)

    def update_tensors(self) -> list[Tensor]:
        """Every tensor a minibatch update may read or write besides its minibatch: the
        model's parameters and buffers, the optimizer's state and tensor LR, and the
        tensors the algorithm, its members and hyperparameters hold. Called at each scanned
        step: the policy's modules are listed at build (the tree is fixed then), their
        tensors read from them each time, without walking the tree again."""
        found = [x for m in self._policy_modules for x in (*m._parameters.values(), *m._buffers.values())
                 if x is not None]
        found += [x for column in adam_state(self.optimizer, self._update_params) for x in column]
        found += [g["lr"] for g in self.optimizer.param_groups if isinstance(g["lr"], Tensor)]
        for owner in (self, self.members, self.hparams):
            found += [x for x in vars(owner).values() if isinstance(x, Tensor)]
        found += list(self.hparams.tensors.values())
        return found

    def step_statistics(self, batch: Batch, minibatches_run: Tensor | int, sgd_epochs: Tensor | None) -> Stats:
        """``step()``'s statistics, stacked for the one transfer: the epochs the loop ran
        (``sgd_epochs``, with the KL early stop), the means of what the minibatch updates
        accumulated (``_sums``, over ``minibatches_run``, each member's with the KL early
        stop) and what :meth:`_step_stats` measures after the update. One function, which
        eager runs and ``compile`` runs as one program (``finish_statistics``); it changes
        none of its arguments, so that program's later calls can be checked against them."""
        stats = Stats()
        if sgd_epochs is not None:
            stats.add("monitors/sgd_epochs", sgd_epochs, "max")
        means = self.loss_fields(*(self._sums / minibatches_run).unbind())
        self._step_stats(stats, means, batch, self._kl_max)
        stats.pack()
        return stats

    def _epoch_order(self, N: int, num_minibatches: int) -> Tensor | None:
        """An epoch's order of the batch's ``N`` units, drawn on the device; ``None`` where
        the batch's own order serves (one whole-batch minibatch takes the same mean in any
        order, or no shuffling)."""
        if num_minibatches == 1:
            return None
        return self.members.epoch_order(N // self.num_seeds, self.config.minibatch_size // self.minibatches.unit_samples,
                                        shuffle=self.config.shuffle_minibatches)

    def _epoch(self, batch: Batch, index: Tensor | None) -> Batch:
        """The batch in the order ``index``: one gather per epoch into contiguous memory,
        whose minibatches are views."""
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
