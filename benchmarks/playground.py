"""A real GPU-simulator env, side by side with rsl_rl: MuJoCo Playground's CartpoleBalance.

    pip install playground rsl-rl-lib        # the benchmark's peers, not rlx dependencies
    python benchmarks/playground.py [--iterations 100] [--num-envs 64] [--horizon 32] [--seeds 0 1 2]
        [--libs rlx rsl_rl] [--threads 1] [--out benchmarks/results/playground.jsonl]

Both libraries train the same env, built the same way: ``registry.load("CartpoleBalance",
config_overrides={"impl": "jax"})`` (JAX on the CPU here) behind Playground's own
``wrapper_torch.RSLRLBraxWrapper`` (1000-step episodes, action repeat 1). rlx reads it
through :class:`rlx.envs.RslRlVecEnv`; rsl_rl through its ``OnPolicyRunner``. The same
PPO on both: ``--num-envs`` x ``--horizon`` steps per iteration, 5 epochs of 4
minibatches, Adam at 1e-3 with rsl_rl's adaptive-KL learning rate (target 0.01), clip 0.2,
clipped value loss (0.2), entropy 0.01, γ 0.99, λ 0.95, gradient norm 1.0, whole-batch
advantage normalization, ELU MLPs [128, 128, 128] for actor and critic, initial std 1,
no observation or reward normalization.

Measured per run: the wall-clock of the training loop (the JIT compile of the wrapper's
reset and step, paid once per wrapper by either library, is reported apart), env steps
per second, and the mean return of a deterministic evaluation: 64 fresh episodes of 1000
steps through a separate wrapper, summed rewards, identical code for both. Appends to
``benchmarks/results/playground.jsonl`` and prints a markdown table of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import append_results, results_path

RESULTS = results_path("playground")
TASK = "CartpoleBalance"
EPISODE = 1000
HIDDEN = [128, 128, 128]


def make_wrapper(num_envs: int, seed: int):
    """Playground's own rsl_rl wrapper around CartpoleBalance (JAX impl), with what a CPU
    run must set by hand: ``device`` (the wrapper sets it only for a GPU) and ``cfg``
    (rsl_rl's runner reads ``env.cfg``)."""
    from mujoco_playground import registry, wrapper_torch

    env = registry.load(TASK, config_overrides={"impl": "jax"})
    start = time.perf_counter()
    wrapper = wrapper_torch.RSLRLBraxWrapper(env, num_envs, seed, EPISODE, 1)
    wrapper.device = "cpu"
    wrapper.cfg = {}
    wrapper.reset()  # the first call of the jitted reset compiles it
    import torch

    wrapper.step(torch.zeros(num_envs, wrapper.num_actions))  # and of step
    wrapper.jit_s = time.perf_counter() - start
    return wrapper


def evaluate(act, num_envs: int, seed: int) -> float:
    """Mean return of ``num_envs`` deterministic episodes of CartpoleBalance; ``act`` maps
    the wrapper's observation TensorDict to actions."""
    import torch

    wrapper = make_wrapper(num_envs, seed + 10_000)
    obs = wrapper.reset()
    total = torch.zeros(num_envs)
    with torch.inference_mode():
        for _ in range(EPISODE):
            obs, rewards, dones, _ = wrapper.step(act(obs))
            total += rewards.float()
    return float(total.mean())


def run_rlx(args: argparse.Namespace, seed: int) -> dict:
    import torch

    from rlx import AlgorithmConfig
    from rlx.envs import RslRlVecEnv

    jit = {}

    def make_env(num_envs: int, device):
        wrapper = make_wrapper(num_envs, seed)
        jit["s"] = wrapper.jit_s
        return wrapper

    config = AlgorithmConfig(
        num_envs=args.num_envs, horizon=args.horizon, num_sgd_iters=5,
        sgd_minibatch_size=args.num_envs * args.horizon // 4, optimizer_config={"lr": 1e-3},
        target_kl_div=0.01, kl_adaptive_lr=True, clip_param=0.2, vf_clip_param=0.2, entropy_coeff=0.01,
        gamma=0.99, gae_lambda=0.95, max_grad_norm=1.0, normalize_advantages=True, normalize_rewards=False,
        model_config={"hiddens": HIDDEN, "activation_fn": "elu", "log_std_init": 0.0}, device="cpu", seed=seed,
    )
    algo = config.build(RslRlVecEnv.factory(make_env))
    start = time.perf_counter()
    returns = []
    for _ in range(args.iterations):
        stats = algo.collect()
        algo.step()
        returns.append(stats.get("episodes/return_mean"))
    wall = time.perf_counter() - start
    policy = algo.policy

    def act(obs):
        state = policy.initial_state(obs.batch_size[0])
        resets = torch.zeros(obs.batch_size[0], 1, dtype=torch.bool)
        return policy.act_step(obs, state, resets, deterministic=True).env_actions

    return {"env_steps": algo.env_steps, "train_s": wall, "jit_s": jit["s"], "eval_return": evaluate(act, 64, seed)}


def run_rsl_rl(args: argparse.Namespace, seed: int) -> dict:
    import torch

    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(seed)
    wrapper = make_wrapper(args.num_envs, seed)
    model = {"class_name": "MLPModel", "hidden_dims": HIDDEN, "activation": "elu", "obs_normalization": False}
    cfg = {
        "algorithm": {
            "class_name": "PPO", "num_learning_epochs": 5, "num_mini_batches": 4, "clip_param": 0.2, "gamma": 0.99,
            "lam": 0.95, "value_loss_coef": 1.0, "entropy_coef": 0.01, "learning_rate": 1e-3, "max_grad_norm": 1.0,
            "use_clipped_value_loss": True, "schedule": "adaptive", "desired_kl": 0.01,
            "normalize_advantage_per_mini_batch": False,
        },
        "actor": {**model, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": dict(model),
        "obs_groups": {"actor": ["state"], "critic": ["state"]},
        "num_steps_per_env": args.horizon,
        "save_interval": 10**9,
    }
    runner = OnPolicyRunner(wrapper, cfg, log_dir=None, device="cpu")
    start = time.perf_counter()
    runner.learn(num_learning_iterations=args.iterations)
    wall = time.perf_counter() - start
    policy = runner.get_inference_policy(device="cpu")
    return {
        "env_steps": args.iterations * args.horizon * args.num_envs, "train_s": wall, "jit_s": wrapper.jit_s,
        "eval_return": evaluate(policy, 64, seed),
    }


RUNNERS = {"rlx": run_rlx, "rsl_rl": run_rsl_rl}


def table(rows: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["lib"], r["num_envs"], r["horizon"], r["iterations"], r["threads"]), []).append(r)
    lines = ["| library | envs x steps | iterations | env steps | seeds | train wall-clock (median s) | env steps/s "
             "| deterministic return (median; per seed) | JIT (median s) |", "|---|---|---|---|---|---|---|---|---|"]
    for (lib, b, t, it, _), group in sorted(groups.items()):
        wall = statistics.median(r["train_s"] for r in group)
        per_seed = ", ".join(f"{r['eval_return']:.0f}" for r in group)
        lines.append(
            f"| {lib} | {b} x {t} | {it} | {group[0]['env_steps']:,} | {len(group)} | {wall:.1f} | "
            f"{group[0]['env_steps'] / wall:,.0f} | {statistics.median(r['eval_return'] for r in group):.1f}; "
            f"{per_seed} | {statistics.median(r['jit_s'] for r in group):.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--horizon", type=int, default=32)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--libs", nargs="+", choices=list(RUNNERS), default=list(RUNNERS))
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads in each run")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--table-only", action="store_true", help="rewrite the markdown table from --out")
    parser.add_argument("--one", nargs=2, metavar=("LIB", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.one:  # a child process: one library, one seed
        import torch

        torch.set_num_threads(args.threads)
        lib, seed = args.one[0], int(args.one[1])
        print("RESULT " + json.dumps(RUNNERS[lib](args, seed)), flush=True)
        return

    out = Path(args.out)
    if args.table_only:
        write_table(out)
        return
    for seed in args.seeds:
        for lib in args.libs:  # one after the other, alternating, each a fresh process
            cmd = [sys.executable, __file__, "--one", lib, str(seed), "--iterations", str(args.iterations),
                   "--num-envs", str(args.num_envs), "--horizon", str(args.horizon), "--threads", str(args.threads)]
            proc = subprocess.run(cmd, capture_output=True, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": str(args.threads), "JAX_PLATFORMS": "cpu"})
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                print(f"FAILED {lib} seed {seed}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}", flush=True)
                continue
            record = {"lib": lib, "task": TASK, "seed": seed, "num_envs": args.num_envs, "horizon": args.horizon,
                      "iterations": args.iterations, "threads": args.threads, **json.loads(lines[-1][7:]),
                      "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
            append_results(out, record)
            print(f"{lib} seed {seed}: {record['train_s']:.1f} s, return {record['eval_return']:.1f}", flush=True)
    write_table(out)


def write_table(out: Path) -> None:
    """Print the table of every run in ``out`` and write it next to it as markdown."""
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    text = table(rows)
    print(text)
    out.with_suffix(".md").write_text(
        f"# MuJoCo Playground {TASK}: rlx against rsl_rl\n\nWritten by `python benchmarks/playground.py` from "
        f"`{out.name}` (see its docstring for the settings, identical for both). Each run is a fresh process with "
        "one torch thread; the libraries alternate, seed by seed. Wall-clock is the training loop only; the JIT "
        "compile of the wrapper is paid by both and shown apart. Returns: 64 deterministic 1000-step episodes "
        "(at most 1000).\n\n" + text + "\n"
    )


if __name__ == "__main__":
    main()
