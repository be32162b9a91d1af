"""Statistics by name: 0-d tensors on the device, reduced across ranks and moved to the
host together.

``collect()`` and ``step()`` each build their statistics in a :class:`Stats`, one named
entry at a time, each with the operation that combines it across ranks. :meth:`Stats.to_host`
reduces every operation's entries in one all-reduce (none in a single process), stacks
everything into one vector and moves it to the host in ONE transfer, then hands the
numbers back by name. Nothing is read by position.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from rlx.core import distributed as rdist
from rlx.core._sync import allowed_sync

__all__ = ["Stats", "ReduceOp"]

#: How an entry combines across ranks. ``"std"`` is a standard deviation whose ranks
#: hold equally many samples: it is combined through the second moment about the mean
#: entry it names (:meth:`Stats.add_std_mean`).
ReduceOp = Literal["mean", "sum", "min", "max", "std"]


class Stats:
    """Named 0-d statistics on one device, fetched to the host in one transfer.

    Example:
        >>> stats = Stats()
        >>> stats.add("losses/vf", torch.tensor(0.5))
        >>> stats.add("episodes/count", torch.tensor(3.0), "sum")
        >>> stats.to_host()
        {'losses/vf': 0.5, 'episodes/count': 3.0}
    """

    def __init__(self) -> None:
        self._values: dict[str, Tensor] = {}
        self._ops: dict[str, ReduceOp] = {}
        self._std_of: dict[str, str] = {}  # std entry -> its mean entry

    def add(self, name: str, value: Tensor, op: ReduceOp = "mean") -> None:
        """Record ``value`` (a 0-d tensor, any float or bool dtype) under ``name``."""
        if op == "std":
            raise ValueError("Stats.add: record a standard deviation with add_std_mean")
        self._values[name] = value
        self._ops[name] = op

    def add_std_mean(self, std_name: str, mean_name: str, x: Tensor) -> None:
        """Record the population std and the mean of ``x`` (equal sample counts per rank)."""
        self.add_std(std_name, mean_name, *torch.std_mean(x, correction=0))

    def add_std(self, std_name: str, mean_name: str, std: Tensor, mean: Tensor) -> None:
        """Record a population std and its mean, computed already (equal sample counts per rank)."""
        self.add(mean_name, mean, "mean")
        self._values[std_name] = std
        self._ops[std_name] = "std"
        self._std_of[std_name] = mean_name

    def _reduced(self) -> dict[str, Tensor]:
        """Every entry combined across ranks: one all-reduce per operation in use."""
        values = {name: v.double() for name, v in self._values.items()}
        if rdist.world_size() == 1:
            return values
        # A std travels as its second moment E[x^2] = std^2 + mean^2, averaged like a mean.
        for name, mean_name in self._std_of.items():
            values[name] = values[name].square() + values[mean_name].square()
        groups: dict[str, list[str]] = {}
        for name, op in self._ops.items():
            groups.setdefault("mean" if op == "std" else op, []).append(name)
        for op, names in groups.items():
            reduced = rdist.all_reduce_(torch.stack([values[n] for n in names]), op)
            values.update(zip(names, reduced.unbind()))
        for name, mean_name in self._std_of.items():
            values[name] = (values[name] - values[mean_name].square()).clamp(min=0).sqrt()
        return values

    def to_host(self) -> dict[str, float]:
        """Reduce across ranks and move every entry to the host: ONE transfer."""
        if not self._values:
            return {}
        if rdist.world_size() > 1:
            values = self._reduced()
            names = list(values)
            flat = torch.stack([values[n] for n in names])
        else:  # a stack per dtype, then one cast each: a few ops, not one per entry
            by_dtype: dict[torch.dtype, list[str]] = {}
            for name, v in self._values.items():
                by_dtype.setdefault(v.dtype, []).append(name)
            names = [n for group in by_dtype.values() for n in group]
            flat = torch.cat([torch.stack([self._values[n] for n in group]).double() for group in by_dtype.values()])
        with allowed_sync():
            numbers = flat.tolist()  # SYNC: the one transfer
        return dict(zip(names, numbers))
