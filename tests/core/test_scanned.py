"""``ScannedCalls``: an in-place update called once per row of an index, as one compiled
program, against the same update called in a loop.

Both run the same float64 arithmetic (the scan's body is the update as dynamo and
AOTAutograd traced it); they differ at most by how the compiled program associates sums
of 16 rows, each a few units of 2^-53 relative, carried through 8 steps of an update that
contracts (lr 0.1 on a least-squares loss): 1e-12 relative holds them with room.
"""

from __future__ import annotations

import pytest
import torch

from rlx.core.compiling import recheck_values
from rlx.core.scanned import ScannedCalls, ScanRefused


class _Toy:
    """A least-squares fit stepped with momentum, in place, and an accumulator."""

    def __init__(self, listed: bool = True) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(3, 1).double()
        self.momentum = [torch.zeros_like(p) for p in self.net.parameters()]
        self.sums = torch.zeros(2, dtype=torch.float64)
        self.lr = 0.1
        self.listed = listed

    def state(self) -> list[torch.Tensor]:
        return [*self.net.parameters(), *self.momentum, *([self.sums] if self.listed else [])]

    def update(self, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        loss = ((self.net(mb["x"]) - mb["y"]) ** 2).mean()
        grads = torch.autograd.grad(loss, list(self.net.parameters()))
        with torch.no_grad():
            for p, m, g in zip(self.net.parameters(), self.momentum, grads):
                m.mul_(0.9).add_(g)
                p.sub_(self.lr * m)
            self.sums.add_(torch.stack([loss, loss * loss]).detach())
        return loss.detach()


def _batch() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 3, generator=g, dtype=torch.float64)
    batch = {"x": x, "y": x @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64) + 0.3}
    return batch, torch.randperm(128, generator=g).reshape(8, 16)


def _loop(toy: _Toy, batch: dict[str, torch.Tensor], index: torch.Tensor) -> torch.Tensor:
    return torch.stack([toy.update({k: x[rows] for k, x in batch.items()}) for rows in index])


def _assert_same(a: _Toy, b: _Toy) -> None:
    for x, y in zip(a.state(), b.state()):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)


def test_the_scanned_calls_equal_the_loop_and_follow_python_values_between_rounds() -> None:
    batch, index = _batch()
    looped, scanned = _Toy(), _Toy()
    calls = ScannedCalls(scanned.update, scanned.state, device="cpu")
    (losses,) = calls(batch, index)
    torch.testing.assert_close(losses, _loop(looped, batch, index), rtol=1e-12, atol=0)
    _assert_same(looped, scanned)
    # A Python value the capture baked in changes between rounds: the next call sees it.
    recheck_values()
    looped.lr = scanned.lr = 0.05
    calls(batch, index)
    _loop(looped, batch, index)
    _assert_same(looped, scanned)
    assert len(calls._captures) == 1
    # The scan's program is called directly, not through dynamo's frame evaluation.
    ((_, program),) = calls._captures.values()
    assert program.fallback is None and all(check is not None for check, _, _ in next(iter(program.programs.values())))


def test_an_update_reading_a_tensor_outside_its_state_is_refused_and_nothing_is_written() -> None:
    batch, index = _batch()
    toy = _Toy(listed=False)  # its accumulator is not in state()
    before = [x.detach().clone() for x in (*toy.state(), toy.sums)]
    with pytest.raises(ScanRefused, match="neither a minibatch entry nor in state"):
        ScannedCalls(toy.update, toy.state, device="cpu")(batch, index)
    for x, y in zip((*toy.state(), toy.sums), before):
        assert torch.equal(x, y)  # the capture's one traced call was put back


def test_a_scan_that_does_not_compile_is_refused_before_it_writes(monkeypatch) -> None:
    """A program inductor cannot build (here a graph break, which a scan's program may not
    have) raises ScanRefused from its first call, before anything is written."""
    import rlx.core.scanned as scanned

    def breaking(captured):
        def program(carry, consts, batch, index):
            torch._dynamo.graph_break()
            return (index.sum(),)

        return program

    monkeypatch.setattr(scanned, "_scan_program", breaking)
    batch, index = _batch()
    toy = _Toy()
    before = [x.detach().clone() for x in toy.state()]
    calls = ScannedCalls(toy.update, toy.state, device="cpu")
    with pytest.raises(ScanRefused, match="does not compile"):
        calls(batch, index)
    assert not calls._captures
    for x, y in zip(toy.state(), before):
        assert torch.equal(x, y)


