"""rlx against a whole-program JAX PPO (PureJaxRL's design), side by side in one run.

    python benchmarks/vs_jax.py [--device cpu|cuda] [--num-envs 64 1024 4096] [--minibatches 4 64]
                                [--modes eager compile] [--rounds 2] [--threads 1] [--blocks 0]

The same work on both sides: CartPole (gymnasium's dynamics), T = 32, separate 64x64
tanh actor and critic, 4 epochs, 4 or 64 minibatches, Adam with lr 2.5e-3 and the
gradient clipped to 0.5, gamma 0.99, lambda 0.95, clip 0.2 (``jax_ppo.py`` is the JAX
program: the whole run is one ``jax.jit``). For each setting and round, interleaved:

* JAX: compile time (``jit(...).lower().compile()``), then one untimed call of the
  compiled program (its first execution: allocation and autotuning, which made a cold
  timing read 16.3M against 27.1M env steps/s warm on an H100 at B = 4096), then
  steady-state env steps/s of a second call (``--iterations`` iterations), and the mean
  return of the episodes that ended in its last 5 iterations that had any;
* rlx, per mode (``eager``: the defaults; ``compile``: ``compile=True``, whose minibatch
  update compiles whole, :meth:`rlx.algorithms.ppo.PPO.minibatch_update`; ``cudagraphs``
  and ``compile+cudagraphs`` on CUDA, each minibatch update a graph, and
  ``cudagraphs-step`` and ``compile+cudagraphs-step``, step()'s whole device work one
  graph (``cudagraphs_scope="step"``); ``compile+amp`` and ``compile+cudagraphs-step+amp``:
  those programs under bf16 autocast (not JAX's float32 arithmetic, and so rows of their
  own; fp16 with a GradScaler on a GPU before Ampere, which graphs refuse);
  ``compile+cudagraphs-step+combo``: the compiled programs built with inductor's
  ``combo_kernels`` (independent small kernels, such as the per-parameter norms of the
  gradient clip, launched as one; CUDA only, an experiment on the kernel count): the first
  iteration's time (compiling included), then steady-state env steps/s of ``collect()``
  + ``step()`` over the same iterations, and the same return.

Every row names its matmul precision (``float32``, or ``tf32`` where CUDA's TF32 matmuls
are on: JAX's default on these GPUs is TF32 for float32 matmuls).

Medians over rounds; ``rlx / JAX`` is each rlx mode's env steps/s over JAX's from the
same round. ``--blocks K`` times each round as ``K`` alternating pairs of short blocks
instead (:func:`run_blocks`: the machine's drift over seconds reaches both sides of a
pair alike). On a CPU, ``--threads 1`` gives each side one thread and one core: XLA's Eigen
pool is switched off via ``XLA_FLAGS``, set before JAX is imported, and the process is
pinned to one CPU (XLA's runtime kept 1.3-1.5 cores busy with the flags alone; rows
before 2026-11-27's ``pinned_cpus`` field ran unpinned). Needs the ``jax`` extra
(``pip install -e '.[jax]'``). Results: ``benchmarks/results/vs_jax_<device>.jsonl``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def last_finite_mean(returns: list[float], n: int = 5) -> float:
    """The mean of the last ``n`` iterations' returns that are numbers: an iteration in
    which no episode ended reports NaN (once CartPole is solved, every episode runs its
    500 steps, and a few iterations of T = 32 can pass with none ending)."""
    finite = [r for r in returns if math.isfinite(r)]
    return statistics.fmean(finite[-n:]) if finite else math.nan


def _built(s, device: str, seed: int, mode: str):
    """rlx's side of a mode, built and warmed up: the algorithm and its first iteration's
    seconds (compiling included)."""
    from rlx.core.cuda_graphs import GRAPH_WARMUPS
    from rlx.envs import CartPole

    config = s.rlx_config(device, seed=seed, compile="compile" in mode, cudagraphs="cudagraphs" in mode,
                          amp="amp" in mode, cudagraphs_scope="step" if "-step" in mode else "minibatch")
    with combo_kernels("+combo" in mode):  # programs are made at build and first calls
        algo = config.build(CartPole)
        start = time.perf_counter()
        algo.collect()
        algo.step()
        first_s = time.perf_counter() - start
        # Warm-up: every CUDA graph captured before the timing (collect's T loop and the
        # step's graph are called once an iteration: GRAPH_WARMUPS eager calls, then the
        # capture), and the compiled last-value pass.
        for _ in range(GRAPH_WARMUPS):
            algo.collect()
            algo.step()
    return algo, first_s


def run(device: str, num_envs: list[int], minibatches: list[int], modes: list[str], iterations: int = 0,
        rounds: int = 1, threads: int = 1, jax_side: bool = True, blocks: int = 0) -> list[dict]:
    """The side-by-side rows (one per side, size and minibatch count; medians over rounds).
    ``jax_side=False`` (JAX not installed) runs rlx alone: its ``vs_jax`` is then NaN.
    ``blocks > 0``: each round times each mode against JAX in that many pairs of short
    blocks (:func:`run_blocks`) instead of one long call each."""
    if blocks:
        if not jax_side:
            raise ValueError("blocks pair rlx's blocks with JAX's: they need the JAX side")
        return run_blocks(device, num_envs, minibatches, modes, iterations, rounds, threads, blocks)
    import numpy as np
    import torch
    from ppo_settings import PPOSettings

    if jax_side:
        import jax
        from jax_ppo import block, make_train
    torch.set_num_threads(threads)
    T = 32
    rows = []
    for B in num_envs:
        for nmb in minibatches:
            # At least 10 timed iterations on a GPU (4 of a few ms each at B = 4096 are too few to time).
            iters = iterations or max(10 if device == "cuda" else 4, 500_000 // (B * T))
            s = PPOSettings(num_envs=B, horizon=T, minibatches=nmb)
            per_round: dict[str, list[dict]] = {}
            for r in range(rounds):
                if jax_side:  # compile, one untimed call, then the timed call
                    start = time.perf_counter()
                    train = make_train(s, iters).lower(jax.random.PRNGKey(r)).compile()
                    compile_s = time.perf_counter() - start
                    block(train(jax.random.PRNGKey(r)))
                    start = time.perf_counter()
                    _, returns = block(train(jax.random.PRNGKey(r)))
                    wall = time.perf_counter() - start
                    ret = last_finite_mean(np.asarray(returns).tolist())
                    per_round.setdefault("jax", []).append({"steps_per_s": iters * B * T / wall, "compile_s": compile_s,
                                                            "return": ret, "precision": _jax_precision(device)})
                for mode in modes:
                    algo, first_s = _built(s, device, r, mode)
                    if device == "cuda":
                        torch.cuda.synchronize()
                    returns = []
                    start = time.perf_counter()
                    for _ in range(iters):
                        stats = algo.collect()
                        algo.step()
                        returns.append(stats["episodes/return_mean"])
                    if device == "cuda":
                        torch.cuda.synchronize()
                    wall = time.perf_counter() - start
                    precision = "tf32" if device == "cuda" and torch.backends.cuda.matmul.allow_tf32 else "float32"
                    print(f"  round {r}: {mode} {iters * B * T / wall:,.0f} env steps/s"
                          + (f" (JAX {per_round['jax'][-1]['steps_per_s']:,.0f})" if jax_side else ""), flush=True)
                    per_round.setdefault(mode, []).append({"steps_per_s": iters * B * T / wall, "compile_s": first_s,
                                                           "return": last_finite_mean(returns),
                                                           "precision": precision + ("+amp" if "amp" in mode else "")})
            jax_rate = [x["steps_per_s"] for x in per_round.get("jax", [])] or [math.nan] * rounds
            for side, results in per_round.items():
                rate = statistics.median(x["steps_per_s"] for x in results)
                ratio = statistics.median(x["steps_per_s"] / j for x, j in zip(results, jax_rate))
                row = {"side": side, "device": device, "num_envs": B, "minibatches": nmb, "horizon": T,
                       "epochs": s.epochs, "iterations": iters, "rounds": rounds, "precision": results[0]["precision"],
                       "jax_timed": "warm", "steps_per_s": round(rate), "vs_jax": round(ratio, 3),
                       "compile_s": round(statistics.median(x["compile_s"] for x in results), 2),
                       "return": round(statistics.median(x["return"] for x in results), 1)}
                rows.append(row)
                print(f"B={B:>6} mb={nmb:>3} {side:>20} [{row['precision']}]: {rate:>12,.0f} env steps/s  "
                      f"rlx/JAX {ratio:5.2f}  compile/first {row['compile_s']:6.1f} s  return {row['return']:6.1f}",
                      flush=True)
    return rows


def run_blocks(device: str, num_envs: list[int], minibatches: list[int], modes: list[str], iterations: int,
               rounds: int, threads: int, blocks: int) -> list[dict]:
    """Each mode against JAX in ``blocks`` pairs of short blocks a round, the sides
    alternating (:func:`common.paired_blocks`): a block of JAX is one call of its compiled
    program for ``iterations`` iterations (a whole run from its initial state: the program
    takes the iteration count as its shape), one of rlx the same number of ``collect()`` +
    ``step()`` calls (continuing one run). Both sides are warmed up as :func:`run` warms
    them. ``rlx / JAX`` is the median over every pair of every round of JAX's block time
    over rlx's (the same env steps); each side's env steps/s the median over the rounds of
    its total steps over its total time. The machine's speed drifts over seconds (a
    one-core CPU's blocks of the same work read 16 to 26 ms an iteration within a minute,
    2026-11-28): pairs a second apart see nearly the same machine, where :func:`run`'s two
    long calls may not."""
    import jax
    import numpy as np
    import torch
    from common import paired_blocks
    from jax_ppo import block, make_train
    from ppo_settings import PPOSettings

    torch.set_num_threads(threads)
    T = 32
    rows = []
    for B in num_envs:
        for nmb in minibatches:
            iters = iterations or max(4, 60_000 // (B * T))
            s = PPOSettings(num_envs=B, horizon=T, minibatches=nmb)
            rates: dict[str, list[float]] = {}
            ratios: dict[str, list[float]] = {}
            extra: dict[str, dict] = {}
            for r in range(rounds):
                start = time.perf_counter()
                train = make_train(s, iters).lower(jax.random.PRNGKey(r)).compile()
                extra["jax"] = {"compile_s": time.perf_counter() - start, "precision": _jax_precision(device)}
                key = jax.random.PRNGKey(r)
                block(train(key))  # the untimed first call
                jax_returns: list[float] = []

                def jax_block(train=train, key=key, jax_returns=jax_returns) -> float:
                    start = time.perf_counter()
                    _, returns = block(train(key))
                    wall = time.perf_counter() - start
                    jax_returns[:] = np.asarray(returns).tolist()
                    return wall

                for mode in modes:
                    algo, first_s = _built(s, device, r, mode)
                    returns: list[float] = []

                    def rlx_block(algo=algo, returns=returns, iters=iters) -> float:
                        if device == "cuda":
                            torch.cuda.synchronize()
                        start = time.perf_counter()
                        for _ in range(iters):
                            returns.append(algo.collect()["episodes/return_mean"])
                            algo.step()
                        if device == "cuda":
                            torch.cuda.synchronize()
                        return time.perf_counter() - start

                    jax_s, rlx_s = paired_blocks(jax_block, rlx_block, blocks)
                    ratios.setdefault(mode, []).extend(j / x for j, x in zip(jax_s, rlx_s))
                    rates.setdefault(mode, []).append(blocks * iters * B * T / sum(rlx_s))
                    rates.setdefault("jax", []).append(blocks * iters * B * T / sum(jax_s))
                    precision = "tf32" if device == "cuda" and torch.backends.cuda.matmul.allow_tf32 else "float32"
                    extra[mode] = {"compile_s": first_s, "return": last_finite_mean(returns),
                                   "precision": precision + ("+amp" if "amp" in mode else "")}
                    print(f"  round {r}: {mode} {rates[mode][-1]:,.0f} env steps/s (JAX {rates['jax'][-1]:,.0f}), "
                          f"pairs rlx/JAX {', '.join(f'{j / x:.2f}' for j, x in zip(jax_s, rlx_s))}", flush=True)
                extra["jax"]["return"] = last_finite_mean(jax_returns)
            for side, side_rates in rates.items():
                ratio = statistics.median(ratios[side]) if side in ratios else 1.0
                row = {"side": side, "device": device, "num_envs": B, "minibatches": nmb, "horizon": T,
                       "epochs": s.epochs, "iterations": iters, "rounds": rounds, "blocks": blocks,
                       "protocol": "paired blocks", "precision": extra[side]["precision"], "jax_timed": "warm",
                       "steps_per_s": round(statistics.median(side_rates)), "vs_jax": round(ratio, 3),
                       "compile_s": round(extra[side]["compile_s"], 2), "return": round(extra[side]["return"], 1)}
                rows.append(row)
                print(f"B={B:>6} mb={nmb:>3} {side:>20} [{row['precision']}]: {row['steps_per_s']:>12,.0f} env steps/s  "
                      f"rlx/JAX {ratio:5.2f}  ({blocks} pairs of {iters} iterations x {rounds} rounds)", flush=True)
    return rows


def _jax_precision(device: str) -> str:
    """JAX's float32 matmul precision: its default ("tf32" on a GPU that has it)."""
    import jax

    setting = str(jax.config.jax_default_matmul_precision or "default")
    return "tf32" if device == "cuda" and setting in ("default", "None", "bfloat16_3x", "tensorfloat32") else "float32"


