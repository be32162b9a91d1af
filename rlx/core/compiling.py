"""The one way rlx compiles a function: ``torch.compile`` with inductor and rlx's options.

* ``cpp.use_decompose_tanh``: on a CPU, ``tanh`` as a vectorized ``exp`` formula rather
  than the SLEEF ``tanh`` (measured 0.25 ms against 0.93 ms for 524k floats on one
  AMD EPYC core, within 2e-7 of torch's ``tanh``): a tanh MLP's activations are a large
  share of a compiled update on a CPU.
* ``cpp_wrapper`` on a CPU: the compiled program's wrapper (the code that allocates its
  buffers and calls its kernels and matmuls) is C++ rather than Python. At B = 64 with
  PPO's 16 small minibatch updates (one thread) it gave 6-7.5% more env steps/s, 1% at
  B = 1024 (``benchmarks/experiments/cpp_wrapper.py``); it adds about 5 s to a first
  compile (28.7 to 33.8 s
  for ``configs/cartpole_ppo.yaml`` with ``compile``, an empty cache) and nothing once
  the programs are in inductor's cache. CUDA programs keep the Python wrapper.
* Each :func:`compiled` function gets its own dynamo cache. Dynamo keeps its compiled
  entries on a function's code object, shared by every instance of a method: the tenth
  algorithm built in one process would find the eight-entry limit spent by the others
  and run eagerly. :func:`compiled` compiles a copy of the code, whose cache is its own.

Options apply to rlx's compiled functions only, never to the process's other
``torch.compile`` calls. Inductor caches what it compiles on disk (``TORCHINDUCTOR_CACHE_DIR``,
by default under the system's temporary directory), so a second run of the same program
loads its kernels instead of compiling them.

:func:`call_warm` calls a compiled function without dynamo's per-call guard checks, for
callers that know its inputs are those it was compiled for (the fused update's warm
minibatch layouts, a graph-safe env's T loop).
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["CPU_INDUCTOR_OPTIONS", "INDUCTOR_OPTIONS", "call_warm", "compiled"]

#: Inductor options of every function rlx compiles.
INDUCTOR_OPTIONS: dict[str, Any] = {"cpp.use_decompose_tanh": True}
#: Added for functions that run on a CPU.
CPU_INDUCTOR_OPTIONS: dict[str, Any] = {"cpp_wrapper": True}

F = TypeVar("F", bound=Callable[..., Any])

_copies = itertools.count()


def _own_code(fn: Any) -> Any:
    """``fn`` (a function or bound method) over a copy of its code object: the same
    behaviour, a dynamo cache of its own.

    A function wrapped by a decorator (``@torch.no_grad()``: its code is torch's
    ``decorate_context``, which dynamo does not trace as a frame of its own) or any other
    callable is called from a copy of a one-line trampoline instead: dynamo would
    otherwise wrap it in its one shared ``inner`` frame, whose eight entries every such
    function in the process shares."""
    func = getattr(fn, "__func__", fn)
    n = next(_copies)
    if not isinstance(func, types.FunctionType) or hasattr(func, "__wrapped__"):
        name = getattr(func, "__name__", type(func).__name__)

        def call(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        code = call.__code__.replace(co_name=f"{name}_rlx{n}")
        trampoline = types.FunctionType(code, call.__globals__, name, None, call.__closure__)
        trampoline.__wrapped__ = fn  # type: ignore[attr-defined]
        return trampoline
    code = func.__code__.replace(co_name=f"{func.__code__.co_name}_rlx{n}")
    copy = types.FunctionType(code, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    copy.__kwdefaults__, copy.__qualname__, copy.__wrapped__ = func.__kwdefaults__, func.__qualname__, func  # type: ignore[attr-defined]
    return types.MethodType(copy, fn.__self__) if hasattr(fn, "__self__") and fn is not func else copy


def compiled(fn: F, *, device: torch.device | str, dynamic: bool | None = False) -> F:
    """``torch.compile(fn)`` with :data:`INDUCTOR_OPTIONS` (and on a CPU
    :data:`CPU_INDUCTOR_OPTIONS`), over a cache of its own; ``device`` is where ``fn``'s
    tensors live."""
    options = INDUCTOR_OPTIONS | (CPU_INDUCTOR_OPTIONS if torch.device(device).type == "cpu" else {})
    return torch.compile(_own_code(fn), dynamic=dynamic, options=options)  # type: ignore[return-value]


def call_warm(fn: Callable[..., Any], *args: Any, warm: bool = True) -> Any:
    """``fn(*args)``, skipping dynamo's guard checks when ``warm`` (only the guards that
    tell its compiled entries apart run). Should dynamo still find no entry for these
    inputs (a change the caller did not foresee), it raises before running anything;
    the call is then made again with every guard checked, which compiles a new entry."""
    if not warm:
        return fn(*args)
    try:
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            return fn(*args)
    except RuntimeError as e:
        if "skip_guard_eval_unsafe" not in str(e):
            raise
    return fn(*args)