def test_a_scan_is_loaded_from_inductors_cache_and_a_changed_update_is_not() -> None:
    """rlx marks torch's ``scan`` cacheable (rlx.core.compiling): a second scan of the same
    update (another instance, its own dynamo cache) is loaded from inductor's cache and
    computes what the first did, bit for bit; an update that differs only in a value
    baked into its body (the LR) is not served the first one's program."""
    from torch._dynamo.utils import counters

    batch, index = _batch()
    first, second, looped = _Toy(), _Toy(), _Toy()
    ScannedCalls(first.update, first.state, device="cpu")(batch, index)
    before = dict(counters["inductor"])
    ScannedCalls(second.update, second.state, device="cpu")(batch, index)
    delta = {k: counters["inductor"][k] - before.get(k, 0) for k in ("fxgraph_cache_hit", "fxgraph_cache_bypass")}
    assert delta == {"fxgraph_cache_hit": 1, "fxgraph_cache_bypass": 0}
    for x, y in zip(first.state(), second.state()):
        assert torch.equal(x, y)
    changed = _Toy()
    changed.lr = looped.lr = 0.07
    ScannedCalls(changed.update, changed.state, device="cpu")(batch, index)
    _loop(looped, batch, index)
    _assert_same(looped, changed)


class _Rows:
    """What ``whole()`` runs around the scan: a batch made from a tensor in the toy's
    state (so the program reads it at each call), an order drawn from torch's generator,
    and a statistic of the batch after the updates."""

    def __init__(self, toy: _Toy) -> None:
        self.toy = toy
        self.x = torch.randn(128, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        self.shift = torch.zeros((), dtype=torch.float64)
        self.shuffle = True

    def before(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        x = self.x + self.shift
        batch = {"x": x, "y": x @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64) + 0.3}
        # Sorted uniform draws (as members' orders are drawn): inductor would draw its own.
        order = torch.rand(128, dtype=torch.float64).argsort() if self.shuffle else torch.arange(128)
        return batch, order.reshape(8, 16)

    def after(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return ((self.toy.net(batch["x"]) - batch["y"]) ** 2).mean().detach()


def test_whole_runs_before_the_scan_and_after_as_one_program_drawing_what_the_loop_draws() -> None:
    """``whole()``: ``before()``'s batch and rows, every update, ``after(batch)`` in one
    program that draws its orders from torch's generator as the eager calls do (not from
    inductor's own, which a compiled ``rand`` would draw from; the
    capture's own run of ``before()`` draws nothing that stays drawn), reads the state
    tensors anew at each call and follows a Python value ``before`` reads, between rounds."""
    looped, scanned = _Toy(), _Toy()
    rows_l, rows_s = _Rows(looped), _Rows(scanned)
    calls = ScannedCalls(scanned.update, lambda: [*scanned.state(), rows_s.shift], device="cpu",
                         before=rows_s.before, after=rows_s.after)
    for step in range(3):
        if step == 2:  # a Python value before() reads, and a state tensor it reads, both changed
            recheck_values()
            rows_l.shuffle = rows_s.shuffle = False
            rows_l.shift.fill_(0.5)
            rows_s.shift.fill_(0.5)
        torch.manual_seed(step)
        got = calls.whole("layout")
        drawn_s = torch.rand(())  # the generator where the program left it
        torch.manual_seed(step)
        batch, index = rows_l.before()
        _loop(looped, batch, index)
        want = rows_l.after(batch)
        assert torch.equal(drawn_s, torch.rand(())), step
        torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
        _assert_same(looped, scanned)
    assert len(calls._captures) == 1
    ((_, program),) = calls._captures.values()
    assert program.fallback is None and len(next(iter(program.programs.values()))) == 2  # shuffled, then not


def test_whole_needs_before_and_after() -> None:
    toy = _Toy()
    with pytest.raises(ValueError, match="give both to ScannedCalls"):
        ScannedCalls(toy.update, toy.state, device="cpu").whole("layout")
