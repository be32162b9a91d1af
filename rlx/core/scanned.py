"""Many calls of an in-place update as one compiled program: the update captured once as a
function of tensors, and torch's ``scan`` running it over the minibatches.

PPO's epochs call one minibatch update ``E x M`` times an iteration. Compiled, each call is
a program of its own, and on a CPU each call costs its Python and its C++ wrapper's entry
(about 70 us of a 0.4-0.6 ms update at vs_jax.py's B = 64; ``python
benchmarks/experiments/scan_updates.py``). JAX's whole-program PPO runs its minibatches as a
``lax.scan`` in one program. :class:`ScannedCalls` does the same with rlx's one update,
unchanged: its first call is traced by dynamo (autograd included) and made by AOTAutograd
into a function of tensors that returns what the update wrote (the parameters, the
optimizer's state, the step's accumulators), which ``scan`` carries from one minibatch to
the next inside one inductor program. Nothing is written twice: the traced function is the
update the eager loop calls, and the test holds the two paths to the same parameters.
:meth:`ScannedCalls.whole` puts what comes before the scan (the batch and the rows, with
their random orders) and after it (the statistics) in the same program.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

import inspect

from rlx.core import compiling
from rlx.core.compiling import WarmProgram, _cache_entries, _global_state, _own_code, _value_guards

__all__ = ["SCAN_CPP_WRAPPER", "ScanRefused", "ScannedCalls"]

#: A scan's program on a CPU: inductor's C++ wrapper, compiled apart from its kernels
#: (``"separate"``: :func:`rlx.core.compiling.compiled`), for a shorter first compile.
SCAN_CPP_WRAPPER: bool | str = "separate"


class ScanRefused(RuntimeError):
    """The update cannot run as one scanned program; the message says why."""


class _Captured:
    """What a capture found: the update as a function of its tensor inputs (``graph``) and
    where each input comes from."""

    def __init__(self, graph: torch.fx.GraphModule, roles: list[tuple[str, Any]], written: list[int],
                 examples: list[Tensor], check: Callable[[dict[str, Any]], bool], arguments: dict[str, Any]) -> None:
        self.graph, self.roles, self.written = graph, roles, written
        #: The Python values the capture baked in (dynamo's guards on them) and the call's
        #: arguments to check them on, and the round they were last checked in.
        self.check, self.arguments, self.checked = check, arguments, compiling._round
        #: The state() positions of the carried (written) and the read-only inputs.
        self.carry = [roles[i][1] for i in written]
        self.consts = [where for kind, where in roles if kind == "state" and where not in self.carry]
        #: Each state() input's position and the shape, dtype and device it was captured with.
        self.state_signature = [(where, (t.shape, t.dtype, t.device))
                                for (kind, where), t in zip(roles, examples) if kind == "state"]


class ScannedCalls:
    """``fn(rows)`` once for each row of ``index``, ``rows = {key: batch[key][index[k]]}``,
    as one compiled program (on a CPU: its loop runs in the program's C++).

    ``fn`` changes tensors in place (the parameters, the optimizer's state, accumulators)
    and returns tensors; every tensor it reads besides ``rows`` must be one of
    ``state()``'s, which is called at each call (so tensors that a load replaced are the
    ones read and written). The first call with a layout (the batch's and the index's
    shapes and dtypes, the grad mode and autocast state) captures ``fn``: dynamo traces
    one call on the first rows (autograd traced, one graph or :class:`ScanRefused`),
    AOTAutograd makes it a function of tensors that returns what it wrote, and whatever
    that call wrote is put back (tensors and the RNG state), so the capture changes
    nothing. The captured function is then run by ``scan`` over ``index``'s rows with the
    written tensors as its carry, their last values copied into them.

    Raises :class:`ScanRefused` (at the capture, before anything is written) where ``fn``
    reads a tensor that is neither a row nor in ``state()``, changes a tensor's shape or
    a row, or returns a view, or where inductor does not compile the scan: the caller
    then calls ``fn`` in a loop.
    """

    def __init__(self, fn: Callable[[dict[str, Tensor]], Any], state: Callable[[], Sequence[Tensor]], *,
                 device: torch.device | str, before: Callable[[], tuple[dict[str, Tensor], Tensor]] | None = None,
                 after: Callable[[dict[str, Tensor]], Any] | None = None) -> None:
        self.fn, self.state, self.device = fn, state, torch.device(device)
        #: What :meth:`whole` runs around the scan, in its program: ``before()`` makes the
        #: ``(batch, index)`` to scan over, ``after(batch)`` what it returns.
        self.before, self.after = before, after
        self._captures: dict[tuple, tuple[_Captured, WarmProgram]] = {}

    def __call__(self, batch: dict[str, Tensor], index: Tensor) -> tuple[Tensor, ...]:
        """Run ``fn`` on each row of ``index`` (``[K, rows]``, indices into every tensor of
        ``batch`` along its first dimension); returns its outputs stacked (``[K, ...]``)."""
        key = (tuple((k, x.shape, x.dtype) for k, x in batch.items()), index.shape,
               *_global_state(self.device.type))
        state = list(self.state())
        found = self._valid(key, state)
        new = found is None
        if new:
            found = self._captures[key] = self._program(self._capture(batch, index, state))
        return self._run(key, found, state, new, batch, index)

    def whole(self, layout: Any) -> Any:
        """``after(batch)`` once ``fn`` has run on each row of ``index``, where ``(batch,
        index) = before()``: all three as one program (what :meth:`__call__` runs between
        two others, with no Python between them). ``layout`` is the caller's hashable key
        for what shapes ``before()``'s ``index`` and ``batch`` take (a new one captures
        again). The first call with a layout runs ``before()`` once as it is, to capture
        ``fn`` on its first rows, and puts back the RNG state it drew from (what else it
        writes, the program writes again), so that the program's first run draws the
        same numbers; the Python values ``before`` and ``after`` read are checked once a
        round, as a :class:`WarmProgram`'s are. Raises :class:`ScanRefused` as
        :meth:`__call__` does, with nothing written but what ``before()`` wrote."""
        if self.before is None or self.after is None:
            raise ValueError("whole() runs before() and after() around the scan: give both to ScannedCalls")
        key = ("whole", layout, *_global_state(self.device.type))
        state = list(self.state())
        found = self._valid(key, state)
        new = found is None
        if new:
            rng = _rng_state(self.device)
            try:
                batch, index = self.before()
            finally:
                _set_rng_state(self.device, rng)
            found = self._captures[key] = self._program(self._capture(batch, index, state), whole=True)
        return self._run(key, found, state, new)

    def _valid(self, key: tuple, state: list[Tensor]) -> tuple[_Captured, WarmProgram] | None:
        """The capture of ``key`` where it still holds: the Python values it baked in are
        as they were (checked once a round, as a WarmProgram's) and ``state()``'s tensors
        are shaped as captured."""
        found = self._captures.get(key)
        if found is not None and found[0].checked != compiling._round:
            if not found[0].check(found[0].arguments):
                return None  # a value the capture baked in changed: capture again
            found[0].checked = compiling._round
        return found if found is not None and self._matches(found[0], state) else None

    def _program(self, captured: _Captured, *, whole: bool = False) -> tuple[_Captured, WarmProgram]:
        scanned = _scan_program(captured)
        # A whole step draws its orders in the program: from torch's generator, as the loop draws them.
        return captured, WarmProgram(_whole_program(scanned, self.before, self.after) if whole else scanned,
                                     device=self.device, fullgraph=True, cpp_wrapper=SCAN_CPP_WRAPPER,
                                     eager_random=whole)

    def _run(self, key: tuple, found: tuple[_Captured, WarmProgram], state: list[Tensor], new: bool,
             *rows: Any) -> Any:
        captured, program = found
        carry = [state[i] for i in captured.carry]
        consts = [state[i] for i in captured.consts]
        with torch.no_grad():
            if not new:
                return program(key, carry, consts, *rows)
            try:  # the first call compiles, before it runs anything
                return program(key, carry, consts, *rows)
            except Exception as e:  # noqa: BLE001 - a program that does not compile: the loop runs
                del self._captures[key]
                raise ScanRefused(f"the scanned program does not compile ({type(e).__name__}: {str(e)[:200]})") from e

    @staticmethod
    def _matches(captured: _Captured, state: list[Tensor]) -> bool:
        n = len(state)
        return all(i < n and (state[i].shape, state[i].dtype, state[i].device) == sig
                   for i, sig in captured.state_signature)

    def _capture(self, batch: dict[str, Tensor], index: Tensor, state: list[Tensor]) -> _Captured:
        from functorch.compile import make_boxed_func
        from torch._functorch.aot_autograd import aot_module_simplified
        from torch._functorch._aot_autograd.schemas import OutputType
        from torch._guards import TracingContext

        rows = {k: x[index[0]] for k, x in batch.items()}
        seen: dict[str, Any] = {}

        def inference(graph: torch.fx.GraphModule, inputs: Sequence[Any]) -> Callable[..., Any]:
            seen["graph"], seen["meta"] = graph, TracingContext.get().fw_metadata
            return make_boxed_func(graph.forward)

        def backend(graph: torch.fx.GraphModule, inputs: Sequence[Any]) -> Callable[..., Any]:
            seen["inputs"] = list(inputs)
            seen["before"] = [x.detach().clone() if isinstance(x, Tensor) else x for x in inputs]
            return aot_module_simplified(graph, inputs, fw_compiler=inference)

        rng = _rng_state(self.device)
        config = torch._dynamo.config
        frame = _own_code(self.fn)
        traced = torch.compile(frame, backend=backend, fullgraph=True, dynamic=False)
        try:
            with config.patch(trace_autograd_ops=True):
                traced(rows)
        except Exception as e:  # noqa: BLE001 - any failure to trace is a reason to loop
            raise ScanRefused(f"the update does not trace as one graph ({type(e).__name__}: {str(e)[:200]})") from e
        finally:
            if "before" in seen:  # put back what the traced call wrote
                with torch.no_grad():
                    for x, before in zip(seen["inputs"], seen["before"]):
                        if isinstance(x, Tensor):
                            x.copy_(before)
            _set_rng_state(self.device, rng)
        graph, meta, inputs = seen["graph"], seen["meta"], seen["inputs"]
        _check_functional(meta, graph, inputs, OutputType)
        check, arguments = _value_check(frame, rows)
        by_id = {}
        for i, t in enumerate(state):
            by_id.setdefault(id(t), i)
        row_of = {id(x): k for k, x in rows.items()}
        roles: list[tuple[str, Any]] = []
        for x in inputs:
            if id(x) in row_of:
                roles.append(("row", row_of[id(x)]))
            elif id(x) in by_id:
                roles.append(("state", by_id[id(x)]))
            else:
                raise ScanRefused(f"the update reads a tensor of shape {tuple(x.shape)} and dtype {x.dtype} that is "
                                  "neither a minibatch entry nor in state()")
        written = [i for i, info in enumerate(meta.input_info) if info.mutates_data]
        if any(roles[i][0] == "row" for i in written):
            raise ScanRefused("the update writes into its minibatch")
        return _Captured(graph, roles, written, inputs, check, arguments)


def _rng_state(device: torch.device) -> tuple[Tensor, Tensor | None]:
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


def _set_rng_state(device: torch.device, rng: tuple[Tensor, Tensor | None]) -> None:
    torch.set_rng_state(rng[0])
    if rng[1] is not None:
        torch.cuda.set_rng_state(rng[1], device)


def _value_check(frame: Any, rows: dict[str, Tensor]) -> tuple[Callable[[dict[str, Any]], bool], dict[str, Any]]:
    """The check of the Python values the traced call baked in (a config's floats and
    flags, the optimizer's options: dynamo's guards on them, as :class:`WarmProgram`
    checks them) and the arguments to run it on."""
    func, owner = getattr(frame, "__func__", frame), getattr(frame, "__self__", None)
    bound = inspect.signature(func).bind(*(() if owner is None else (owner,)), rows)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    entry = next((e for e in _cache_entries(func.__code__) if e.guard_manager.check(arguments)), None)
    if entry is None:
        raise ScanRefused("no dynamo entry of the traced update passes its guards")
    return _value_guards(entry.guard_manager.root).check, arguments


def _check_functional(meta: Any, graph: torch.fx.GraphModule, inputs: list[Any], output_type: Any) -> None:
    """Refuse what a carry cannot hold: inputs that are not tensors, writes of a tensor's
    shape or storage, outputs that alias, effect tokens."""
    if not all(isinstance(x, Tensor) for x in inputs):
        raise ScanRefused("the traced update takes inputs that are not tensors")
    if any(info.mutates_metadata or info.mutates_storage_metadata for info in meta.input_info):
        raise ScanRefused("the update changes a tensor's shape or storage")
    if meta.num_intermediate_bases or meta.tokens or any(o.output_type != output_type.non_alias
                                                         for o in meta.output_info):
        raise ScanRefused("the update returns a view or has effects beyond its tensors")
    placeholders = sum(1 for node in graph.graph.nodes if node.op == "placeholder")
    if placeholders != len(inputs):
        raise ScanRefused(f"the traced update takes {placeholders} inputs where dynamo passed {len(inputs)}")


def _scan_program(captured: _Captured) -> Callable[..., tuple[Tensor, ...]]:
    """The function one :class:`WarmProgram` compiles for a capture: ``scan`` of the
    captured update over the index's rows, its written tensors carried, then copied back."""
    from torch._higher_order_ops.scan import scan

    graph, roles, written = captured.graph, captured.roles, captured.written
    carry_slot = {i: n for n, i in enumerate(written)}
    const_slot = {where: n for n, where in enumerate(captured.consts)}
    n_written = len(written)

    def scanned(carry: list[Tensor], consts: list[Tensor], batch: dict[str, Tensor], index: Tensor) -> tuple:
        def body(state: list[Tensor], rows: Tensor) -> tuple[list[Tensor], tuple]:
            args = []
            for i, (kind, where) in enumerate(roles):
                if i in carry_slot:
                    args.append(state[carry_slot[i]])
                elif kind == "state":
                    args.append(consts[const_slot[where]])
                else:
                    args.append(batch[where].index_select(0, rows))
            out = graph(*args)
            return list(out[:n_written]), tuple(out[n_written:])

        last, outputs = scan(body, [x.detach() for x in carry], index)
        for x, value in zip(carry, last):
            x.copy_(value)
        return outputs

    return scanned


def _whole_program(scanned: Callable[..., tuple[Tensor, ...]], before: Callable[[], tuple[dict[str, Tensor], Tensor]],
                   after: Callable[[dict[str, Tensor]], Any]) -> Callable[..., Any]:
    """The function :meth:`ScannedCalls.whole`'s program compiles: ``before()``, the scan
    over its rows, ``after(batch)``."""

    def whole(carry: list[Tensor], consts: list[Tensor]) -> Any:
        batch, index = before()
        scanned(carry, consts, batch, index)
        return after(batch)

    return whole
