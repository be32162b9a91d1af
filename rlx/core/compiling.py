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
callers that know its inputs are those it was compiled for (the compiled update's warm
minibatch layouts, a graph-safe env's T loop).
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["CPU_INDUCTOR_OPTIONS", "INDUCTOR_OPTIONS", "CompiledCall", "call_warm", "compiled"]

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


def compiled(fn: F, *, device: torch.device | str, dynamic: bool | None = False, autograd: bool = False) -> F:
    """``torch.compile(fn)`` with :data:`INDUCTOR_OPTIONS` (and on a CPU
    :data:`CPU_INDUCTOR_OPTIONS`), over a cache of its own; ``device`` is where ``fn``'s
    tensors live.

    With ``autograd``, dynamo traces autograd inside ``fn`` (``Tensor.backward``,
    ``torch.autograd.grad``: dynamo's ``trace_autograd_ops``, set for its calls only), so a
    function that takes a gradient and steps on it (PPO's minibatch update) compiles as
    one program rather than breaking at the backward pass."""
    options = INDUCTOR_OPTIONS | (CPU_INDUCTOR_OPTIONS if torch.device(device).type == "cpu" else {})
    program = torch.compile(_own_code(fn), dynamic=dynamic, options=options)
    if not autograd:
        return program  # type: ignore[return-value]
    config = torch._dynamo.config

    def call(*args: Any, **kwargs: Any) -> Any:
        if config.trace_autograd_ops:
            return program(*args, **kwargs)
        config.trace_autograd_ops = True
        try:
            return program(*args, **kwargs)
        finally:
            config.trace_autograd_ops = False

    # A code object of its own, as _own_code's: a frame of a shared wrapper code that
    # dynamo compiled (a call from the eager remainder of another compiled function) would
    # put entries for every compiled function on one cache, told apart only by guards
    # that call_warm skips.
    n = next(_copies)
    code = call.__code__.replace(co_name=f"compiled_rlx{n}")
    call = types.FunctionType(code, call.__globals__, f"compiled_rlx{n}", None, call.__closure__)
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    call.program = program  # type: ignore[attr-defined]
    call._torchdynamo_orig_callable = program._torchdynamo_orig_callable  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]


class CompiledCall:
    """``fn(batch, **options)`` compiled (:func:`compiled`, autograd traced), with dynamo's per-call guard
    checks skipped (:func:`call_warm`) once a call with the same layout has run: the
    batch's keys, shapes and dtypes, the options' values (a tensor option by presence)
    and the grad mode. The rest of what ``fn`` reads (parameters, optimizer state, device
    tensors of hyperparameters) keeps its shapes and identity between calls; a new
    layout (the last, smaller minibatch) is checked, and compiled, once.

    Skipping the checks saves their cost over the update's ~60 tensors: 90 us a call at
    B = 64, 250 us at B = 1024 on one CPU core."""

    def __init__(self, fn: Callable[..., Any], *, device: torch.device | str, dynamic: bool | None = False) -> None:
        self.fn = compiled(fn, device=device, dynamic=dynamic, autograd=True)
        self._warm: set[tuple] = set()

    def __call__(self, batch: Any, **options: Any) -> Any:
        layout = (torch.is_grad_enabled(), *((k, x.shape, getattr(x, "dtype", None)) for k, x in batch.items()),
                  *((k, v if not isinstance(v, torch.Tensor) else torch.Tensor) for k, v in sorted(options.items())))
        out = call_warm(self.fn, batch, warm=layout in self._warm, **options)
        self._warm.add(layout)
        return out


def call_warm(fn: Callable[..., Any], *args: Any, warm: bool = True, **kwargs: Any) -> Any:
    """``fn(*args)``, skipping dynamo's guard checks when ``warm`` (only the guards that
    tell its compiled entries apart run). Should dynamo still find no entry for these
    inputs (a change the caller did not foresee), it raises before running anything;
    the call is then made again with every guard checked, which compiles a new entry."""
    if not warm:
        return fn(*args, **kwargs)
    try:
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            return fn(*args, **kwargs)
    except RuntimeError as e:
        if "skip_guard_eval_unsafe" not in str(e):
            raise
    return fn(*args, **kwargs)
