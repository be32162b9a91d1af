"""What a T loop as one ``scan`` program would gain over compiled programs of K steps.

    python benchmarks/experiments/scan_t_loop.py [--num-envs 64] [--modes 4 scan scan-carry 32] [--repeats 3]

The same functional T loop in every mode, so that only the program structure differs:
CartPole's dynamics (resets drawn in the loop), a 64x64 tanh policy sampling a discrete
action (Gumbel-max) and a 64x64 tanh value network, seven outputs a step written into
``[B, T, ...]`` columns (what rlx writes into its buffer). ``K`` (an integer) compiles K
steps as one program that writes its steps into the columns by index, in place, and
calls it T / K times, as ``rlx.collect.compiled_loop`` does (K = 4 there); ``scan``
compiles the T steps as one program with torch's ``scan``, the env state as its carry
and the step's outputs stacked, copied into the columns after it; ``scan-carry`` carries
the columns too, each step writing its own (functionally: what
``rlx.core.scanned.ScannedCalls`` would make of rlx's in-place step), the last carry
copied back. Each mode runs in a fresh process with an empty
``TORCHINDUCTOR_CACHE_DIR``, one thread, rlx's CPU inductor options; reported: the first
loop (compiling) and the median of 200 warm loops, the median over ``--repeats``
processes (the modes interleaved). The draws differ from step to step (checked).
Results: ``benchmarks/experiments/results/scan_t_loop.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

T = 32


def one(mode: str, num_envs: int) -> dict[str, float]:
    """In this process: the first and the median warm T loop of ``mode``."""
    import torch
    from torch._higher_order_ops.scan import scan

    from rlx.core.compiling import CPU_INDUCTOR_OPTIONS, INDUCTOR_OPTIONS

    torch.set_num_threads(1)
    torch.manual_seed(0)

    def mlp(out: int) -> torch.nn.Module:
        layers = [torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, out)]
        return torch.nn.Sequential(*layers).requires_grad_(False)

    policy, value = mlp(2), mlp(1)

    def step(state: torch.Tensor, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        logits = policy(state)
        action = torch.argmax(logits - torch.log(-torch.log(torch.rand_like(logits))), -1)
        logp = torch.log_softmax(logits, -1).gather(-1, action[:, None]).squeeze(-1)
        x, xd, th, thd = state.unbind(-1)
        force = torch.where(action == 1, 10.0, -10.0)
        cos, sin = torch.cos(th), torch.sin(th)
        temp = (force + 0.05 * thd * thd * sin) / 1.1
        thacc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos * cos / 1.1))
        xacc = temp - 0.05 * thacc * cos / 1.1
        new = torch.stack([x + 0.02 * xd, xd + 0.02 * xacc, th + 0.02 * thd, thd + 0.02 * thacc], -1)
        steps = steps + 1
        terminated = (new[:, 0].abs() > 2.4) | (new[:, 2].abs() > 0.2095)
        truncated = steps >= 500
        done = terminated | truncated
        new = torch.where(done[:, None], torch.rand_like(new) * 0.1 - 0.05, new)
        steps = torch.where(done, 0, steps)
        outputs = (state.clone(), action, logp, value(state).squeeze(-1), torch.ones_like(x), terminated, truncated)
        return new, steps, outputs

    def scanned(state: torch.Tensor, steps: torch.Tensor):
        def body(carry, _):
            new, steps, outputs = step(*carry)
            return (new, steps), outputs

        (state, steps), outputs = scan(body, (state, steps), torch.zeros(T))
        return state, steps, outputs

    def scanned_carry(state: torch.Tensor, steps: torch.Tensor, columns: list[torch.Tensor]):
        def body(carry, t):
            state, steps, columns = carry
            new, steps, outputs = step(state, steps)
            t = t.view(1)
            columns = [c.index_copy(1, t, o.unsqueeze(1)) for c, o in zip(columns, outputs)]
            return (new, steps, columns), torch.zeros(())

        (state, steps, columns), _ = scan(body, (state, steps, columns), torch.arange(T))
        return state, steps, columns

    options = {**INDUCTOR_OPTIONS, **CPU_INDUCTOR_OPTIONS}
    state, steps = torch.rand(num_envs, 4) * 0.1 - 0.05, torch.zeros(num_envs, dtype=torch.long)
    # The buffer's columns, [B, T, ...] as rlx's: a K-step program writes its steps into
    # them (by index, in place); a scan's stacked outputs ([T, B, ...]) are copied in after
    # it, and a scan that carries the columns copies its last carry back (as
    # rlx.core.scanned.ScannedCalls does).
    _, _, example = step(state.clone(), steps.clone())
    columns = [torch.zeros(num_envs, T, *x.shape[1:], dtype=x.dtype) for x in example]
    if mode == "scan":
        program = torch.compile(scanned, options=options, fullgraph=True)

        def loop(state, steps):
            state, steps, outputs = program(state, steps)
            for column, x in zip(columns, outputs):
                column.copy_(x.transpose(0, 1))
            return state, steps, [outputs[1]]
    elif mode == "scan-carry":
        program = torch.compile(scanned_carry, options=options, fullgraph=True)

        def loop(state, steps):
            state, steps, new = program(state, steps, columns)
            for column, x in zip(columns, new):
                column.copy_(x)
            return state, steps, [columns[1].t()]
    else:
        k = int(mode)

        def write(state, steps, start):
            for i in range(k):
                state, steps, outputs = step(state, steps)
                t = (start + i).view(1)
                for column, x in zip(columns, outputs):
                    column.index_copy_(1, t, x.unsqueeze(1))
            return state, steps

        program = torch.compile(write, options=options, fullgraph=True)
        starts = [torch.tensor(t) for t in range(0, T, k)]

        def loop(state, steps):
            for start in starts:
                state, steps = program(state, steps, start)
            return state, steps, [columns[1].t()]

    start = time.perf_counter()
    state, steps, actions = loop(state, steps)
    first = time.perf_counter() - start
    actions = torch.cat(actions)
    assert len(actions) == T and any(not torch.equal(actions[0], a) for a in actions[1:]), "the same draws at every step"
    times = []
    for _ in range(200):
        start = time.perf_counter()
        state, steps, _ = loop(state, steps)
        times.append(time.perf_counter() - start)
    return {"first_s": round(first, 2), "loop_ms": round(1e3 * statistics.median(times), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--modes", nargs="+", default=["4", "scan", "scan-carry", "32"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process's mode
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.num_envs)))
        return
    from common import EXPERIMENT_RESULTS, append_results, results_path

    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in args.modes}
    for _ in range(args.repeats):  # the modes interleaved: the machine's speed drifts
        for mode in args.modes:
            with tempfile.TemporaryDirectory() as cache:
                out = subprocess.run([sys.executable, __file__, "--one", mode, "--num-envs", str(args.num_envs)],
                                     env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}, capture_output=True,
                                     text=True, check=True)
            runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    rows = []
    for mode in args.modes:
        row = {"mode": mode, "num_envs": args.num_envs, "horizon": T, "repeats": args.repeats,
               "first_s": statistics.median(r["first_s"] for r in runs[mode]),
               "loop_ms": statistics.median(r["loop_ms"] for r in runs[mode])}
        rows.append(row)
        print(f"{mode:>10}: T loop {row['loop_ms']:.3f} ms, first loop (compiling) {row['first_s']:.1f} s", flush=True)
    print(f"results: {append_results(results_path('scan_t_loop', EXPERIMENT_RESULTS), rows, threads=1)}")


if __name__ == "__main__":
    main()
