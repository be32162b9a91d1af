"""Stop conditions."""

from __future__ import annotations

import math

from rlx.stopping import MetricPlateau


def test_plateau_stops_after_patience_reports_without_improvement() -> None:
    plateau = MetricPlateau("score", patience=3, min_delta=0.5)
    seen = [plateau(None, {"score": s}) for s in [1.0, 2.0, 2.2, 2.4, math.nan, 2.1]]
    assert seen[:5] == [None] * 5 and seen[5] is not None
    assert plateau.state_dict() == {"best": 2.0, "since_best": 3}
