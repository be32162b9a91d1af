"""Collect's T loop as compiled programs: ``compile=True`` with a graph-safe env.

One program runs ``K`` steps (acting, the env step, the buffer writes), ``K`` the largest
divisor of T up to :data:`STEPS_PER_PROGRAM`, and the same program serves every group of
K steps: its inputs are the buffer's whole columns and the group's first step as a 0-d
index tensor, and each step reads and writes its column by index. (Views of each step's
columns as inputs would alias one another, and torch 2.13 then writes a reused program's
outputs at the offsets of its first call.) Observation groups (a TensorDict) keep one
program per step, on that step's column views.

Each mode (sampling, deterministic) is compiled on its first run; every later call sees
the tensors it was compiled for, at the same addresses, as a CUDA graph replay does, and
runs the compiled code directly, without dynamo's per-call frame evaluation and guard
checks (:class:`rlx.core.compiling.WarmProgram`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from rlx.collect.buffer import ACTIONS, HIDDEN, LOGP, RESETS, VALUES
from rlx.core.compiling import WarmProgram
from rlx.env import FINAL_OBS, OBS, REWARDS, TERMINATED, TRUNCATED

if TYPE_CHECKING:
    from rlx.collect.buffer import StepColumns
    from rlx.collect.rollout import Rollout

__all__ = ["STEPS_PER_PROGRAM", "CompiledTLoop"]

#: The most steps one compiled program runs. Each compiled call costs tens of microseconds
#: of Python and dispatch on a CPU, and each step a program runs adds to its compile: at
#: B = 64, T = 32 (one thread, an empty inductor cache) the loop took 3.46 / 2.42 / 1.91 /
#: 1.71 ms in programs of 1 / 2 / 4 / 8 steps, compiled in 11.5 / 12.5 / 15.9 / 22.0 s
#: (``benchmarks/experiments/t_loop_programs.py``). Four steps keep most of the gain for
#: a third of the added compile time.
STEPS_PER_PROGRAM = 4


class CompiledTLoop:
    """``loop(deterministic)``: the rollout's T loop (:meth:`Rollout.steps`), compiled."""

    def __init__(self, rollout: Rollout) -> None:
        self.rollout = rollout
        buf, T = rollout.buffer, rollout.horizon
        #: The first step of each program's group (``None``: one program per step).
        self.starts: list[Tensor] | None = None
        self.steps_per_program = 1
        if not isinstance(buf.get(OBS), Tensor):
            self.program = WarmProgram(self._write_step, device=rollout.device)
            return
        K = self.steps_per_program = max(k for k in range(1, STEPS_PER_PROGRAM + 1) if T % k == 0)
        self.starts = [torch.tensor(t, device=rollout.device) for t in range(0, T, K)]
        keys = [OBS, ACTIONS, LOGP, VALUES, REWARDS, TERMINATED, TRUNCATED] + ([FINAL_OBS] if rollout.truncates else [])
        keys += [HIDDEN, RESETS] if rollout.stateful else []
        self._columns = {key: buf.get(key) for key in keys}
        self.program = WarmProgram(self.write_steps, device=rollout.device)

    def __call__(self, deterministic: bool) -> None:
        if self.starts is not None:
            for start in self.starts:
                self.program(deterministic, start, deterministic)
        else:
            for c in self.rollout.columns:
                self.program(deterministic, c, deterministic)

    def _write_step(self, c: StepColumns, deterministic: bool) -> None:
        self.rollout.write_step(c, deterministic)

    def write_steps(self, start: Tensor, deterministic: bool) -> None:
        """:meth:`Rollout.write_step` for the :attr:`steps_per_program` columns from
        ``start`` (a 0-d index tensor), each read and written by index."""
        ro = self.rollout
        c0 = ro.columns[0]  # a feedforward policy's (empty) state and reset flags
        for k in range(self.steps_per_program):
            t = (start + k).view(1)
            if ro.stateful:
                state, reset = (self._columns[key].index_select(1, t).squeeze(1) for key in (HIDDEN, RESETS))
            else:
                state, reset = c0.state, c0.reset
            ro.write_step(IndexedColumn(self._columns, t, state, reset), deterministic)


#: Where each output of a step goes: the buffer entry and whether it is column t + 1.
_PUT = {"actions": (ACTIONS, 0), "logp": (LOGP, 0), "values": (VALUES, 0), "rewards": (REWARDS, 0),
        "terminated": (TERMINATED, 0), "truncated": (TRUNCATED, 0), "final_obs": (FINAL_OBS, 0), "next_obs": (OBS, 1),
        "next_state": (HIDDEN, 1), "next_reset": (RESETS, 1)}


class IndexedColumn:
    """Column ``t`` of the buffer's whole columns, read and written by index (what
    :meth:`Rollout.write_step` takes in a compiled program of several steps, in place of
    a :class:`~rlx.collect.buffer.StepColumns` of views)."""

    def __init__(self, columns: dict[str, Tensor], t: Tensor, state: Tensor, reset: Tensor) -> None:
        self.columns, self.t, self.state, self.reset = columns, t, state, reset
        self.obs = columns[OBS].index_select(1, t).squeeze(1)

    def put(self, name: str, value: Tensor) -> None:
        key, ahead = _PUT[name]
        self.columns[key].index_copy_(1, self.t + ahead if ahead else self.t, value.unsqueeze(1))
