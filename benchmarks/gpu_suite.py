"""One command for a session with a GPU: rlx's GPU tests, throughput, graphed-collect check and time to solve.

    python benchmarks/gpu_suite.py [--budget-s 450] [--device cuda] [--out benchmarks/results]
    python benchmarks/gpu_suite.py --dry-run [--out DIR]    # every part at tiny sizes on the CPU
    rlx bench --suite gpu [ARGS]                            # the same command

It needs no network and starts no measurement after ``--budget-s`` (default 450 s);
by the timings of earlier H100 runs every part fits in that (not yet measured: the suite
has only dry-run on a CPU). The parts run in this order, which is also their priority
when the time runs out:

1. ``preflight``: Python, torch, CUDA and cuDNN versions, the device's name, capability
   and memory, which rlx is imported (it should be this checkout's), and which packages
   are missing: tensordict and torchrl (rlx cannot run without them), gymnasium (its
   parity tests are then not collected), rl8 (no side-by-side part) and matplotlib.
2. ``gpu_tests``: pytest in a subprocess over every test module that mentions CUDA
   (``tests/test_gpu.py``, the ``gpu``-marked tests in ``tests/envs/test_episodic.py``,
   ``tests/test_gae.py``, ... and the rest of those modules), ``-m "gpu or not slow"``.
   A small plugin (this module, loaded with ``-p gpu_suite``) counts passed, failed,
   skipped and errors for the ``gpu``-marked tests and for the others separately.
   pytest is stopped after ``--tests-timeout-s`` (default 240); finished tests count.
3. ``graphed_vs_eager``: two PPOs with the same seed, ``cudagraphs=True`` and ``False``;
   the graphed one collects 3 times per mode to warm up and capture, then for several
   rounds both collect from the same ``state_dict()`` (env state, last observation,
   RNG states, parameters) and ``obs``, ``actions``, ``logp``, ``values``,
   ``rewards``, ``terminated`` and ``truncated`` must agree to the bit
   (``torch.equal``), sampling and deterministic. The eager PPO updates between rounds,
   so the graph must read the live parameters.
4. ``throughput``: :func:`rlx.bench.bench_one` (medians of ``collect()`` and ``step()``
   after warm-up, CUDA synchronised) for CartPole and Pendulum at B = 4096, 16384 and
   65536, T = 32, a 64x64 tanh MLP: PPO eager and ``cudagraphs=True`` with minibatches
   of at most 32768 samples (``ppo``) and with four minibatches an epoch (``ppo_4mb``,
   rsl_rl's default for GPU envs), NPG and recurrent PPO (an LSTM of 64 after a 64
   encoder) eager. The modes an algorithm's
   config rejects are skip rows whose reason is the config's own error.
5. ``solve``: wall-clock and env steps until CartPole's mean episode length reaches 475
   and Pendulum's mean return -250 (as ``benchmarks/time_to_solve.py``: judged on the
   episodes that ended in a rollout before training on it; build excluded), at B = 4096,
   T = 32: PPO eager, PPO graphed and NPG, each within ``--solve-budget-s`` seconds and
   50M env steps.
6. ``rl8``: rl8 1.0.0's PPO against rlx's on the same GPU, on rl8's ``DiscreteDummyEnv``
   with rl8's defaults (256x256 ReLU, whole-buffer minibatch, 4 epochs), as
   ``benchmarks/compare_rl8.py``, at B = 4096 and 65536, interleaved; a skip row naming
   ``pip install 'rlx[bench]'`` when rl8 is not installed.
7. ``throughput`` with ``compile=True`` (PPO): last, because compiling costs tens of
   seconds per point; a point starts only with a minute of budget left.

Every part runs inside a guard: an exception becomes a row with ``skipped`` (its type
and message) and ``error: true``, and the run goes on. Once ``--budget-s`` has passed,
the remaining measurements are rows skipped with reason "time budget" (a measurement
that has started is not cut short).

Results: one JSON line per measurement, appended to
``<out>/gpu_suite_<device>.jsonl`` (``<device>`` is the device's name in lower case,
e.g. ``nvidia-h100-80gb-hbm3``; ``_dry-run`` is added in a dry run), each with
``part``, ``device``, ``env``, ``algorithm``, ``mode``, ``num_envs``, the commit,
torch version and date, and either its measurements (``collect_steps_per_s``,
``update_samples_per_s``, ``end_to_end_steps_per_s``, ``step_ms``, ...) or
``skipped``. A markdown report of this run goes beside it (``gpu_suite_<device>.md``),
and a short summary is printed, with the issue's goals where their rows exist: CartPole
PPO end to end at B=65536 against 50M env steps/s and at B=4096 against 10M (H100), the
graphed collect's speedup over the eager one, and NPG's step time against PPO's at
B=65536.

``--dry-run`` runs every part on the CPU at tiny sizes (B = 64 and 128, T = 8, one
warm-up and one timed iteration; solving for at most 2 collects, which need not reach
the goal), runs pytest with ``--collect-only``, and skips the graphed modes and check
("needs CUDA") and compile (too slow for a dry run). ``tests/benchmarks/test_gpu_suite.py``
runs it.

On the GPU machine (torch is there; tensordict 0.14.3 and torchrl 0.14.1 may not be,
and nothing can be downloaded): carry their cp312 wheels in ``.whl/``, then, from the
repository root::

    pip install --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    python benchmarks/gpu_suite.py

The results land in ``benchmarks/results/gpu_suite_<device>.{jsonl,md}``; bring both
back. Timings on the lent machines vary between runs by a few percent on the GPU side
and more where the CPU launches the kernels (eager PPO at small B): compare ratios
measured in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results"

ENVS = ("CartPole", "Pendulum")
#: ``ppo`` takes minibatches of at most 32768 samples (256 optimizer steps an update at
#: B=65536); ``ppo_4mb`` four minibatches an epoch, rsl_rl's default for GPU envs.
ALGORITHMS = ("ppo", "ppo_4mb", "npg", "recurrent_ppo")
HIDDENS = [64, 64]
#: The collect stat each env is solved on, and its threshold (as ``time_to_solve.py``).
GOALS = {"CartPole": ("episodes/length_mean", 475.0), "Pendulum": ("episodes/return_mean", -250.0)}
#: The issue's targets for CartPole PPO end to end on an H100: env steps/s by B.
END_TO_END_GOALS = {65536: 50e6, 4096: 10e6}
#: Buffer keys the graphed collect must reproduce to the bit.
CHECKED_KEYS = ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated")
#: Keys every row carries, whatever its part.
ROW_KEYS = ("part", "device", "env", "algorithm", "mode", "num_envs")
#: A compile point starts only with this much budget left: compiling alone takes tens of seconds.
COMPILE_MIN_S = 60.0
#: Optional packages, by import name: why the suite wants each.
OPTIONAL = {
    "tensordict": "required by rlx (carry its wheel: see the module docstring)",
    "torchrl": "required by rlx (carry its wheel: see the module docstring)",
    "gymnasium": "its parity tests are not collected without it",
    "rl8": "the side-by-side part (pip install 'rlx[bench]')",
    "matplotlib": "rlx plot and its tests",
}
#: Environment variable naming the file the pytest plugin below writes outcomes to.
REPORT_ENV = "RLX_GPU_SUITE_REPORT"


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How large each part runs: the GPU sizes, or the dry run's tiny ones."""

    #: Throughput batch sizes B.
    num_envs: tuple[int, ...]
    #: T, env steps per collect, for throughput and solving.
    horizon: int
    #: Untimed iterations before the timed ones (graphed PPO: at least 3, see ``bench_one``).
    warmup: int
    #: Timed iterations per throughput point; the rows report medians.
    iters: int
    #: B and T of the graphed-vs-eager check, and its rounds per collect mode.
    check_num_envs: int
    check_horizon: int
    check_rounds: int
    #: B of the solve runs, and the env-step budget of each.
    solve_num_envs: int
    solve_max_env_steps: int
    #: B of the rl8 side by side, and its timed iterations per library.
    rl8_num_envs: tuple[int, ...]
    rl8_iters: int


