"""rlx.core.compiling: each compiled function's own dynamo cache, warm calls that fall back
to checking every guard instead of failing, and programs compiled per layout and called
without dynamo."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from rlx.core import compiling
from rlx.core.compiling import WarmProgram, call_warm, compiled, recheck_values


@pytest.fixture(autouse=True)
def python_wrapper(monkeypatch):
    """These tests are about dynamo's caches: without the CPU's C++ wrapper, whose
    compiling would take most of their time."""
    monkeypatch.setattr(compiling, "CPU_INDUCTOR_OPTIONS", {})


class Scaler:
    def __init__(self, factor: float) -> None:
        self.factor = factor

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor + 1

    @torch.no_grad()
    def apply_no_grad(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor + 1


def test_every_compiled_method_has_a_cache_of_its_own() -> None:
    """Dynamo keeps its entries on the code object; eight instances of one method would
    spend its eight-entry limit, and the next would run eagerly. Each copy counts alone."""
    fns = [compiled(Scaler(float(k)).apply, device="cpu") for k in range(12)]
    codes = {fn._torchdynamo_orig_callable.__func__.__code__ for fn in fns}
    assert len(codes) == 12
    x = torch.arange(4.0)
    for k, fn in enumerate(fns):
        torch.testing.assert_close(fn(x), x * k + 1)
    original = Scaler.apply.__code__
    assert all(code is not original and code.co_code == original.co_code for code in codes)


def test_a_warm_call_with_inputs_never_seen_compiles_them_instead_of_failing() -> None:
    fn = compiled(Scaler(2.0).apply, device="cpu")
    x = torch.arange(4.0)
    call_warm(fn, x, warm=False)  # compiled for [4]
    torch.testing.assert_close(call_warm(fn, x), x * 2 + 1)  # guards skipped
    y = torch.arange(6.0).view(2, 3)  # a shape it was never compiled for: dynamo refuses under the stance...
    torch.testing.assert_close(call_warm(fn, y), y * 2 + 1)  # ...and the call is made again with every guard


def test_decorated_methods_get_a_cache_of_their_own_too() -> None:
    """A ``@torch.no_grad()`` method's code is torch's decorator, which dynamo runs in one
    ``inner`` frame shared by every such function: the ninth instance compiled in a
    process (the policy's ``act_step`` of the ninth algorithm) would run eagerly. Each gets
    a trampoline of its own: twelve instances, twelve graphs, and no gradient."""
    counters.clear()
    x = torch.arange(4.0, requires_grad=True)
    for k in range(12):
        y = compiled(Scaler(float(k)).apply_no_grad, device="cpu")(x)
        torch.testing.assert_close(y, x.detach() * k + 1)
        assert not y.requires_grad
    assert counters["stats"]["unique_graphs"] == 12


class Weighted:
    def __init__(self) -> None:
        self.w = torch.full((3,), 2.0)
        self.scale, self.clip = 1.5, True

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * self.w).sum(-1)

    def scaled(self, x: torch.Tensor, *, shift: float = 0.0) -> torch.Tensor:
        y = x * self.w * self.scale + shift  # Python values the program bakes in
        return y.clamp(max=1.0) if self.clip else y

    def broken(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.w
        torch._dynamo.graph_break()  # what an env that calls into numpy would do
        return y - self.w


def _regions(fn) -> dict[str, int]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    names = [e.name for e in prof.events()]
    return {kind: sum(n.startswith(kind) for n in names) for kind in ("Torch-Compiled Region", "## Call CompiledFxGraph")}


def test_a_warm_program_runs_its_compiled_program_without_dynamo() -> None:
    model, x = Weighted(), torch.randn(4, 3)
    program = WarmProgram(model.apply, device="cpu")
    torch.testing.assert_close(program("rows=4", x), model.apply(x))
    assert program.fallback is None and len(program.programs) == 1
    # The program itself runs (one inductor call) and dynamo's frame evaluation does not.
    assert _regions(lambda: program("rows=4", x)) == {"Torch-Compiled Region": 0, "## Call CompiledFxGraph": 1}
    # What it reads from its owner is read at each call: a replaced tensor of the same shape is seen.
    model.w = torch.full((3,), -0.5)
    torch.testing.assert_close(program("rows=4", x), model.apply(x))


def test_a_warm_program_checks_the_python_values_its_program_baked_in() -> None:
    """A direct call skips the guards on tensors: a Python value the program read (an
    attribute, a keyword's default) that changed since sends the call, at its first
    call in a round of checks (``recheck_values``, each collect and step), through
    dynamo, which compiles for the new value; each value's program is then called
    directly. Within a round the values are taken as they were."""
    model, x = Weighted(), torch.randn(4, 3)
    program = WarmProgram(model.scaled, device="cpu")
    for scale, clip in ((1.5, True), (1.5, True), (-3.0, True), (-3.0, False), (1.5, True), (-3.0, False)):
        model.scale, model.clip = scale, clip
        recheck_values()
        torch.testing.assert_close(program("rows=4", x), model.scaled(x))
        torch.testing.assert_close(program("rows=4, shift", x, shift=0.25), model.scaled(x, shift=0.25))
    assert program.fallback is None and len(program.programs) == 2
    # Three values of (scale, clip) in each layout: three programs each, each now run
    # directly (no dynamo frame) and chosen by its values.
    assert [len(entries) for entries in program.programs.values()] == [3, 3]
    # The program of the values now in force comes first in each layout (here the first
    # one compiled, behind two newer ones): later calls in the round check no stale
    # program before it.
    model.scale, model.clip = 1.5, True
    recheck_values()
    program("rows=4", x), program("rows=4, shift", x, shift=0.25)
    assert all(entries[0][2] == compiling._round and [e[2] for e in entries[1:]] != [compiling._round] * 2
               for entries in program.programs.values())
    model.scale, model.clip = -3.0, False
    recheck_values()
    assert _regions(lambda: program("rows=4", x)) == {"Torch-Compiled Region": 0, "## Call CompiledFxGraph": 1}
    model.scale = 2.0  # within the round: not looked at, the program of scale -3 runs
    torch.testing.assert_close(program("rows=4", x), x * model.w * -3.0)
    recheck_values()
    torch.testing.assert_close(program("rows=4", x), model.scaled(x))


def test_a_warm_program_of_a_closure_runs_directly_and_checks_its_free_variables() -> None:
    """Dynamo reads a closure's free variables as the frame's locals (``L['scale']``):
    a program made of one (the scanned updates' program is) is called directly, and a
    changed free value is seen at the round's first call, as a changed argument is."""
    w, scale = torch.full((3,), 2.0), 1.5

    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * w * scale

    x = torch.randn(4, 3)
    program = WarmProgram(scaled, device="cpu")
    torch.testing.assert_close(program("rows=4", x), x * 2.0 * 1.5)
    assert program.fallback is None
    assert _regions(lambda: program("rows=4", x)) == {"Torch-Compiled Region": 0, "## Call CompiledFxGraph": 1}
    scale = -3.0
    recheck_values()
    torch.testing.assert_close(program("rows=4", x), x * 2.0 * -3.0)
    w = torch.full((3,), 0.5)  # a tensor of the same shape in the cell: read at each call
    torch.testing.assert_close(program("rows=4", x), x * 0.5 * -3.0)
    assert program.fallback is None and [len(e) for e in program.programs.values()] == [2]


def test_a_warm_program_compiles_each_layout_and_grad_mode_once() -> None:
    model = Weighted()
    model.w.requires_grad_(True)
    program = WarmProgram(model.apply, device="cpu")
    x, y = torch.randn(4, 3), torch.randn(2, 5, 3)
    for _ in range(2):
        torch.testing.assert_close(program("rows=4", x), model.apply(x))
        torch.testing.assert_close(program("rows=2x5", y), model.apply(y))
    assert len(program.programs) == 2
    assert program("rows=4", x).requires_grad
    with torch.no_grad():  # the grad mode is part of the key: a program of its own
        out = program("rows=4", x)
    torch.testing.assert_close(out, model.apply(x).detach())
    assert not out.requires_grad and len(program.programs) == 3
    assert program("rows=4", x).requires_grad and len(program.programs) == 3


def test_a_warm_program_that_cannot_compile_whole_runs_through_dynamo() -> None:
    model = Weighted()
    program = WarmProgram(model.broken, device="cpu")
    for x in (torch.ones(3), -torch.ones(3), torch.ones(3)):
        torch.testing.assert_close(program("rows=3", x), model.broken(x))
    assert "graph break" in program.fallback and len(program.programs) == 1
