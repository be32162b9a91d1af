"""Where a GPU iteration's time goes between its kernels: the idle gaps of the device and
the host's waits, over iterations run as a training loop runs them (no synchronization
added between ``collect()`` and ``step()``: only rlx's own transfers wait).

:func:`iteration_timeline` is ``gpu_check.py``'s ``profile`` part's ``iteration`` row. On
an H100 (2026-11-27) an iteration at B = 4096 (compile + graphs) took 8.8 ms of which its
kernels were busy 6.75 ms: this says where the other 2 ms fall, in a few long gaps (after
collect's transfer, before step's first kernel; after step's, before the next collect's:
the host) or in the many short ones between a graph's kernels (the device's own spacing),
and how long the host waited at each transfer, so that the next change is made on a
measurement. :func:`idle_gaps`, the arithmetic, is tested on the CPU
(``tests/test_gpu_check.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

__all__ = ["idle_gaps", "iteration_timeline"]


def idle_gaps(kernels: Sequence[tuple[float, float, str]], top: int = 6,
              at_least: float = 0.0) -> tuple[float, float, float, list[dict], dict]:
    """``(span, busy, idle, gaps, sizes)`` of ``kernels`` (``(start, end, name)`` each, any
    order, overlapping allowed, one time unit throughout): the time from the first start
    to the last end, the length of the union of the kernels' intervals, ``span - busy``;
    the ``top`` longest gaps of at least ``at_least`` when no kernel runs, longest first,
    each ``{"length", "after", "before"}`` naming the kernel that ended last before it and
    the one that starts it; and ``sizes``, the count and total of the gaps below
    ``at_least`` and of those at or above it. Many short gaps are the device's own
    spacing between dependent kernels (a graph's launches); a few long ones are the host
    (a wait, then the host's work before its next launch)."""
    sizes = {"short_count": 0, "short_total": 0.0, "long_count": 0, "long_total": 0.0}
    if not kernels:
        return 0.0, 0.0, 0.0, [], sizes
    ordered = sorted(kernels)
    busy, gaps = 0.0, []
    lo, hi, last = ordered[0][0], ordered[0][1], ordered[0][2]
    for start, end, name in ordered[1:]:
        if start > hi:  # no kernel runs from hi to start
            busy += hi - lo
            kind = "long" if start - hi >= at_least else "short"
            sizes[f"{kind}_count"] += 1
            sizes[f"{kind}_total"] += start - hi
            if kind == "long":
                gaps.append({"length": start - hi, "after": last, "before": name})
            lo, hi, last = start, end, name
        elif end > hi:
            hi, last = end, name
    busy += hi - lo
    span = hi - ordered[0][0]
    gaps.sort(key=lambda g: -g["length"])
    return span, busy, span - busy, gaps[:top], sizes


def iteration_timeline(algo, device: str, iterations: int = 3) -> dict:
    """``iterations`` of ``collect(); step()`` as a training loop runs them, twice: once
    timed on the host with each statistics transfer's wait timed (``Stats.to_host``, the
    only place rlx waits for the device: one in each call, collect's first, as PPO
    without ``sync_kl_stop`` has them), once under ``torch.profiler`` with the device's
    activity only (no host ops recorded, so the host runs at its own pace). Returns ms per
    iteration: ``wall``, ``collect_wait`` and ``step_wait`` (the host blocked at each
    transfer), ``host`` (the rest: the host's own work, during which the device idles
    once it has run out of queued work), and from the profile the kernels an iteration,
    ``gpu_span``, ``gpu_busy``, ``gpu_idle``, that idle time split between gaps under and
    over 20 us (the device's spacing between a graph's kernels, or the host), and the
    longest gaps with the kernels around them (on a CPU, no device rows)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from rlx.core.stats import Stats

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    waits: list[float] = []
    to_host = Stats.to_host

    def timed(self):
        start = time.perf_counter()
        try:
            return to_host(self)
        finally:
            waits.append(time.perf_counter() - start)

    Stats.to_host = timed
    try:
        sync()
        start = time.perf_counter()
        for _ in range(iterations):
            algo.collect()
            algo.step()
        sync()
        wall = time.perf_counter() - start
    finally:
        Stats.to_host = to_host
    per = 1e3 / iterations
    out = {"iterations": iterations, "wall_ms": round(wall * per, 3),
           "collect_wait_ms": round(sum(waits[0::2]) * per, 3), "step_wait_ms": round(sum(waits[1::2]) * per, 3)}
    out["host_ms"] = round(out["wall_ms"] - out["collect_wait_ms"] - out["step_wait_ms"], 3)
    if device != "cuda":
        return out
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations):
            algo.collect()
            algo.step()
        sync()
    kernels = [(e.time_range.start, e.time_range.end, e.name) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]  # us
    span, busy, idle, gaps, sizes = idle_gaps(kernels, top=6, at_least=20.0)
    ms = 1e-3 / iterations  # us over the iterations -> ms an iteration
    out |= {"kernels": len(kernels) // iterations, "gpu_span_ms": round(span * ms, 3),
            "gpu_busy_ms": round(busy * ms, 3), "gpu_idle_ms": round(idle * ms, 3),
            "idle_in_gaps_under_20us_ms": round(sizes["short_total"] * ms, 3),
            "gaps_under_20us": sizes["short_count"] // iterations,
            "idle_in_gaps_over_20us_ms": round(sizes["long_total"] * ms, 3),
            "gaps_over_20us": sizes["long_count"] // iterations,
            "gaps": [{"ms": round(g["length"] / 1e3, 3), "after": g["after"][:60], "before": g["before"][:60]}
                     for g in gaps]}
    return out
