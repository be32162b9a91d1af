"""``rlx train`` when other processes share the cores: thread settings side by side.

Each row trains a shipped config with ``rlx train`` (a fresh process) under one thread
setting, on an idle machine and beside a competing process, and records the training
time the command prints. Settings:

* ``torch-default``: torch's own choice (one thread per core), what rlx used before;
* ``auto``: rlx's default (``rlx.run.threads``: the cores other processes leave free,
  looked at again every 5 s);
* ``1``: one thread;
* ``passive``: torch's default with ``OMP_WAIT_POLICY=PASSIVE`` (waiting threads sleep
  instead of spinning).

Competitors: ``torch`` is a plain torch program with its default threads doing small
matmuls in a loop (a second training run or test suite of any torch library);
``same`` is a second copy of the same ``rlx train`` command, looping (two users of one
setting on one machine). Rows are interleaved, setting by setting, ``--repeats`` times;
a run that takes longer than ``--timeout-s`` is recorded as that timeout.

    python benchmarks/shared_cores.py [--configs configs/cartpole_ppo.yaml ...] [--repeats 3]

Results: ``benchmarks/results/shared_cores.jsonl`` and a markdown table of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import append_results, results_path, run_fields

ROOT = Path(__file__).resolve().parents[1]

#: setting -> (extra environment, --threads value; "cores" is torch's default count)
SETTINGS = {
    "torch-default": ({}, "cores"),
    "auto": ({}, None),
    "1": ({}, "1"),
    "passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, "cores"),
}

TORCH_HOG = """
import torch
a = torch.randn(256, 256)
while True:
    for _ in range(100):
        b = torch.tanh(a @ a)
"""


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
    env.update({k: v for k, v in extra.items() if v})
    return env


def _command(config: str, setting: str, run_dir: str) -> tuple[list[str], dict[str, str]]:
    extra, threads = SETTINGS[setting]
    flags = []
    if threads is not None:
        flags = ["--threads", str(os.cpu_count() if threads == "cores" else threads)]
    cmd = [sys.executable, "-m", "rlx", "train", config, "--run-dir", run_dir, *flags,
           "--set", "trainer.checkpoint_every=0", "--set", "trainer.tensorboard=false"]
    return cmd, _env(extra)


def _train_seconds(config: str, setting: str, timeout_s: float) -> tuple[float, float]:
    """``(training seconds as printed, wall seconds of the command)``."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd, env = _command(config, setting, str(Path(tmp) / "run"))
        start = time.perf_counter()
        try:
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return timeout_s, timeout_s
        wall = time.perf_counter() - start
        found = re.search(r"in ([0-9.]+) s of training", out.stdout)
        if out.returncode != 0 or not found:
            raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
        return float(found.group(1)), wall


def _start_competitor(kind: str, config: str, setting: str) -> subprocess.Popen | None:
    if kind == "none":
        return None
    if kind == "torch":
        cmd, env = [sys.executable, "-c", TORCH_HOG], _env({})
    else:  # the same rlx train command, over and over
        inner, env = _command(config, setting, "/tmp/rlx-shared-cores-competitor")
        loop = f"while true; do rm -rf /tmp/rlx-shared-cores-competitor; {' '.join(inner)} > /dev/null 2>&1; done"
        cmd = ["bash", "-c", loop]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(2.0)  # running before the measured command starts
    return proc


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None:
        os.killpg(proc.pid, 9)
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["configs/cartpole_ppo.yaml", "configs/pendulum_ppo.yaml"])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--competitors", nargs="+", default=["none", "torch", "same"], choices=["none", "torch", "same"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    args = parser.parse_args(argv)

    meta = {**run_fields(), "cores": os.cpu_count()}
    rows: dict[tuple[str, str, str], list[float]] = {}
    for repeat in range(args.repeats):
        for config in args.configs:
            for competitor in args.competitors:
                for setting in args.settings:
                    proc = _start_competitor(competitor, config, setting)
                    try:
                        train_s, wall_s = _train_seconds(config, setting, args.timeout_s)
                    finally:
                        _stop(proc)
                    rows.setdefault((config, competitor, setting), []).append(train_s)
                    line = {"config": config, "competitor": competitor, "setting": setting, "repeat": repeat,
                            "train_s": train_s, "wall_s": wall_s, "timed_out": train_s >= args.timeout_s}
                    append_results(results_path("shared_cores"), line, cores=meta["cores"])
                    print(json.dumps(line), flush=True)
    print(f"\n{meta['cpu']}, {meta['cores']} cores, commit {meta['commit']}: median training seconds of "
          f"{args.repeats} runs (>= {args.timeout_s:g}: timed out)\n")
    print("| config | competitor | " + " | ".join(args.settings) + " |")
    print("|---|---|" + "---|" * len(args.settings))
    for config in args.configs:
        for competitor in args.competitors:
            cells = [f"{statistics.median(rows[(config, competitor, s)]):.1f}" for s in args.settings]
            print(f"| {Path(config).stem} | {competitor} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
