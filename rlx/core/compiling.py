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
loads its kernels instead of compiling them. That includes the scan of a step's minibatch
updates (:mod:`rlx.core.scanned`), which torch 2.13 leaves out of its caches ("Can't cache
HigherOrderOperator: scan"): rlx marks torch's ``scan`` cacheable
(``unsafe_marked_cacheable_functions``, keyed by torch's version). That is safe because
the cache key pickles the graph module whole, the scan's body (a submodule) with its code,
so a changed update is a new key (tests/core/test_scanned.py). A second start of vs_jax's
CartPole PPO with ``compile=True`` then takes 7 s rather than 22 s to its first step
(docs/performance.md).

A :class:`WarmProgram` is called with a layout (the caller's key for what tells its
programs apart: the compiled update's minibatch shapes, the T loop's mode): its first call
with a layout compiles through dynamo, and later calls run dynamo's compiled code for it
directly, without dynamo: no frame evaluation, no cache lookup, and of dynamo's guards only
those on Python values (checked in C++, microseconds), none on tensors. That is for callers
whose tensors keep their shapes and dtypes between calls (the compiled update, a graph-safe
env's T loop, PPO's phases around the epochs, collect's tail), as a CUDA graph's do. Where
that code is not one whole graph (a graph break), the layout's calls stay on dynamo's path
with its guard checks skipped (:func:`call_warm`).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import types
from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["CPU_INDUCTOR_OPTIONS", "CUDA_INDUCTOR_OPTIONS", "INDUCTOR_OPTIONS", "NARROW_PRODUCTS", "CompiledCall",
           "WarmProgram", "call_warm", "compiled", "recheck_values"]

#: Inductor options of every function rlx compiles.
INDUCTOR_OPTIONS: dict[str, Any] = {
    "cpp.use_decompose_tanh": True,
    "unsafe_marked_cacheable_functions": {"torch.ops.higher_order.scan": torch.__version__},
}
#: Added for functions that run on a CPU.
CPU_INDUCTOR_OPTIONS: dict[str, Any] = {"cpp_wrapper": True}
#: Added for functions that run on a GPU. Inductor's loop reordering after fusion failed
#: PPO's minibatch update on an H100 with torch 2.11.0+cu130 (``AssertionError`` in
#: ``Scheduler.reorder_loops_by_dep_pair``: a fused node where it expects a single one;
#: 2026-11-27, ``benchmarks/results/gpu_check_nvidia-h100_2026-11-27/run1_parts.log``).
#: With the reordering off the update compiled, its GPU tests passed, and it ran at 14.9M
#: env steps/s at B = 4096 under CUDA graphs against 8.5M graphed uncompiled.
#: ``max_pointwise_cat_inputs``: a ``stack`` or ``cat`` of up to 16 inputs is read by its
#: consumer's kernel (inductor's default: 8) rather than copied a kernel per input: the
#: clip's 12 gradient norms (:func:`rlx.members.ops.clip_grad_norm_`) stacked into their
#: total (counted with ``benchmarks/experiments/cuda_launches.py``: with the clip's
#: ``_foreach_norm``, 894 launches a step against 1,054 at vs_jax.py's B = 4096).
CUDA_INDUCTOR_OPTIONS: dict[str, Any] = {"loop_ordering_after_fusion": False, "max_pointwise_cat_inputs": 16}
#: Whether CPU programs compute products with a narrow result transposed, where MKL is
#: several times faster (:class:`~rlx.core.narrow_products.NarrowProducts`, inductor's
#: ``post_grad_custom_post_pass``; made at the first compile, which imports inductor).
NARROW_PRODUCTS = True

F = TypeVar("F", bound=Callable[..., Any])

#: The round of a :class:`WarmProgram`'s checks of Python values (:func:`recheck_values`).
_round = 0


def recheck_values() -> None:
    """Start a round of checks: each :class:`WarmProgram` checks the Python values its
    programs baked in (a config's floats and flags, an optimizer's options) again at its
    next call with each key. rlx's algorithms start one at each ``collect()`` and
    ``step()``, so a value set between them is seen by the next."""
    global _round
    _round += 1

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


def compiled(fn: F, *, device: torch.device | str, dynamic: bool | None = False, autograd: bool = False,
             cpp_wrapper: bool | str = True, fullgraph: bool = False, eager_random: bool = False) -> F:
    """``torch.compile(fn)`` with :data:`INDUCTOR_OPTIONS` (and on a CPU
    :data:`CPU_INDUCTOR_OPTIONS` and, with :data:`NARROW_PRODUCTS`, the narrow-products
    pass; elsewhere :data:`CUDA_INDUCTOR_OPTIONS`), over a cache of its own; ``device``
    is where ``fn``'s tensors live.

    ``cpp_wrapper=False`` keeps a CPU program's wrapper in Python: for a large program
    called once a step, whose C++ wrapper would be one function of thousands of calls
    that g++ takes many minutes to compile at ``-O3`` (NPG's natural step over 64 passes
    of rows: over 18 minutes, stopped there), for microseconds a call saved.
    ``cpp_wrapper="separate"``: the C++ wrapper, compiled at ``-O1`` in a file apart from
    its kernels (still ``-O3``; inductor's ``cpp_wrapper_build_separate``), for a program
    whose wrapper is large (the scan of a step's updates, :mod:`rlx.core.scanned`): a
    shorter first compile, the same warm time (measured in docs/benchmarks.md).

    With ``autograd``, dynamo traces autograd inside ``fn`` (``Tensor.backward``,
    ``torch.autograd.grad``: dynamo's ``trace_autograd_ops``, set for its calls only), so a
    function that takes a gradient and steps on it (PPO's minibatch update) compiles as
    one program rather than breaking at the backward pass. ``fullgraph``: a graph break
    raises (a ``scan`` compiles only whole: :mod:`rlx.core.scanned`). ``eager_random``:
    the program's random ops draw from torch's generator as eager ones do (inductor's
    ``fallback_random``), rather than from inductor's own: the same numbers as ``fn``
    run eagerly (a step's epoch orders, :meth:`rlx.core.scanned.ScannedCalls.whole`)."""
    options = dict(INDUCTOR_OPTIONS)
    if torch.device(device).type == "cpu":
        options |= CPU_INDUCTOR_OPTIONS
        if NARROW_PRODUCTS:
            from rlx.core.narrow_products import NarrowProducts  # inductor's import: only when compiling

            options["post_grad_custom_post_pass"] = NarrowProducts()
    else:
        options |= CUDA_INDUCTOR_OPTIONS
    if not cpp_wrapper:
        options["cpp_wrapper"] = False
    elif cpp_wrapper == "separate" and options.get("cpp_wrapper"):
        options["cpp_wrapper_build_separate"] = True
    if eager_random:
        options["fallback_random"] = True
    program = torch.compile(_own_code(fn), dynamic=dynamic, options=options, fullgraph=fullgraph)
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
    that made one whole graph, later calls with the key run dynamo's compiled code for it
    directly, as a plain function: no frame evaluation, no cache lookup. Of the entry's
    guards, those on Python values reached from the arguments and a closure's free
    variables (``self``'s fields: a config's floats and flags, an optimizer's options,
    ``None`` or not) are checked at the first call with the key in each round
    (:func:`recheck_values`: each ``collect()`` and ``step()``): a value that changed
    sends the call through dynamo, which compiles for it, and each such program is then
    called directly when its values come back.
    Within a round those values are taken as they were (a check costs 10-60 us on a
    CPU, too much for every one of an iteration's 31 calls), so a Python argument that
    differs from call to call belongs in ``layout``. The guards on tensors, types,
    identities and module globals are not checked: the caller guarantees that the
    tensors ``fn`` reads (arguments, parameters, optimizer state, buffers) keep their
    shapes, dtypes, ``requires_grad``, aliasing and gradients (``None`` or a tensor)
    between calls with a key (a program traced on others would run silently: one traced
    where the gradients were ``None`` writes them rather than adding to them), and
    nobody patches the code. Tensors may be
    replaced by others alike (a reloaded optimizer state), since the code reads them
    from their owners at each call. ``fn`` must not change its arguments' Python state
    (their guards are matched after the first call): it returns what it builds.

    Dynamo's own path costs a compiled call on a CPU its frame evaluation and cache
    lookup even with guards skipped: calling the code of all 31 programs of an iteration
    of vs_jax's CartPole PPO directly made it 1.16x faster at B = 64 and 1.05x at
    B = 1024, bit for bit the same (``benchmarks/experiments/warm_programs.py``). Where
    the first call did not make one graph (a graph break), or this torch has no dynamo
    cache entries or guard trees to read, that key's calls stay on dynamo's path with its
    guard checks skipped (:func:`call_warm`); :attr:`fallback` says why.
    """

    def __init__(self, fn: Callable[..., Any], *, device: torch.device | str, dynamic: bool | None = False,
                 autograd: bool = False, cpp_wrapper: bool | str = True, fullgraph: bool = False,
                 eager_random: bool = False) -> None:
        self.fn = compiled(fn, device=device, dynamic=dynamic, autograd=autograd, cpp_wrapper=cpp_wrapper,
                           fullgraph=fullgraph, eager_random=eager_random)
        self.device_type = torch.device(device).type
        frame = getattr(self.fn, "program", self.fn)._torchdynamo_orig_callable  # what dynamo runs
        self._owner = getattr(frame, "__self__", None)  # a bound method's instance
        self._func = getattr(frame, "__func__", frame)
        self._signature = inspect.signature(self._func, follow_wrapped=False)
        params = self._signature.parameters.values()
        self._names = [p.name for p in params]
        self._defaults = {p.name: p.default for p in params if p.default is not p.empty}
        #: Whether a call's arguments map to the parameters by position and name alone.
        self._plain = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params)
        #: A closure's free variables (a cell's contents are read at each call's check).
        self._cells = dict(zip(self._func.__code__.co_freevars, self._func.__closure__ or ()))
        #: The compiled programs of each key (layout, grad mode, autocast state): ``[check,
        #: program, round checked]``, the last one to pass first; a call runs the first
        #: whose Python values pass.
        self.programs: dict[tuple, list[list[Any]]] = {}
        #: Why the last key that stays on dynamo's path does (``None``: none does).
        self.fallback: str | None = None

    def __call__(self, layout: Any, *args: Any, **kwargs: Any) -> Any:
        key = (layout, *_global_state(self.device_type))
        programs = self.programs.get(key)
        if programs is not None:
            now, values = _round, None
            for i, entry in enumerate(programs):
                check, program, checked = entry
                if check is not None and checked != now:  # its Python values, once a round
                    values = self._locals(args, kwargs) if values is None else values
                    if not check(values):
                        continue
                    entry[2] = now
                    if i:  # first from now on: the round's later calls check no stale entry before it
                        programs.insert(0, programs.pop(i))
                return program(*args, **kwargs)
        out = self.fn(*args, **kwargs)  # compiles (or finds) dynamo's entry for these inputs
        check, program = self._direct(args, kwargs)
        programs = self.programs.setdefault(key, [])
        # The new program first; dynamo's guarded path (no check: it takes any call) last.
        programs.insert(len(programs) if check is None else 0, [check, program, _round])
        return out

    @property
    def _free(self) -> dict[str, Any]:
        free = {}
        for name, cell in self._cells.items():
            try:
                free[name] = cell.cell_contents
            except ValueError:  # an empty cell: no guard can read it
                pass
        return free

    def _locals(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name, and a closure's free variables by
        theirs, as dynamo's guards read them (``L[...]``)."""
        owner = () if self._owner is None else (self._owner,)
        if self._plain:
            return {**self._free, **self._defaults, **dict(zip(self._names, (*owner, *args))), **kwargs}
        bound = self._signature.bind(*owner, *args, **kwargs)
        bound.apply_defaults()
        return {**self._free, **bound.arguments}

    def _direct(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Callable[..., Any] | None, Callable[..., Any]]:
        """``(check, program)``: dynamo's compiled code for these inputs as a plain function
        and the check of its guards on Python values (``None`` with the guarded path)."""
        try:
            arguments = self._locals(args, kwargs)
            entries = _cache_entries(self._func.__code__)
        except (AttributeError, ImportError, TypeError) as e:
            return self._guarded(f"no dynamo cache entries to read ({type(e).__name__}: {e})")
        entry = next((e for e in entries if e.guard_manager.check(arguments)), None)
        if entry is None:
            return self._guarded("no dynamo entry's guards pass on the arguments after their first call")
        if any(name.startswith("__resume") for name in entry.code.co_names):
            return self._guarded("a graph break: the compiled code resumes in functions dynamo compiles")
        try:
            check = _value_guards(entry.guard_manager.root).check
        except (AttributeError, RuntimeError, TypeError) as e:
            return self._guarded(f"its guards cannot be cut to the Python values ({type(e).__name__}: {e})")
        func = self._func
        direct = types.FunctionType(entry.code, func.__globals__, f"{func.__name__}_direct", func.__defaults__,
                                    func.__closure__)
        direct.__kwdefaults__ = func.__kwdefaults__
        return check, (functools.partial(direct, self._owner) if self._owner is not None else direct)

    def _guarded(self, why: str) -> tuple[None, Callable[..., Any]]:
        self.fallback = why
        return None, functools.partial(call_warm, self.fn)


#: Dynamo's guards on a Python value: what a WarmProgram's direct calls check (the rest,
#: on tensors' properties, on types and identities, on instance dicts, are the caller's
#: contract).
_VALUE_GUARDS = frozenset({"EQUALS_MATCH", "TRUE_MATCH", "FALSE_MATCH", "NONE_MATCH", "LENGTH_CHECK", "DICT_LENGTH"})
#: Guards that make a node a tensor's, whose subtree holds no Python values to check.
_TENSOR_GUARDS = frozenset({"TENSOR_MATCH", "NO_TENSOR_ALIASING", "DIMENSION_DYNAMIC_MARKING_GUARD"})


def _value_guards(root: Any) -> Any:
    """The part of a dynamo entry's guard tree (``root``) that checks Python values reached
    from the call's arguments (``L[...]``: a config's floats and flags, an int argument,
    ``None`` or not, a list's length): the nodes holding such a guard and the nodes on
    their paths, with the root's own guards (grad mode and the like). Checked in C++, in
    10-60 us where a call's program has evicted the objects it reads from the caches."""
    from torch._C._dynamo.guards import DictGuardManager

    keep: set[str] = set()

    def visit(node: Any) -> bool:
        source = node.get_source()
        kinds = {type(g).__name__ for g in node.get_leaf_guards()}
        if kinds & _TENSOR_GUARDS or source.startswith("G"):
            return False
        if isinstance(node, DictGuardManager):
            children = [m for pair in node.get_key_value_managers().values() for m in pair if m is not None]
        else:
            children = list(node.get_child_managers())
        below = [visit(child) for child in children]  # every child visited
        if kinds & _VALUE_GUARDS or any(below):
            keep.add(source)
            return True
        return False

    visit(root)
    keep.add(root.get_source())
    return root.clone_manager(lambda node: node.get_source() in keep)


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
