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

A :class:`WarmProgram` is called with a layout (the caller's key for what tells its
programs apart: the compiled update's minibatch shapes, the T loop's mode): its first call
with a layout compiles through dynamo, and later calls run dynamo's compiled code for it
directly, without dynamo: no frame evaluation, no cache lookup, no guards. That is for
callers that know their inputs keep their shapes and identity between calls (the compiled
update, a graph-safe env's T loop), as a CUDA graph does. Where that code is not one
whole graph (a graph break), the layout's calls stay on dynamo's path with its guard
checks skipped (:func:`call_warm`).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import types
from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["CPU_INDUCTOR_OPTIONS", "INDUCTOR_OPTIONS", "CompiledCall", "WarmProgram", "call_warm", "compiled"]

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


class WarmProgram:
    """``fn`` compiled once per layout and then called without dynamo.

    ``program(layout, *args, **kwargs)`` runs ``fn(*args, **kwargs)``. ``layout`` is the
    caller's hashable key for what its calls may differ in (shapes, dtypes, options that
    change the program); with it, the grad mode and autocast state. The first call with a
    key goes through dynamo with every guard checked (:func:`compiled`, autograd traced
    with ``autograd``), which compiles ``fn`` (from inductor's cache where it can); when
    that made one whole graph, every later call with the key runs dynamo's compiled code for
    it directly, as a plain function: no frame evaluation, no cache lookup, no guards. The
    caller guarantees what those guards would check: the rest of what ``fn`` reads
    (parameters, optimizer state, buffers, device tensors of hyperparameters) keeps its
    shapes, dtypes, ``requires_grad`` and Python values between calls (nothing checks
    them: a program traced on other values would run silently); tensors may be replaced
    by others of the same shape and dtype (a reloaded optimizer state), since the code
    reads them from their owners at each call.

    Dynamo's own path costs a compiled call on a CPU its frame evaluation and cache
    lookup even with guards skipped: calling the code directly made an iteration of
    vs_jax's CartPole PPO 1.06-1.14x faster at B = 64 (24 such calls an iteration) and
    1.04x at B = 1024, bit for bit the same (``benchmarks/experiments/warm_programs.py``). Where
    the first call did not make one graph (a graph break), or this torch has no dynamo
    cache entries to read, that key's calls stay on dynamo's path with its guard checks
    skipped (:func:`call_warm`); :attr:`fallback` says why.
    """

    def __init__(self, fn: Callable[..., Any], *, device: torch.device | str, dynamic: bool | None = False,
                 autograd: bool = False) -> None:
        self.fn = compiled(fn, device=device, dynamic=dynamic, autograd=autograd)
        self.device_type = torch.device(device).type
        frame = getattr(self.fn, "program", self.fn)._torchdynamo_orig_callable  # what dynamo runs
        self._owner = getattr(frame, "__self__", None)  # a bound method's instance
        self._func = getattr(frame, "__func__", frame)
        self._signature = inspect.signature(self._func, follow_wrapped=False)
        #: The compiled program of each key (layout, grad mode, autocast state).
        self.programs: dict[tuple, Callable[..., Any]] = {}
        #: Why the last key that stays on dynamo's path does (``None``: none does).
        self.fallback: str | None = None

    def __call__(self, layout: Any, *args: Any, **kwargs: Any) -> Any:
        key = (layout, *_global_state(self.device_type))
        program = self.programs.get(key)
        if program is not None:
            return program(*args, **kwargs)
        out = self.fn(*args, **kwargs)  # compiles (or finds) dynamo's entry for these inputs
        self.programs[key] = self._direct(args, kwargs)
        return out

    def _direct(self, args: tuple, kwargs: dict[str, Any]) -> Callable[..., Any]:
        """Dynamo's compiled code for these inputs as a plain function, or its guarded path."""
        owner = () if self._owner is None else (self._owner,)
        try:
            bound = self._signature.bind(*owner, *args, **kwargs)
            bound.apply_defaults()
            entries = _cache_entries(self._func.__code__)
        except (AttributeError, ImportError, TypeError) as e:
            return self._guarded(f"no dynamo cache entries to read ({type(e).__name__}: {e})")
        entry = next((e for e in entries if e.guard_manager.check(dict(bound.arguments))), None)
        if entry is None:
            return self._guarded("no dynamo entry's guards pass on the arguments after their first call")
        if any(name.startswith("__resume") for name in entry.code.co_names):
            return self._guarded("a graph break: the compiled code resumes in functions dynamo compiles")
        func = self._func
        direct = types.FunctionType(entry.code, func.__globals__, f"{func.__name__}_direct", func.__defaults__,
                                    func.__closure__)
        direct.__kwdefaults__ = func.__kwdefaults__
        return functools.partial(direct, self._owner) if self._owner is not None else direct

    def _guarded(self, why: str) -> Callable[..., Any]:
        self.fallback = why
        return functools.partial(call_warm, self.fn)


def _cache_entries(code: types.CodeType) -> list[Any]:
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    return _debug_get_cache_entry_list(code)


def _global_state(kind: str) -> tuple:
    """What a compiled program bakes in besides its inputs: the grad mode and the autocast
    state of the device type ``kind``."""
    autocast = torch.is_autocast_enabled(kind)
    return torch.is_grad_enabled(), autocast, torch.get_autocast_dtype(kind) if autocast else None


class CompiledCall:
    """``fn(batch, **options)`` compiled whole (autograd traced) by one
    :class:`WarmProgram`, keyed by the layout: the batch's keys, shapes and dtypes and the
    options' values (a tensor option by presence). The rest of what ``fn`` reads
    (parameters, optimizer state, device tensors of hyperparameters) keeps its shapes,
    dtypes and ``requires_grad`` between calls; a new layout (the last, smaller
    minibatch) is compiled once."""

    def __init__(self, fn: Callable[..., Any], *, device: torch.device | str, dynamic: bool | None = False) -> None:
        self.program = WarmProgram(fn, device=device, dynamic=dynamic, autograd=True)

    def __call__(self, batch: Any, **options: Any) -> Any:
        layout = (*((k, x.shape, getattr(x, "dtype", None)) for k, x in batch.items()),
                  *((k, v if not isinstance(v, torch.Tensor) else torch.Tensor) for k, v in sorted(options.items())))
        return self.program(layout, batch, **options)

    @property
    def layouts(self) -> int:
        """How many programs it has compiled (layouts, each in each grad mode and autocast state)."""
        return len(self.program.programs)


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
