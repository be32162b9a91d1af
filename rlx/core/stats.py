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


def _stacked(values: dict[str, Tensor]) -> tuple[list[str], Tensor]:
    """The entries as one float64 vector and its names: a stack per dtype, each cast
    once, so that a few ops make it whatever the number of entries (S members' statistics:
    hundreds; an op per entry is a kernel per entry on CUDA, eagerly or in a graph)."""
    by_dtype: dict[torch.dtype, list[str]] = {}
    for name, v in values.items():
        by_dtype.setdefault(v.dtype, []).append(name)
    names = [n for group in by_dtype.values() for n in group]
    parts = [torch.stack([values[n] for n in group]).double() for group in by_dtype.values()]
    return names, parts[0] if len(parts) == 1 else torch.cat(parts)


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
        self._packed: tuple[list[str], Tensor] | None = None  # pack(): names, float64 vector

    def pack(self) -> None:
        """Stack the entries so far into one float64 vector now, for :meth:`to_host` to
        move as it is. Called at the end of a compiled program that builds the
        statistics, the stacking is part of that program rather than a few eager ops
        after it; entries added later are stacked by :meth:`to_host`."""
        if self._values:
            self._packed = _stacked(self._values)

    def copy(self) -> Stats:
        """A new :class:`Stats` with the same entries (the same tensors): what a caller
        adds to it leaves this one as it was (a captured graph's statistics are returned
        again by every replay)."""
        out = Stats()
        out._values, out._ops, out._std_of = dict(self._values), dict(self._ops), dict(self._std_of)
        out._packed = self._packed
        return out

    def add(self, name: str, value: Tensor, op: ReduceOp = "mean") -> None:
        """Record ``value`` (a 0-d tensor, any float or bool dtype) under ``name``."""
        if op == "std":
            raise ValueError("Stats.add: record a standard deviation with add_std_mean")
        self._put(name, value, op)

    def _put(self, name: str, value: Tensor, op: ReduceOp) -> None:
        if self._packed is not None and name in self._packed[0]:
            self._packed = None  # replaced: the packed vector no longer holds it
        self._values[name] = value
        self._ops[name] = op

    def add_std_mean(self, std_name: str, mean_name: str, x: Tensor) -> None:
        """Record the population std and the mean of ``x`` (equal sample counts per rank)."""
        self.add_std(std_name, mean_name, *torch.std_mean(x, correction=0))

    def add_std(self, std_name: str, mean_name: str, std: Tensor, mean: Tensor) -> None:
        """Record a population std and its mean, computed already (equal sample counts per rank)."""
        self.add(mean_name, mean, "mean")
        self._put(std_name, std, "std")
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
        """Reduce across ranks and move every entry to the host: ONE transfer. The
        entries come back in the order they were first added."""
        if not self._values:
            return {}
        if rdist.world_size() > 1:
            values = self._reduced()
            names = list(values)
            flat = torch.stack([values[n] for n in names])
        else:  # what pack() stacked, then a stack per dtype of the rest: a few ops, not one per entry
            names, parts = [], []
            if self._packed is not None:
                names, packed = list(self._packed[0]), self._packed[1]
                parts.append(packed)
            done = set(names)
            rest = {name: v for name, v in self._values.items() if name not in done}
            if rest:
                rest_names, rest_flat = _stacked(rest)
                names += rest_names
                parts.append(rest_flat)
            flat = parts[0] if len(parts) == 1 else torch.cat(parts)
        with allowed_sync():
            numbers = flat.tolist()  # SYNC: the one transfer
        by_name = dict(zip(names, numbers))
        return {name: by_name[name] for name in self._values}  # in the order added