@contextlib.contextmanager
def combo_kernels(on: bool):
    """rlx's CUDA programs made with inductor's ``combo_kernels`` while ``on`` (the options
    are read when rlx makes a compiled function: at build, and at the first collect for
    the T loop's)."""
    from rlx.core.compiling import CUDA_INDUCTOR_OPTIONS

    saved = dict(CUDA_INDUCTOR_OPTIONS)
    if on:
        CUDA_INDUCTOR_OPTIONS["combo_kernels"] = True
    try:
        yield
    finally:
        CUDA_INDUCTOR_OPTIONS.clear()
        CUDA_INDUCTOR_OPTIONS.update(saved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024, 4096])
    parser.add_argument("--minibatches", type=int, nargs="+", default=[4, 64])
    parser.add_argument("--modes", nargs="+", default=["eager", "compile"],
                        choices=["eager", "compile", "cudagraphs", "compile+cudagraphs", "cudagraphs-step",
                                 "compile+cudagraphs-step", "compile+amp", "compile+cudagraphs-step+amp",
                                 "compile+cudagraphs-step+combo"])
    parser.add_argument("--iterations", type=int, default=0, help="iterations timed per run (default: ~0.5M env steps, at least 4, 10 on CUDA)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=0,
                        help="time each mode against JAX in this many alternating pairs of short blocks a round "
                             "(--iterations a block; default ~60k env steps, at least 4)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    pinned = None
    if args.device == "cpu":
        from common import jax_on_cpu_threads

        pinned = jax_on_cpu_threads(args.threads)
    rows = run(args.device, args.num_envs, args.minibatches, args.modes, args.iterations, args.rounds, args.threads,
               blocks=args.blocks)
    from common import append_results, results_path

    out = args.out or results_path(f"vs_jax_{args.device}")
    extra = {"pinned_cpus": len(pinned) if pinned else None} if args.device == "cpu" else {}
    append_results(out, rows, threads=args.threads, **extra)
    print(f"results: {out}")


if __name__ == "__main__":
    main()
