"""``compile``, ``cudagraphs`` and ``matmul_precision``: on, off (a precision), or
``"auto"`` (the default), resolved once when the algorithm is built
(:func:`resolve_modes`; ``algo.modes`` holds the choice and why).

``"auto"`` picks the fastest mode that is correct for the config, the device and the env:

* **cudagraphs**: on wherever it can run (CUDA; PPO, A2C and NPG; Adam or AdamW; no
  float16 AMP (NPG: no AMP); with ``cudagraphs_scope="minibatch"`` equal minibatches and
  no gradient accumulation; one process), off elsewhere, the reason named; captures
  tested on a CPU only so far (a recurrent policy's, unequal minibatches' and
  ``accumulate_grads``' in one step graph) with ``cudagraphs=True`` only. Graphed, CartPole PPO ran 8.5M
  env steps/s at B = 4096 on an H100 against 1.4M eagerly (2026-11-27, ``docs/gpu.md``).
* **compile**: on where its compile time pays within the run, which only a caller that
  knows the run's length can say (:func:`run_length`: ``rlx train`` passes its
  ``max_env_steps``); off otherwise. Break-even, from the measured rates and compile times
  (``benchmarks/vs_jax.py``, CartPole PPO, one thread): on a CPU 0.3M env steps at
  B = 64 (20.9k eager against 60.9k env steps/s compiled, 9.8 s to compile), 2.7M at
  B = 1024 (55.0k against 97.9k, 21.1 s), 1.4M at B = 4096 (64.1k against 127k, 10.4 s):
  on past :data:`COMPILE_PAYS_AFTER` ``["cpu"]`` = 3M. On an H100 at B = 4096, graphed,
  8.5M against 14.9M env steps/s compiled after a 33 s first iteration (2026-11-27, from
  an empty cache with the GPU tests beside it): 6.5e8 (3.7e9 at B = 65536, 26.6M against
  35.0M), so ``["cuda"]`` = 5e8. The shipped configs stop at their solve threshold long
  before either (CartPole PPO after ~33k env steps, 1.3-1.8 s eagerly). A config may rule
  compiling out where its compile time would not be minutes
  (``compile_auto_blocker``: NPG on a CPU past 8 passes of rows, whose natural step's
  program unrolls them); and on CUDA a recurrent policy's, a torch.distributed run's,
  RND's and a distillation student's programs, compiled and tested on a CPU only so far
  (``_untested_on_cuda``; a config names its own in ``untested_on_cuda``), compile (and
  are captured) only with ``compile=True`` (``cudagraphs=True``).
* **matmul_precision**: TF32 on CUDA, torch's setting elsewhere
  (:data:`rlx.core.precision.AUTO_MATMUL_PRECISION`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch

from rlx.core.config_fields import ConfigError
from rlx.core.precision import resolve_matmul_precision
from rlx.members import axis

__all__ = ["COMPILE_PAYS_AFTER", "Modes", "cudagraphs_blocker", "resolve_modes", "run_length"]

#: Env steps past which ``compile="auto"`` compiles, by device type (the module docstring).
COMPILE_PAYS_AFTER = {"cpu": 3_000_000, "cuda": 500_000_000}

_run_env_steps: ContextVar[int | None] = ContextVar("rlx_run_env_steps", default=None)


@contextmanager
def run_length(env_steps: int | None) -> Iterator[None]:
    """Algorithms built inside know their run's length in env steps (``None``: unknown),
    which decides ``compile="auto"``."""
    token = _run_env_steps.set(env_steps)
    try:
        yield
    finally:
        _run_env_steps.reset(token)


@dataclass(frozen=True)
class Modes:
    """The modes an algorithm runs in, and for each field why (``notes``)."""

    compile: bool = False
    cudagraphs: bool = False
    #: ``matmul_precision`` resolved for the device (``None``: torch's setting left).
    matmul_precision: str | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        """``"compile off (auto: ...), cudagraphs on (auto), matmul_precision tf32 (auto)"``:
        what ``rlx train`` prints."""
        return ", ".join(f"{name} {note}" for name, note in self.notes.items())


def cudagraphs_blocker(config: Any, device: torch.device, world_size: int) -> str | None:
    """Why ``cudagraphs`` cannot run for this config and device (``None``: it can)."""
    if device.type != "cuda":
        return f"needs a CUDA device, got {device}"
    if world_size > 1:
        return "not supported under torch.distributed yet"
    if getattr(config, "enable_amp", False) and not axis.autocasts_bf16(device):
        return "needs bf16 for enable_amp: this GPU autocasts to float16, whose loss scale is read back on the host"
    return config.cudagraphs_blocker()


def _untested_on_cuda(config: Any, device: torch.device, world_size: int, recurrent: bool, *,
                      graphs: bool = False) -> str | None:
    """What of this run compiles (or, ``graphs``, captures), tested on a CPU, but has not
    run on a GPU yet (``"auto"`` leaves it off on CUDA; ``True`` opts in); ``None``: nothing."""
    if device.type != "cuda":
        return None
    if graphs and getattr(config, "accumulate_grads", False):
        return "accumulate_grads"
    if graphs and getattr(config, "buffer_size", 0) % max(getattr(config, "minibatch_size", 1), 1):
        return "unequal minibatches"
    if getattr(config, "untested_on_cuda", None):
        return config.untested_on_cuda
    if recurrent:
        return "a recurrent policy"
    if world_size > 1:
        return "a torch.distributed run"
    if getattr(config, "rnd", None) is not None:
        return "rnd's predictor step"
    return None


def resolve_modes(config: Any, device: torch.device, world_size: int, recurrent: bool, *, captures: bool) -> Modes:
    """The modes of ``config``'s ``compile`` and ``cudagraphs`` fields (where it has them):
    ``True`` and ``False`` as they are (``cudagraphs=True`` where the device or the run
    cannot capture raises :class:`ConfigError`), ``"auto"`` as the module docstring says.
    ``captures``: whether the algorithm has a captured update (PPO and A2C)."""
    notes: dict[str, str] = {}
    compile_field = getattr(config, "compile", False)
    if compile_field == "auto":
        steps, pays = _run_env_steps.get(), COMPILE_PAYS_AFTER.get(device.type, COMPILE_PAYS_AFTER["cuda"])
        compiles = steps is not None and steps >= pays
        length = "a run of unknown length" if steps is None else f"a run of {steps:.3g} env steps"
        notes["compile"] = (f"{'on' if compiles else 'off'} (auto: {length}; compiling pays past {pays:.3g} on "
                            f"{device.type})")
        blocker = getattr(config, "compile_auto_blocker", lambda device: None)(device)
        untested = _untested_on_cuda(config, device, world_size, recurrent)
        if blocker is None and untested is not None:
            blocker = f"{untested} compiles on CUDA only with compile=True until a GPU run has tested it"
        if compiles and blocker is not None:
            compiles, notes["compile"] = False, f"off (auto: {blocker})"
    else:
        compiles = bool(compile_field)
        if hasattr(config, "compile"):
            notes["compile"] = "on" if compiles else "off"
    graphs_field = getattr(config, "cudagraphs", False) if captures else False
    if graphs_field == "auto":
        why = cudagraphs_blocker(config, device, world_size)
        untested = _untested_on_cuda(config, device, world_size, recurrent, graphs=True) if why is None else None
        if untested is not None:
            why = f"{untested} is captured only with cudagraphs=True until a GPU run has tested it"
        graphs = why is None
        notes["cudagraphs"] = "on (auto)" if graphs else f"off (auto: {why})"
    else:
        graphs = bool(graphs_field)
        why = cudagraphs_blocker(config, device, world_size) if graphs else None
        if why is not None:  # True where this device or run cannot capture: refused by name
            raise ConfigError(f"{type(config).__name__}.cudagraphs: {why}")
        if captures and hasattr(config, "cudagraphs"):
            notes["cudagraphs"] = "on" if graphs else "off"
    name = getattr(config, "matmul_precision", None)
    precision = resolve_matmul_precision(name, device)
    if name == "auto":
        notes["matmul_precision"] = f"{precision or 'as torch has it'} (auto on {device.type})"
    return Modes(compiles, graphs, precision, notes)
