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
programs apart: the compiled update's minibatch shapes, the T loop's mode): it compiles one
program per layout ahead of its first call (``torch.compile(fullgraph=True).aot_compile``)
and calls it directly afterwards, without dynamo: no frame evaluation, no cache lookup, no
guards. That is for callers that know their inputs keep their shapes and identity between
calls (the compiled update, a graph-safe env's T loop), as a CUDA graph does. Where a
program cannot be compiled ahead (a graph break; a torch without ``aot_compile``) the
layout's calls go through dynamo, its guard checks skipped once warm (:func:`call_warm`).
"""

from __future__ import annotations

import functools
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


def _options(device: torch.device | str) -> dict[str, Any]:
    return INDUCTOR_OPTIONS | (CPU_INDUCTOR_OPTIONS if torch.device(device).type == "cpu" else {})


def compiled(fn: F, *, device: torch.device | str, dynamic: bool | None = False, autograd: bool = False) -> F:
    """``torch.compile(fn)`` with :data:`INDUCTOR_OPTIONS` (and on a CPU
    :data:`CPU_INDUCTOR_OPTIONS`), over a cache of its own; ``device`` is where ``fn``'s
    tensors live.

    With ``autograd``, dynamo traces autograd inside ``fn`` (``Tensor.backward``,
    ``torch.autograd.grad``: dynamo's ``trace_autograd_ops``, set for its calls only), so a
    function that takes a gradient and steps on it (PPO's minibatch update) compiles as
    one program rather than breaking at the backward pass."""
    program = torch.compile(_own_code(fn), dynamic=dynamic, options=_options(device))
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
    key compiles ``fn`` whole for those arguments
    (``torch.compile(fullgraph=True).aot_compile``, rlx's options, autograd traced with
    ``autograd``, see :func:`compiled`); every later call with it runs that program
    directly. The caller guarantees what dynamo's guards would check: the rest of what
    ``fn`` reads (parameters, optimizer state, buffers, device tensors of hyperparameters)
    keeps its shapes, dtypes, ``requires_grad`` and Python values between calls (nothing
    checks them: a program traced on other values would run silently); tensors may be replaced by
    others of the same shape and dtype (a reloaded optimizer state), since the program
    reads them from their owners at each call.

    Dynamo's own path costs a compiled call on a CPU its frame evaluation and cache
    lookup even with guards skipped: calling the program directly made an iteration of
    vs_jax's CartPole PPO at B = 64 (24 such calls an iteration) 17% faster, bit for bit
    the same (``benchmarks/experiments/warm_programs.py``). Where ``fn`` cannot be
    compiled that way (a graph break; a torch without ``aot_compile``), that layout runs
    through :func:`compiled` and :func:`call_warm` instead; :attr:`fallback` says why.
    """

    def __init__(self, fn: Callable[..., Any], *, device: torch.device | str, dynamic: bool | None = False,
                 autograd: bool = False) -> None:
        self.source, self.device, self.dynamic, self.autograd = fn, device, dynamic, autograd
        #: The compiled program of each key (layout, grad mode, autocast state).
        self.programs: dict[tuple, Callable[..., Any]] = {}
        #: Why the last layout not compiled ahead was not (``None``: every one was).
        self.fallback: str | None = None
        self._dynamo: Callable[..., Any] | None = None  # compiled(fn): made on the first fallback

    def __call__(self, layout: Any, *args: Any, **kwargs: Any) -> Any:
        key = (layout, *_global_state(self.device))
        program = self.programs.get(key)
        if program is None:
            program = self.programs[key] = self._compile(args, kwargs)
        return program(*args, **kwargs)

    def _compile(self, args: tuple, kwargs: dict[str, Any]) -> Callable[..., Any]:
        own = _own_code(self.source)
        bound = getattr(own, "__self__", None) if hasattr(own, "__func__") else None
        func = own.__func__ if bound is not None else own
        try:
            # No guards: its calls check none (the caller's layout is the check), and
            # keeping them would pickle what they read (the algorithm, with its other programs).
            options = _options(self.device) | {"guard_filter_fn": _no_guards}
            ahead = torch.compile(func, fullgraph=True, dynamic=self.dynamic, options=options)
            with torch._dynamo.config.patch(trace_autograd_ops=self.autograd):
                program = ahead.aot_compile((((bound,) if bound is not None else ()) + args, kwargs))
            program.disable_guard_check()
        except (AttributeError, RuntimeError, torch._dynamo.exc.Unsupported) as e:
            self.fallback = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            return self._through_dynamo()
        return functools.partial(program, bound) if bound is not None else program

    def _through_dynamo(self) -> Callable[..., Any]:
        if self._dynamo is None:
            self._dynamo = compiled(self.source, device=self.device, dynamic=self.dynamic, autograd=self.autograd)
        fn, warm = self._dynamo, False

        def call(*args: Any, **kwargs: Any) -> Any:
            nonlocal warm
            out = call_warm(fn, *args, warm=warm, **kwargs)
            warm = True
            return out

        return call


def _no_guards(entries: Any) -> list[bool]:
    return [False] * len(entries)


def _global_state(device: torch.device | str) -> tuple:
    """What a compiled program bakes in besides its inputs: the grad mode and the autocast
    state of ``device``'s type."""
    kind = torch.device(device).type
    autocast = torch.is_autocast_enabled(kind)
    return torch.is_grad_enabled(), autocast, torch.get_autocast_dtype(kind) if autocast else None


class CompiledCall:
    """``fn(batch, **options)`` compiled whole (autograd traced), one
    :class:`WarmProgram` per layout: the batch's keys, shapes and dtypes and the options'
    values (a tensor option by presence). The rest of what ``fn`` reads (parameters,
    optimizer state, device tensors of hyperparameters) keeps its shapes and dtypes
    between calls; a new layout (the last, smaller minibatch) is compiled once."""

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
