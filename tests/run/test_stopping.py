"""Stop conditions."""

from __future__ import annotations

import math

from rlx.run.stopping import MetricPlateau


def test_plateau_stops_after_patience_reports_without_improvement() -> None:
    plateau = MetricPlateau("score", patience=3, min_delta=0.5)
    seen = [plateau(None, {"score": s}) for s in [1.0, 2.0, 2.2, 2.4, math.nan, 2.1]]
    assert seen[:5] == [None] * 5 and seen[5] is not None
    assert plateau.state_dict() == {"best": 2.0, "since_best": 3, "seed_best": [], "seed_since_best": []}


def test_a_plateau_stops_each_seed_on_its_own_curve_and_the_run_when_all_have() -> None:
    """3 seeds, patience 2: seed 1 stalls first and is marked done while the others go
    on; the run stops when the last seed plateaus; the counts survive a state_dict."""
    from types import SimpleNamespace

    import torch

    from rlx.members import Members

    seeds = Members(3, torch.device("cpu"))
    trainer = SimpleNamespace(algorithm=SimpleNamespace(members=seeds))
    plateau = MetricPlateau("score", patience=2)
    curves = [(1.0, 1.0, 1.0), (2.0, 0.5, 2.0), (3.0, 0.7, 2.5), (3.0, 0.9, 2.4), (2.9, 5.0, 2.4)]
    reasons = []
    for values in curves:
        metrics = {"score": sum(values) / 3, **{f"member{i}/score": v for i, v in enumerate(values)}}
        reasons.append(plateau(trainer, metrics))
        if len(reasons) == 3:
            assert seeds.done.tolist() == [False, True, False]  # seed 1: no rise for 2 reports
            restored = MetricPlateau("score", patience=2)
            restored.load_state_dict(plateau.state_dict())
            assert restored.seed_best == [3.0, 1.0, 2.5] and restored.seed_since_best == [0, 2, 0]
    assert reasons[:4] == [None] * 4 and seeds.done.tolist() == [True, True, True]
    assert "every seed is done (score plateaued for 2 iterations)" == reasons[4]
