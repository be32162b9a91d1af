"""One rule for capturing a piece of work in a CUDA graph and replaying it.

Both captures in rlx (collect's T loop and PPO's minibatch update) go through
:class:`GraphedCall`: the first :data:`GRAPH_WARMUPS` calls run the work eagerly on a
side stream (lazy CUDA init, the caching allocator, cuBLAS workspaces and optimizer
state all settle, as capture requires), the next call captures it, and every later call
replays it. A replay launches all the captured kernels at once, with no Python and no
per-kernel launch cost; it reads and writes the same tensors the capture did, so inputs
are copied into static tensors before a replay and outputs read from static tensors
after it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

import torch
from torch import Tensor

from rlx.core._sync import allowed_sync

__all__ = ["GRAPH_WARMUPS", "GraphedCall", "GraphedBatchCall"]

#: Eager calls before the capture: the third warm-up is the first one that finds the
#: allocator and fused optimizer state exactly as every later call will.
GRAPH_WARMUPS = 3

Out = TypeVar("Out")


class GraphedCall(Generic[Out]):
    """``fn()`` through a CUDA graph: :data:`GRAPH_WARMUPS` eager calls, one capture, replays.

    Args:
        fn: The work, with no arguments: it reads and writes tensors at fixed addresses.
        device: The CUDA device.
        before_capture: Called once just before the capture (e.g. to drop gradients so
            the captured backward allocates them inside the graph's pool).
    """

    def __init__(self, fn: Callable[[], Out], device: torch.device, *, before_capture: Callable[[], None] | None = None) -> None:
        self.fn = fn
        self.device = device
        self.before_capture = before_capture
        self.warmups = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self._output: Out | None = None

    @property
    def captured(self) -> bool:
        """Whether the graph has been captured (every later call replays it)."""
        return self.graph is not None

    def __call__(self) -> Out:
        """Run the work: eagerly while warming up, else by replaying the graph.

        Returns:
            ``fn``'s output; after the capture, the static tensors the graph writes (the
            next replay overwrites them: clone what must outlive it).
        """
        if self.graph is not None:
            self.graph.replay()
            return self._output  # type: ignore[return-value]
        stream = torch.cuda.current_stream(self.device)
        if self.warmups < GRAPH_WARMUPS:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(stream)
            with torch.cuda.stream(side):
                out = self.fn()
            stream.wait_stream(side)
            self.warmups += 1
            return out
        if self.before_capture is not None:
            self.before_capture()
        graph = torch.cuda.CUDAGraph()
        with allowed_sync():  # SYNC: once per graph; capture begins with a device synchronize
            with torch.cuda.graph(graph):
                self._output = self.fn()
        self.graph = graph
        graph.replay()  # capture records the kernels without running them
        return self._output  # type: ignore[return-value]


class GraphedBatchCall:
    """``fn(batch)`` through a CUDA graph, for a batch of tensors of fixed shapes: each
    call copies the batch into static inputs (made on the first call), then runs or
    replays :class:`GraphedCall` on them and returns a clone of its output tensor.

    It wraps a function the way ``torch.compile`` does, so the two combine: PPO's update
    is ``GraphedBatchCall(update)``, and the update may call compiled code.

    Args:
        fn: ``batch -> Tensor``; the batch is a mapping of tensors.
        device: The CUDA device.
        before_capture: As :class:`GraphedCall`'s.
    """

    def __init__(self, fn: Callable[[Mapping[str, Tensor]], Tensor], device: torch.device, *,
                 before_capture: Callable[[], None] | None = None) -> None:
        self.fn = fn
        self.device = device
        self.before_capture = before_capture
        self.inputs: dict[str, Tensor] = {}
        self.call: GraphedCall[Tensor] | None = None

    @property
    def captured(self) -> bool:
        """Whether the graph has been captured (every later call replays it)."""
        return self.call is not None and self.call.captured

    def __call__(self, batch: Mapping[str, Tensor]) -> Tensor:
        if self.call is None:
            self.inputs = {k: torch.empty_like(v) for k, v in batch.items()}
            self.call = GraphedCall(lambda: self.fn(self.inputs), self.device, before_capture=self.before_capture)
        for key, value in batch.items():
            self.inputs[key].copy_(value)
        return self.call().clone()