GPU_SIZES = Sizes(
    num_envs=(4096, 16384, 65536), horizon=32, warmup=2, iters=3, check_num_envs=4096, check_horizon=32,
    check_rounds=3, solve_num_envs=4096, solve_max_env_steps=50_000_000, rl8_num_envs=(4096, 65536), rl8_iters=3,
)
DRY_SIZES = Sizes(
    num_envs=(64, 128), horizon=8, warmup=1, iters=1, check_num_envs=64, check_horizon=8, check_rounds=2,
    solve_num_envs=64, solve_max_env_steps=2 * 64 * 8, rl8_num_envs=(64,), rl8_iters=1,
)


class Skip(Exception):
    """Raised inside a part to record it as skipped with this reason (not an error)."""


# -- measurements ------------------------------------------------------------------------


def unsupported(algorithm: str, mode: str) -> str | None:
    """Why ``algorithm``'s config rejects ``mode`` (``cudagraphs`` or ``compile``), or ``None``.

    The reason is the config's own error, so the rows follow what rlx supports.
    """
    if mode == "eager":
        return None
    from rlx import AlgorithmConfig, ConfigError, NPGConfig, RecurrentAlgorithmConfig

    config_cls = {"ppo": AlgorithmConfig, "ppo_4mb": AlgorithmConfig, "npg": NPGConfig,
                  "recurrent_ppo": RecurrentAlgorithmConfig}[algorithm]
    try:  # the config alone, on the CPU: support does not depend on the device here
        config_cls(num_envs=8, horizon=8, device="cpu", **{mode: True})
    except ConfigError as e:
        # The first clause: NPGConfig's unknown-field error goes on to list every field.
        return f"{type(e).__name__}: {str(e).splitlines()[0].split('; ')[0][:200]}"
    return None


