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
   ``tests/core/test_gae.py``, ... and the rest of those modules), ``-m "gpu or not slow"``.
   A small plugin (``benchmarks/gpu/pytest_part.py``, loaded with ``-p gpu.pytest_part``)
   counts passed, failed, skipped and errors for the ``gpu``-marked tests and for the
   others separately.
   pytest is stopped after ``--tests-timeout-s`` (default 240); finished tests count.
3. ``graphed_vs_eager``: two PPOs with the same seed, ``cudagraphs=True`` and ``False``;
   the graphed one collects 3 times per mode to warm up and capture, then for several
   rounds both collect from the same ``state_dict()`` (env state, last observation,
   RNG states, parameters) and ``obs``, ``actions``, ``logp``, ``values``,
   ``rewards``, ``terminated`` and ``truncated`` must agree to the bit
   (``torch.equal``), sampling and deterministic. The eager PPO updates between rounds,
   so the graph must read the live parameters.
4. ``throughput``: :func:`rlx.run.bench.bench_one` (medians of ``collect()`` and ``step()``
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
7. ``vs_jax``: ``benchmarks/vs_jax.py --device cuda`` at B = 4096, 65536 and 262144 with
   4 and 64 minibatches, rlx with ``cudagraphs`` and with ``compile`` and ``cudagraphs``
   against the whole-program JAX PPO (its rows in ``vs_jax_<device>.jsonl``); a skip row
   naming ``pip install 'rlx[jax]'`` when JAX is missing.
8. ``throughput`` with ``compile=True`` (PPO and NPG): last, because compiling costs tens of
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
import sys
from pathlib import Path

# Loaded by its path (under pytest, or by ``rlx bench --suite gpu``), this file's folder is
# not on sys.path; the modules below live there.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT  # noqa: E402
from gpu.measure import graphed_vs_eager, solve_config, throughput, time_to_solve  # noqa: E402
from gpu.report import goal_lines, markdown, summary_lines  # noqa: E402
from gpu.settings import DEFAULT_OUT, DRY_SIZES, GPU_SIZES, ROW_KEYS, Sizes  # noqa: E402
from gpu.suite import Suite  # noqa: E402

__all__ = ["DRY_SIZES", "GPU_SIZES", "ROW_KEYS", "Sizes", "Suite", "build_parser", "goal_lines", "graphed_vs_eager",
           "main", "markdown", "solve_config", "summary_lines", "throughput", "time_to_solve"]


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
