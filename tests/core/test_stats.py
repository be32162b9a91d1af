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