def throughput(env: str, algorithm: str, mode: str, num_envs: int, sizes: Sizes, device: str) -> dict[str, Any]:
    """Collect, update and end-to-end throughput of one grid point (see :func:`rlx.bench.bench_one`)."""
    from rlx.bench import bench_one

    row = bench_one(
        env, algorithm, num_envs, sizes.horizon, device, HIDDENS, False, sizes.iters, sizes.warmup,
        cudagraphs=mode == "cudagraphs", compile=mode == "compile",
    )
    keep = ("horizon", "hiddens", "warmup", "collect_steps_per_s", "update_samples_per_s", "end_to_end_steps_per_s",
            "collect_ms", "step_ms", "peak_memory_mb")
    return {"iters": sizes.iters, **{k: row[k] for k in keep}}


def _rollout(algo: Any) -> dict[str, Any]:
    return {key: algo.buffer.get(key).clone() for key in CHECKED_KEYS}


def graphed_vs_eager(env: str, num_envs: int, horizon: int, device: str, rounds: int,
                     cudagraphs: bool = True) -> dict[str, Any]:
    """Compare a CUDA-graphed PPO's collect with an eager one's, bit for bit, from the same states.

    Both are built with the same seed. The graphed one first collects
    ``GRAPH_WARMUPS + 1`` times per mode (sampling, deterministic): its eager
    warm-ups, then the capture. Then, ``rounds`` times per mode, the eager PPO's
    ``state_dict()`` is taken, the eager PPO collects, the graphed one loads that state
    and collects, and the :data:`CHECKED_KEYS` of the two buffers are compared with
    ``torch.equal``; the eager PPO then updates, so the next round starts from new
    parameters that the graph must read in place.

    Args:
        env: A built-in env name.
        num_envs: B.
        horizon: T.
        device: Where both run (``cudagraphs`` needs CUDA).
        rounds: Compared collects per mode.
        cudagraphs: ``False`` compares two eager PPOs: the harness's own check.

    Returns:
        ``equal`` (every round of both modes), ``equal_sampling``,
        ``equal_deterministic``, ``mismatched`` (``"mode:key"`` strings), ``rounds``
        and ``horizon``.
    """
    import torch

    import rlx.envs
    from rlx import AlgorithmConfig
    from rlx.cuda_graphs import GRAPH_WARMUPS

    env_cls = getattr(rlx.envs, env)

    def build(graphed: bool) -> Any:
        return AlgorithmConfig(
            num_envs=num_envs, horizon=horizon, device=device, seed=0, cudagraphs=graphed,
            sgd_minibatch_size=num_envs * horizon // 4, model_config={"hiddens": HIDDENS, "activation_fn": "tanh"},
        ).build(env_cls)

    eager, graphed = build(False), build(cudagraphs)
    for deterministic in (False, True):
        for _ in range(GRAPH_WARMUPS + 1):
            graphed.collect(deterministic=deterministic)
    # The states below come after a collect: loading one with no collects behind it
    # would reset the envs (a fresh start) instead of continuing the rollout.
    eager.collect()
    equal: dict[str, bool] = {}
    mismatched: list[str] = []
    for deterministic in (False, True):
        mode = "deterministic" if deterministic else "sampling"
        equal[mode] = True
        for _ in range(rounds):
            state = eager.state_dict()
            eager.collect(deterministic=deterministic)
            # A loaded optimizer keeps the graphed PPO's own (capturable) kernel flags.
            graphed.load_state_dict(state)
            graphed.collect(deterministic=deterministic)
            a, b = _rollout(eager), _rollout(graphed)
            for key in CHECKED_KEYS:
                if not torch.equal(a[key], b[key]):
                    equal[mode] = False
                    if f"{mode}:{key}" not in mismatched:
                        mismatched.append(f"{mode}:{key}")
            eager.step()
    return {
        "equal": all(equal.values()), "equal_sampling": equal["sampling"],
        "equal_deterministic": equal["deterministic"], "mismatched": mismatched, "keys": list(CHECKED_KEYS),
        "rounds": rounds, "horizon": horizon, "graph_warmups": GRAPH_WARMUPS,
        # Whether the graphed PPO's collects were replays of captured graphs, per mode.
        "replayed": {("deterministic" if mode else "sampling"): graph.captured for mode, graph in graphed.rollout.graphs.items()},
    }


