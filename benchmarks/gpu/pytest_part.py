"""The suite's pytest part: the test modules that exercise CUDA, run in a subprocess and
counted by the pytest plugin at the bottom of this module."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT
from gpu.settings import Skip

#: Environment variable naming the file the pytest plugin below writes outcomes to.
REPORT_ENV = "RLX_GPU_SUITE_REPORT"


def gpu_test_modules(root: Path = ROOT) -> list[str]:
    """Test modules that exercise CUDA: those that mention it (every ``gpu``-marked test
    does), except ``tests/benchmarks/``, where this suite's own test lives."""
    tests = root / "tests"
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        if path.relative_to(tests).parts[0] == "benchmarks":
            continue
        if "cuda" in path.read_text(encoding="utf-8", errors="replace"):
            found.append(path.relative_to(root).as_posix())
    return found


def run_pytest(modules: list[str], collect_only: bool, timeout_s: float) -> dict[str, Any]:
    """pytest over ``modules`` in a subprocess (this checkout's rlx first on its path),
    counted by the plugin at the bottom of this module. Past ``timeout_s`` pytest is
    killed and the tests that finished still count (``timed_out: true``)."""
    if not modules:
        raise Skip(f"no test modules mention cuda under {ROOT / 'tests'}")
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.jsonl"
        env = dict(os.environ)
        env[REPORT_ENV] = str(report)
        # This checkout's rlx (an editable install may point elsewhere), and this module
        # as the plugin; a PYTHONPATH holding carried wheels is kept after them.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "benchmarks"), env.get("PYTHONPATH")]))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "gpu.pytest_part",
               "-m", "gpu or not slow", *modules]
        cmd += ["--collect-only"] if collect_only else []
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
            returncode, output, timed_out = proc.returncode, proc.stdout + proc.stderr, False
        except subprocess.TimeoutExpired as e:
            returncode, timed_out = None, True
            output = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr))
        seconds = time.perf_counter() - start
        lines = report.read_text().splitlines() if report.exists() else []
    events = [json.loads(line) for line in lines]
    collected = next((e for e in events if "collected" in e), None)
    if collected is None:
        if timed_out:
            raise Skip(f"time budget: pytest ran past {timeout_s:.0f} s before collecting")
        tail = output.strip().splitlines()[-5:]
        raise RuntimeError(f"pytest exited {returncode} before collecting: {' | '.join(tail)}")
    row: dict[str, Any] = {"collected": collected["collected"], "gpu_collected": collected["gpu_collected"]}
    for group, is_gpu in (("gpu", True), ("other", False)):
        for outcome in ("passed", "failed", "skipped", "error"):
            row[f"{group}_{outcome}"] = sum(1 for e in events if e.get("gpu") is is_gpu and e.get("outcome") == outcome)
    row["failures"] = [e["nodeid"] for e in events if e.get("outcome") in ("failed", "error")][:20]
    if not collect_only:  # tests that never reported: pytest was stopped first
        row["not_finished"] = max(0, row["collected"] - len({e["nodeid"] for e in events if "nodeid" in e}))
    row.update(returncode=returncode, timed_out=timed_out, seconds=seconds, modules=modules,
               command=shlex.join(["python", *cmd[1:]]))
    return row


# pytest plugin: loaded in the subprocess above with ``-p gpu.pytest_part``; inert elsewhere.


def _report(event: dict[str, Any]) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(event) + "\n")


def pytest_collection_finish(session: Any) -> None:
    """Count the collected tests, and those marked ``gpu``."""
    items = session.items
    _report({"collected": len(items), "gpu_collected": sum(item.get_closest_marker("gpu") is not None for item in items)})


def pytest_runtest_logreport(report: Any) -> None:
    """Record a test's outcome as pytest's summary counts it: the call's outcome, a
    skip at setup, or an error in setup or teardown."""
    if report.passed and report.when != "call":
        return
    outcome = "error" if report.failed and report.when != "call" else report.outcome
    _report({"nodeid": report.nodeid, "outcome": outcome, "gpu": "gpu" in report.keywords})
