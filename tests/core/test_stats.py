"""Statistics by name: one transfer, names kept, std as in torch."""

from __future__ import annotations

import pytest
import torch

from rlx.core.stats import Stats


def test_entries_come_back_by_name_with_torch_std_and_mean() -> None:
    x = torch.tensor([1.0, 2.0, 4.0, 9.0], dtype=torch.float64)
    stats = Stats()
    stats.add("a/count", torch.tensor(3.0), "sum")
    stats.add("a/finite", torch.tensor(True), "min")
    stats.add_std_mean("x/std", "x/mean", x)
    host = stats.to_host()
    assert list(host) == ["a/count", "a/finite", "x/mean", "x/std"]
    std, mean = torch.std_mean(x, correction=0)
    assert host == {"a/count": 3.0, "a/finite": 1.0, "x/mean": mean.item(), "x/std": std.item()}
    assert all(isinstance(v, float) for v in host.values())


def test_a_std_is_only_added_with_its_mean_and_nothing_is_an_empty_dict() -> None:
    with pytest.raises(ValueError, match="add_std_mean"):
        Stats().add("x/std", torch.tensor(1.0), "std")
    assert Stats().to_host() == {}


def test_a_copy_takes_new_entries_without_changing_the_original() -> None:
    """A captured graph returns the same Stats at every replay: the caller adds its host
    entries (an env's logged scalars) to a copy, which must leave the original alone."""
    stats = Stats()
    stats.add("a", torch.tensor(1.0))
    stats.add_std_mean("s", "m", torch.tensor([1.0, 3.0]))
    stats.pack()
    copy = stats.copy()
    copy.add("env/extra", torch.tensor(5.0), "sum")
    copy.add("a", torch.tensor(2.0))  # replaced in the copy only
    assert stats.to_host() == {"a": 1.0, "m": 2.0, "s": 1.0}
    assert copy.to_host() == {"m": 2.0, "s": 1.0, "a": 2.0, "env/extra": 5.0}


def test_packed_entries_of_every_dtype_come_back_as_added() -> None:
    """pack() stacks the entries a dtype at a time (a few ops for hundreds of members'
    statistics); what comes back is each entry's value, exactly, in the order added."""
    entries = {"f32": torch.tensor(0.1), "flag": torch.tensor(True), "f64": torch.tensor(1 / 3, dtype=torch.float64),
               "f32b": torch.tensor(2.5), "half": torch.tensor(0.2, dtype=torch.float16),
               "off": torch.tensor(False)}
    expected = {name: float(v.double()) for name, v in entries.items()}
    for pack in (False, True):
        stats = Stats()
        for name, v in entries.items():
            stats.add(name, v, "min" if v.dtype == torch.bool else "mean")
        if pack:
            stats.pack()
            stats.add("later", torch.tensor(7.0), "sum")
        host = stats.to_host()
        assert list(host) == list(entries) + (["later"] if pack else [])
        assert {k: host[k] for k in entries} == expected