def solve_config(env: str, algorithm: str, mode: str, num_envs: int, horizon: int, device: str) -> Any:
    """A GPU-sized config (B envs, T steps) that solves ``env``.

    The shipped configs' discount, GAE, gradient clipping, reward scaling and NPG trust
    region (``configs/{cartpole,pendulum}_{ppo,npg}.yaml``), with minibatches of N/8
    samples (N = B·T): one collect feeds 32 (CartPole, 4 epochs) or 80 (Pendulum, 10
    epochs) PPO gradient steps at lr 1e-3. At B=4096, T=32 on a CPU (seed 0) PPO
    solved CartPole in 48 collects (6.3M env steps) and Pendulum in 19 (2.5M), NPG
    CartPole in 19 (2.5M) and Pendulum in 57 (7.5M). Pendulum's episodes (200 steps) start together and end
    together, so its goal is judged every 6 or 7 collects at T=32.
    """
    from rlx import AlgorithmConfig, NPGConfig

    n = num_envs * horizon
    common: dict[str, Any] = dict(
        num_envs=num_envs, horizon=horizon, device=device, seed=0, gae_lambda=0.95,
        model_config={"hiddens": HIDDENS, "activation_fn": "tanh"}, max_grad_norm=0.5,
    )
    if env == "CartPole":
        common.update(gamma=0.99, normalize_rewards=False)
    else:  # Pendulum: the shipped configs' short discount and reward scaling
        common.update(gamma=0.9, normalize_rewards=True)
    if algorithm == "npg":
        return NPGConfig(**common, max_kl=0.02, critic_minibatch_size=max(1, n // 8),
                         optimizer_config={"lr": 3e-3 if env == "CartPole" else 1e-3})
    return AlgorithmConfig(
        **common, num_sgd_iters=4 if env == "CartPole" else 10, sgd_minibatch_size=max(1, n // 8),
        optimizer_config={"lr": 1e-3}, vf_clip_param=None, cudagraphs=mode == "cudagraphs",
    )


def time_to_solve(env: str, algorithm: str, mode: str, num_envs: int, horizon: int, device: str,
                  budget_s: float, max_env_steps: int) -> dict[str, Any]:
    """Train :func:`solve_config` until its goal (:data:`GOALS`), ``budget_s`` seconds or
    ``max_env_steps``; the clock covers ``collect()`` and ``step()`` only.

    Args:
        env: ``CartPole`` or ``Pendulum``.
        algorithm: ``ppo`` or ``npg``.
        mode: ``eager`` or ``cudagraphs`` (PPO on CUDA).
        num_envs: B.
        horizon: T.
        device: Where it trains.
        budget_s: Seconds of training before giving up.
        max_env_steps: Env steps before giving up.

    Returns:
        ``solved``, ``seconds`` (to the goal, or all spent), ``env_steps``, ``iterations``,
        ``best`` (the best value of the goal's stat, NaN when no episode ended),
        ``metric``, ``goal``, ``budget_s`` and ``max_env_steps``.
    """
    import rlx.envs

    key, goal = GOALS[env]
    algo = solve_config(env, algorithm, mode, num_envs, horizon, device).build(getattr(rlx.envs, env))
    best = -math.inf
    solved = False
    iterations = 0
    start = time.perf_counter()
    while time.perf_counter() - start < budget_s and algo.env_steps < max_env_steps:
        value = algo.collect()[key]  # judged on the rollout before training on it
        iterations += 1
        if not math.isnan(value):
            best = max(best, value)
            if value >= goal:
                solved = True
                break
        algo.step()
    return {
        "solved": solved, "seconds": time.perf_counter() - start, "env_steps": int(algo.env_steps),
        "iterations": iterations, "best": best if best > -math.inf else math.nan, "metric": key, "goal": goal,
        "horizon": horizon, "budget_s": budget_s, "max_env_steps": max_env_steps,
    }


def rl8_side_by_side(num_envs: int, horizon: int, device: str, iters: int) -> dict[str, Any]:
    """rl8's PPO against rlx's on rl8's ``DiscreteDummyEnv``, interleaved, as
    ``benchmarks/compare_rl8.py``: rl8's defaults on both sides (256x256 ReLU, whole
    buffer as one minibatch, 4 epochs, envs reset every collect). rlx runs eager and, on
    CUDA, with ``cudagraphs=True`` too. Ratios above 1: rlx is faster."""
    import torch

    import rl8
    from rl8.env import DiscreteDummyEnv
    from rlx import AlgorithmConfig
    from rlx.cuda_graphs import GRAPH_WARMUPS
    from rlx.bench import _sync

    dev = torch.device(device)
    libs: dict[str, Any] = {"rl8": rl8.AlgorithmConfig(num_envs=num_envs, horizon=horizon, device=device).build(DiscreteDummyEnv)}
    modes = ["eager"] + (["cudagraphs"] if dev.type == "cuda" else [])
    for mode in modes:
        libs[f"rlx_{mode}"] = AlgorithmConfig(
            num_envs=num_envs, horizon=horizon, device=device, seed=0, horizons_per_env_reset=1,
            model_config={"hiddens": [256, 256], "activation_fn": "relu"}, cudagraphs=mode == "cudagraphs",
        ).build(DiscreteDummyEnv)
    # Graphed rlx times replays only; rl8 and eager rlx get the same warm-ups.
    warmup = GRAPH_WARMUPS + 1 if dev.type == "cuda" else 1
    times: dict[str, list[float]] = {name: [] for name in libs}
    for i in range(warmup + iters):
        for name, algo in libs.items():  # interleaved: a slow spell hits every library
            _sync(dev)
            start = time.perf_counter()
            algo.collect()
            algo.step()
            _sync(dev)
            if i >= warmup:
                times[name].append(time.perf_counter() - start)
    n = num_envs * horizon
    row: dict[str, Any] = {"rl8_version": getattr(rl8, "__version__", "?"), "horizon": horizon, "iters": iters}
    for name in libs:
        row[f"{name}_end_to_end_steps_per_s"] = n / statistics.median(times[name])
    for mode in modes:
        row[f"ratio_{mode}"] = row[f"rlx_{mode}_end_to_end_steps_per_s"] / row["rl8_end_to_end_steps_per_s"]
    if dev.type != "cuda":
        row["cudagraphs"] = "needs CUDA"
    return row


# -- the pytest part ---------------------------------------------------------------------


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
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "gpu_suite",
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


# pytest plugin: loaded in the subprocess above with ``-p gpu_suite``; inert elsewhere.


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


# -- the suite ---------------------------------------------------------------------------


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


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
            from rlx.bench import cpu_name

            self.device_name = cpu_name()
        commit = _git("rev-parse", "--short", "HEAD") or "unknown"
        if _git("status", "--porcelain", "--untracked-files=no"):
            commit += "-dirty"
        self.meta = {
            "device": self.device_name, "device_type": self.device.type, "commit": commit,
            "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
            "run": time.strftime("%Y-%m-%dT%H:%M:%S"), "dry_run": self.dry_run,
        }
        out = Path(args.out) if args.out else DEFAULT_OUT
        out.mkdir(parents=True, exist_ok=True)
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
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        print(_row_line(row), flush=True)
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

    def run(self) -> None:
        """Every part, in priority order (see the module docstring)."""
        self.preflight()
        self.gpu_tests()
        self.check()
        self.throughput(("eager", "cudagraphs"))
        self.solve()
        self.rl8()
        self.throughput(("compile",))


def _cpu() -> str:
    from rlx.bench import cpu_name

    return cpu_name()


# -- reporting ---------------------------------------------------------------------------


def _si(x: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.2f}{suffix}"
    return f"{x:.0f}"


def _row_line(row: dict[str, Any]) -> str:
    head = f"[{row['part']}] {row['env']} {row['algorithm']} {row['mode']} B={row['num_envs']}"
    if "skipped" in row:
        return f"{head}: {'ERROR' if row.get('error') else 'skipped'}: {row['skipped']}"
    if row["part"] == "throughput":
        return (f"{head}: collect {_si(row['collect_steps_per_s'])}/s, update {_si(row['update_samples_per_s'])}/s, "
                f"end to end {_si(row['end_to_end_steps_per_s'])}/s, step {row['step_ms']:.1f} ms")
    if row["part"] == "solve":
        return (f"{head}: {'solved' if row['solved'] else 'not solved'} in {row['seconds']:.1f} s, "
                f"{row['env_steps']:,} env steps (best {row['best']:.1f})")
    if row["part"] == "graphed_vs_eager":
        return f"{head}: equal {row['equal']} (sampling {row['equal_sampling']}, deterministic {row['equal_deterministic']})"
    if row["part"] == "gpu_tests":
        return f"{head}: {_tests_line(row)}"
    if row["part"] == "rl8":
        return f"{head}: rlx/rl8 end to end " + ", ".join(f"{k[6:]} {v:.2f}x" for k, v in row.items() if k.startswith("ratio_"))
    return f"{head}: ok"


def _tests_line(row: dict[str, Any]) -> str:
    if row["mode"] == "collect-only":
        return f"collected {row['collected']} tests ({row['gpu_collected']} gpu-marked) in {len(row['modules'])} modules"
    line = (f"gpu-marked {row['gpu_passed']} passed, {row['gpu_failed']} failed, {row['gpu_skipped']} skipped, "
            f"{row['gpu_error']} errors; others {row['other_passed']} passed, {row['other_failed']} failed, "
            f"{row['other_skipped']} skipped, {row['other_error']} errors ({row['seconds']:.0f} s")
    line += f", stopped at the time limit with {row['not_finished']} not finished)" if row["timed_out"] else ")"
    if row["failures"]:
        line += "; failed: " + " ".join(row["failures"][:3]) + (" ..." if len(row["failures"]) > 3 else "")
    return line


def _find(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    for row in rows:
        if "skipped" not in row and all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def goal_lines(rows: list[dict[str, Any]], sizes: Sizes, dry_run: bool) -> list[str]:
    """The issue's comparisons, for the rows that exist: CartPole PPO end to end against
    :data:`END_TO_END_GOALS`, the graphed collect's speedup over eager, NPG's step time
    over PPO's at the largest B. In a dry run the smallest and largest B stand in for
    4096 and 65536 (the ratios then mean nothing)."""
    large, small = sizes.num_envs[-1], sizes.num_envs[0]
    stand_in = {65536: large, 4096: small}
    lines = []
    if dry_run:
        lines.append(f"(dry run: B={large} stands in for 65536 and B={small} for 4096; the ratios mean nothing)")
    for goal_b, goal in END_TO_END_GOALS.items():
        b = stand_in[goal_b]
        for algorithm in ("ppo", "ppo_4mb"):
            found = [r for r in (_find(rows, part="throughput", env="CartPole", algorithm=algorithm, mode=m, num_envs=b)
                                 for m in ("eager", "cudagraphs", "compile")) if r]
            if not found:
                lines.append(f"CartPole {algorithm} end to end at B={b}: no measured rows")
                continue
            best = max(found, key=lambda r: r["end_to_end_steps_per_s"])
            each = ", ".join(f"{r['mode']} {_si(r['end_to_end_steps_per_s'])}/s" for r in found)
            lines.append(f"CartPole {algorithm} end to end at B={b}: {each}; best "
                         f"{best['end_to_end_steps_per_s'] / goal:.3g}x the {_si(goal)}/s goal")
    for env in ENVS:
        parts = []
        for b in sizes.num_envs:
            eager = _find(rows, part="throughput", env=env, algorithm="ppo", mode="eager", num_envs=b)
            graphed = _find(rows, part="throughput", env=env, algorithm="ppo", mode="cudagraphs", num_envs=b)
            if eager and graphed:
                parts.append(f"B={b} {graphed['collect_steps_per_s'] / eager['collect_steps_per_s']:.2f}x "
                             f"(end to end {graphed['end_to_end_steps_per_s'] / eager['end_to_end_steps_per_s']:.2f}x)")
        lines.append(f"{env} graphed collect / eager: " + ("; ".join(parts) if parts else "no graphed rows"))
    for env in ENVS:
        npg = _find(rows, part="throughput", env=env, algorithm="npg", mode="eager", num_envs=large)
        ppos = [r for r in (_find(rows, part="throughput", env=env, algorithm="ppo", mode=m, num_envs=large)
                            for m in ("eager", "cudagraphs")) if r]
        if npg and ppos:
            each = ", ".join(f"{npg['step_ms'] / p['step_ms']:.2f}x PPO {p['mode']} ({p['step_ms']:.1f} ms)" for p in ppos)
            lines.append(f"{env} NPG step at B={large}: {npg['step_ms']:.1f} ms = {each}")
        else:
            lines.append(f"{env} NPG step / PPO step at B={large}: no measured rows")
    return lines


def summary_lines(suite: Suite) -> list[str]:
    """What the run printed last: row counts, tests, the check, solve times and the goals."""
    rows = suite.rows
    errors = sum(1 for r in rows if r.get("error"))
    skipped = sum(1 for r in rows if "skipped" in r) - errors
    lines = [f"{len(rows)} rows: {len(rows) - skipped - errors} measured, {skipped} skipped, {errors} errors, "
             f"in {suite.elapsed():.0f} s of a {suite.budget_s:.0f} s budget"]
    tests = next((r for r in rows if r["part"] == "gpu_tests"), None)
    if tests is not None:
        lines.append("gpu tests: " + (f"skipped: {tests['skipped']}" if "skipped" in tests else _tests_line(tests)))
    check = next((r for r in rows if r["part"] == "graphed_vs_eager"), None)
    if check is not None:
        lines.append("graphed collect == eager: " + (
            f"skipped: {check['skipped']}" if "skipped" in check else
            f"{check['equal']} (sampling {check['equal_sampling']}, deterministic {check['equal_deterministic']}"
            f"{', mismatched ' + ' '.join(check['mismatched']) if check['mismatched'] else ''})"))
    solves = [r for r in rows if r["part"] == "solve" and "skipped" not in r]
    if solves:
        lines.append("solve: " + "; ".join(
            f"{r['env']} {r['algorithm']} {r['mode']} "
            + (f"{r['seconds']:.1f} s, {r['env_steps']:,} steps" if r["solved"]
               else f"not solved ({r['env_steps']:,} steps, best {r['best']:.1f})")
            for r in solves))
    lines += goal_lines(rows, suite.sizes, suite.dry_run)
    return lines


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value).replace("|", "/")


def markdown(suite: Suite, argv: list[str]) -> str:
    """This run's report: summary, then one table per part, then the skipped rows."""
    rows, m = suite.rows, suite.meta
    s = suite.sizes
    pre = next((r for r in rows if r["part"] == "preflight"), {})
    out = [
        f"# rlx GPU suite on {m['device']} ({suite.device}){' — dry run' if suite.dry_run else ''}",
        "",
        f"{m['date']}, commit {m['commit']}, torch {m['torch']}, CUDA {pre.get('cuda')}, "
        f"Python {pre.get('python')}; {suite.elapsed():.0f} s of a {suite.budget_s:.0f} s budget.",
        f"Command: `{' '.join(['python benchmarks/gpu_suite.py', *argv])}`",
        "",
        "## Summary",
        "",
        *[f"- {line}" for line in summary_lines(suite)],
        "",
    ]
    if pre:
        out += ["## Preflight", "", "| item | value |", "|---|---|"]
        for key in ("python", "cuda", "cudnn", "cuda_available", "gpus", "capability", "memory_gb", "threads", "cpu",
                    "rlx_path", "rlx_is_this_checkout"):
            if key in pre:
                out.append(f"| {key} | {_cell(pre[key])} |")
        packages = ", ".join(f"{name} {version or 'MISSING'}" for name, version in pre["packages"].items())
        out.append(f"| packages | {packages} |")
        out.append("")
    done = [r for r in rows if "skipped" not in r]
    tests = [r for r in done if r["part"] == "gpu_tests"]
    if tests:
        out += ["## GPU tests", ""] + [f"- {_tests_line(r)}; `{r['command']}` exited {r['returncode']}" for r in tests]
        out += [f"- failed: `{node}`" for r in tests for node in r["failures"]] + [""]
    checks = [r for r in done if r["part"] == "graphed_vs_eager"]
    if checks:
        out += ["## Graphed collect against eager, from the same states", "",
                "| env | B | T | rounds per mode | sampling equal | deterministic equal | mismatched |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {r['env']} | {r['num_envs']} | {r['horizon']} | {r['rounds']} | {r['equal_sampling']} | "
                f"{r['equal_deterministic']} | {' '.join(r['mismatched']) or '-'} |" for r in checks] + [""]
    tp = [r for r in done if r["part"] == "throughput"]
    if tp:
        out += [f"## Throughput (T={s.horizon}, MLP {HIDDENS} tanh; medians of {s.iters} after {s.warmup} warm-ups, "
                "graphed PPO after at least 3)", "",
                "| env | algorithm | mode | B | collect steps/s | update samples/s | end-to-end steps/s | step ms | peak MB |",
                "|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {r['env']} | {r['algorithm']} | {r['mode']} | {r['num_envs']} | {r['collect_steps_per_s']:,.0f} | "
                f"{r['update_samples_per_s']:,.0f} | {r['end_to_end_steps_per_s']:,.0f} | {r['step_ms']:,.1f} | "
                f"{r['peak_memory_mb']:,.0f} |" for r in tp] + [""]
    solves = [r for r in done if r["part"] == "solve"]
    if solves:
        out += [f"## Time to solve (B={s.solve_num_envs}, T={s.horizon}; training time only)", "",
                "| env | algorithm | mode | solved | seconds | env steps | collects | best | goal |",
                "|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {r['env']} | {r['algorithm']} | {r['mode']} | {r['solved']} | {r['seconds']:.1f} | "
                f"{r['env_steps']:,} | {r['iterations']} | {r['best']:.1f} | {r['metric']} >= {r['goal']:g} |"
                for r in solves] + [""]
    rl8_rows = [r for r in done if r["part"] == "rl8"]
    if rl8_rows:
        out += ["## rl8 side by side (rl8's DiscreteDummyEnv and defaults; end-to-end env steps/s)", "",
                "| B | rl8 | rlx eager (ratio) | rlx cudagraphs (ratio) |", "|---|---|---|---|"]
        for r in rl8_rows:
            graphed = (f"{r['rlx_cudagraphs_end_to_end_steps_per_s']:,.0f} ({r['ratio_cudagraphs']:.2f}x)"
                       if "ratio_cudagraphs" in r else "-")
            out.append(f"| {r['num_envs']} | {r['rl8_end_to_end_steps_per_s']:,.0f} | "
                       f"{r['rlx_eager_end_to_end_steps_per_s']:,.0f} ({r['ratio_eager']:.2f}x) | {graphed} |")
        out.append("")
    skipped = [r for r in rows if "skipped" in r]
    if skipped:
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for r in skipped:
            groups.setdefault((r["part"], r["algorithm"], r["mode"], r["skipped"]), []).append(r)
        out += ["## Skipped", "", "| part | env | algorithm | mode | B | reason |", "|---|---|---|---|---|---|"]
        for (part, algorithm, mode, reason), group in groups.items():
            envs = ", ".join(dict.fromkeys(r["env"] for r in group))
            sizes = ", ".join(dict.fromkeys(str(r["num_envs"]) for r in group))
            flag = "ERROR: " if group[0].get("error") else ""
            out.append(f"| {part} | {envs} | {algorithm} | {mode} | {sizes} | {flag}{_cell(reason)} |")
        out.append("")
    return "\n".join(out)


# -- main --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The suite's options."""
    parser = argparse.ArgumentParser(
        prog="gpu_suite.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true",
                        help="every part at tiny sizes on the CPU; pytest only collects; no graphed modes or compile")
    parser.add_argument("--device", help="cuda or cuda:N (default cuda; cpu in a dry run)")
    parser.add_argument("--out", help=f"results directory (default {DEFAULT_OUT})")
    parser.add_argument("--budget-s", type=float, default=450.0,
                        help="wall-clock budget in seconds; later parts are then skipped (default 450)")
    parser.add_argument("--tests-timeout-s", type=float, default=240.0,
                        help="pytest is stopped after this many seconds; finished tests still count (default 240)")
    parser.add_argument("--solve-budget-s", type=float,
                        help="seconds of training per solve run (default 30; 5 in a dry run)")
    parser.add_argument("--threads", type=int,
                        help="torch CPU threads (default: torch's choice; 1 in a dry run, whose sizes gain nothing "
                        "from a second thread and lose much when another process shares the cores)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the suite; returns 0 (failures are rows, not an exit status)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.solve_budget_s is None:
        args.solve_budget_s = 5.0 if args.dry_run else 30.0
    if args.threads is None and args.dry_run:
        args.threads = 1
    # Measure this checkout: its commit is the one recorded. (An rlx imported already,
    # as under pytest, stays; the preflight row says where it came from.)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    suite = Suite(args)
    try:
        suite.run()
    finally:
        suite.markdown.write_text(markdown(suite, argv) + "\n")
        print()
        print("\n".join(summary_lines(suite)))
        print(f"wrote {suite.jsonl} (appended) and {suite.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
