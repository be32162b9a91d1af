"""The suite: the rows of one run, written as they come, the guard every part runs in,
and the parts in priority order."""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from common import ROOT, append_results, git_commit, git_dirty
from gpu.measure import graphed_vs_eager, rl8_side_by_side, throughput, time_to_solve, unsupported
from gpu.pytest_part import gpu_test_modules, run_pytest
from gpu.report import row_line
from gpu.settings import ALGORITHMS, COMPILE_MIN_S, DEFAULT_OUT, DRY_SIZES, ENVS, GPU_SIZES, OPTIONAL, Skip


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


class Suite:
    """The rows of one run, written as they come, and the guard every part runs in."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        self.args = args
        self.dry_run: bool = args.dry_run
        self.sizes = DRY_SIZES if self.dry_run else GPU_SIZES
        self.device = torch.device(args.device or ("cpu" if self.dry_run else "cuda"))
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self.start = time.perf_counter()
        self.budget_s: float = args.budget_s
        if self.device.type == "cuda" and not self.cuda:
            self.device_problem = "needs CUDA (torch.cuda.is_available() is False); on a CPU run --dry-run"
        else:
            self.device_problem = None
        if self.cuda:
            self.device_name = torch.cuda.get_device_name(self.device)
        else:
            from rlx.run.bench import cpu_name

            self.device_name = cpu_name()
        commit = git_commit() + ("-dirty" if git_dirty() else "")
        self.meta = {
            "device": self.device_name, "device_type": self.device.type, "commit": commit,
            "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
            "run": time.strftime("%Y-%m-%dT%H:%M:%S"), "dry_run": self.dry_run,
        }
        out = Path(args.out) if args.out else DEFAULT_OUT
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        stem = f"gpu_suite_{_slug(self.device_name)}" + ("_dry-run" if self.dry_run else "")
        self.jsonl = out / f"{stem}.jsonl"
        self.markdown = out / f"{stem}.md"
        self.rows: list[dict[str, Any]] = []

    def elapsed(self) -> float:
        """Seconds since the suite started."""
        return time.perf_counter() - self.start

    def remaining(self) -> float:
        """Seconds left of ``--budget-s`` (negative once it is spent)."""
        return self.budget_s - self.elapsed()

    def record(self, part: str, env: str, algorithm: str, mode: str, num_envs: int, **fields: Any) -> dict[str, Any]:
        """Append one row (to the file at once: a crash later keeps it) and print it."""
        row = {"part": part, **self.meta, "env": env, "algorithm": algorithm, "mode": mode, "num_envs": num_envs,
               **fields}
        self.rows.append(row)
        append_results(self.jsonl, row)
        print(row_line(row), flush=True)
        return row

    def guarded(self, part: str, env: str, algorithm: str, mode: str, num_envs: int,
                measure: Callable[[], dict[str, Any]], *, skip: str | None = None) -> dict[str, Any]:
        """Run ``measure`` and record its fields, or record why it was skipped: ``skip``,
        the device, the time budget, a :class:`Skip` or any other exception (then with
        ``error: true``)."""
        where = (part, env, algorithm, mode, num_envs)
        if skip is None and self.device_problem:
            skip = self.device_problem
        if skip is None and self.remaining() <= 0:
            skip = "time budget"
        if skip is not None:
            return self.record(*where, skipped=skip)
        start = time.perf_counter()
        try:
            fields = measure()
        except Skip as e:
            return self.record(*where, skipped=str(e))
        except Exception as e:  # noqa: BLE001 - every failure becomes a row; the run goes on
            return self.record(*where, skipped=f"{type(e).__name__}: {str(e).strip()[:300]}", error=True)
        finally:
            self._free()
        return self.record(*where, wall_s=time.perf_counter() - start, **fields)

    def _free(self) -> None:
        """Drop the finished part's algorithms before the next one (an OOM leaves a lot)."""
        gc.collect()
        if self.cuda:
            import torch

            torch.cuda.empty_cache()

    # -- parts -----------------------------------------------------------------------------

    def preflight(self) -> None:
        """Versions, the device, where rlx comes from and the missing packages: printed and one row."""
        import torch

        packages: dict[str, str | None] = {}
        for name in OPTIONAL:
            if importlib.util.find_spec(name) is None:
                packages[name] = None
                continue
            try:
                packages[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                packages[name] = "?"
        missing = [name for name, version in packages.items() if version is None]
        rlx_spec = importlib.util.find_spec("rlx")
        rlx_path = str(Path(rlx_spec.origin).parent) if rlx_spec and rlx_spec.origin else "?"
        fields: dict[str, Any] = {
            "python": platform.python_version(), "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "cuda_available": torch.cuda.is_available(), "gpus": torch.cuda.device_count(),
            "packages": packages, "missing": missing, "rlx_path": rlx_path,
            "rlx_is_this_checkout": rlx_path == str(ROOT / "rlx"), "budget_s": self.budget_s,
            "threads": torch.get_num_threads(), "cpu": _cpu(),
        }
        if self.cuda:
            props = torch.cuda.get_device_properties(self.device)
            fields.update(capability=f"{props.major}.{props.minor}", memory_gb=round(props.total_memory / 2**30, 1))
        print(f"rlx GPU suite{' (dry run)' if self.dry_run else ''}: torch {torch.__version__}, CUDA {torch.version.cuda}, "
              f"device {self.device} = {self.device_name}, commit {self.meta['commit']}, budget {self.budget_s:.0f} s")
        for name in missing:
            print(f"  missing: {name} ({OPTIONAL[name]})")
        if not fields["rlx_is_this_checkout"]:
            print(f"  warning: rlx is imported from {rlx_path}, not from this checkout ({ROOT}): set PYTHONPATH={ROOT}")
        if self.device_problem:
            print(f"  warning: {self.device} {self.device_problem}")
        self.record("preflight", "-", "-", "preflight", 0, **fields)

    def gpu_tests(self) -> None:
        """The GPU test modules in a pytest subprocess (collect only in a dry run)."""
        mode = "collect-only" if self.dry_run else "run"
        timeout_s = max(1.0, min(self.args.tests_timeout_s, self.remaining()))
        self.guarded("gpu_tests", "-", "-", mode, 0, lambda: run_pytest(gpu_test_modules(), self.dry_run, timeout_s))

    def check(self) -> None:
        """The graphed collect against the eager one (CUDA only)."""
        s = self.sizes
        skip = None if self.cuda or self.device_problem else "needs CUDA"
        self.guarded("graphed_vs_eager", "CartPole", "ppo", "cudagraphs_vs_eager", s.check_num_envs,
                     lambda: graphed_vs_eager("CartPole", s.check_num_envs, s.check_horizon, str(self.device),
                                              s.check_rounds), skip=skip)

    def throughput(self, modes: tuple[str, ...]) -> None:
        """The throughput grid for ``modes``: every env, algorithm and B, a row each."""
        for env in ENVS:
            for algorithm in ALGORITHMS:
                for mode in modes:
                    reason = self._mode_skip(algorithm, mode)
                    for b in self.sizes.num_envs:
                        self.guarded("throughput", env, algorithm, mode, b,
                                     lambda: throughput(env, algorithm, mode, b, self.sizes, str(self.device)),
                                     skip=reason)

    def _mode_skip(self, algorithm: str, mode: str) -> str | None:
        try:
            reason = unsupported(algorithm, mode)
        except Exception as e:  # noqa: BLE001 - rlx itself failed to import: every point will say so
            return f"{type(e).__name__}: {e}"
        if reason is not None:
            return reason
        if mode == "compile" and self.dry_run:
            return "compile is skipped in a dry run (compiling takes minutes on a CPU)"
        if mode != "eager" and not self.cuda and not self.device_problem:
            return "needs CUDA"
        if mode == "compile" and 0 < self.remaining() < COMPILE_MIN_S:
            return f"time budget: {self.remaining():.0f} s left, compiling needs about {COMPILE_MIN_S:.0f} s"
        return None

    def solve(self) -> None:
        """Time to solve each env: PPO eager and graphed, NPG."""
        s = self.sizes
        for env in ENVS:
            for algorithm, mode in (("ppo", "eager"), ("ppo", "cudagraphs"), ("npg", "eager")):
                skip = "needs CUDA" if mode == "cudagraphs" and not self.cuda and not self.device_problem else None
                self.guarded("solve", env, algorithm, mode, s.solve_num_envs,
                             lambda: time_to_solve(env, algorithm, mode, s.solve_num_envs, s.horizon, str(self.device),
                                                   max(0.0, min(self.args.solve_budget_s, self.remaining())),
                                                   s.solve_max_env_steps), skip=skip)

    def rl8(self) -> None:
        """rl8 side by side, or a row saying how to install it."""
        skip = None
        if importlib.util.find_spec("rl8") is None:
            skip = "rl8 is not installed: pip install 'rlx[bench]' (rl8 1.0.0) for the side by side"
        for b in self.sizes.rl8_num_envs:
            self.guarded("rl8", "DiscreteDummyEnv", "ppo", "rlx_vs_rl8", b,
                         lambda: rl8_side_by_side(b, self.sizes.horizon, str(self.device), self.sizes.rl8_iters),
                         skip=skip)

    def vs_jax(self) -> None:
        """benchmarks/vs_jax.py on this device: rlx against the whole-program JAX PPO, each
        setting a row (or one skip row naming what is missing)."""
        skip = None
        if importlib.util.find_spec("jax") is None:
            skip = "jax is not installed: pip install 'rlx[jax]' (jax, flax, optax) for the side by side"
        elif self.dry_run:
            skip = "vs_jax is skipped in a dry run (compiling takes minutes on a CPU)"
        elif not self.cuda and not self.device_problem:
            skip = "needs CUDA (on a CPU: python benchmarks/vs_jax.py)"

        def measure() -> dict[str, Any]:
            out = self.out / f"vs_jax_{_slug(self.device_name)}.jsonl"
            before = out.read_text().count("\n") if out.exists() else 0
            cmd = [sys.executable, str(ROOT / "benchmarks" / "vs_jax.py"), "--device", str(self.device),
                   "--num-envs", "4096", "65536", "262144", "--minibatches", "4", "64",
                   "--modes", "cudagraphs", "compile+cudagraphs", "--rounds", "2", "--out", str(out)]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(1.0, self.remaining()))
            rows = [json.loads(line) for line in out.read_text().splitlines()[before:]] if out.exists() else []
            return {"returncode": proc.returncode, "rows": rows, "tail": proc.stdout[-2000:] + proc.stderr[-1000:],
                    "command": " ".join(cmd)}

        self.guarded("vs_jax", "CartPole", "ppo", "rlx_vs_jax", 0, measure, skip=skip)

    def run(self) -> None:
        """Every part, in priority order (see the docstring of benchmarks/gpu_suite.py)."""
        self.preflight()
        self.gpu_tests()
        self.check()
        self.throughput(("eager", "cudagraphs"))
        self.solve()
        self.rl8()
        self.vs_jax()
        self.throughput(("compile",))


def _cpu() -> str:
    from rlx.run.bench import cpu_name

    return cpu_name()
