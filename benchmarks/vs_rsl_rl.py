"""rlx against rsl_rl 5.5.1's OnPolicyRunner on a VecEnv task with privileged critic state.

    python benchmarks/vs_rsl_rl.py [--device cpu] [--num-envs 1024] [--hidden 128 128] [--eval-at 5 10 20 40]
                                   [--seeds 0 1 2] [--schedules adaptive fixed] [--threads 2] [--sides ...]

The task is :class:`rlx.examples.windy_reach.WindyReach`: a point mass reaching a goal
under a wind and a mass the actor never sees and the critic does (its ``critic`` group),
the asymmetric actor-critic of the GPU simulators' robot tasks, small enough for a CPU.

Both sides train through rsl_rl's ``VecEnv`` interface (rlx through
:class:`rlx.envs.RslRlVecEnv`) with the same settings, rsl_rl's defaults for such tasks:
24 steps per env, [hidden] ELU actor and critic, initial std 1, 5 epochs x 4
minibatches, clip 0.2 with the value clipped alike, value coefficient 1, entropy 0.005,
gamma 0.99, lambda 0.95, max grad norm 1, Adam at lr 1e-3, and either rsl_rl's adaptive
schedule (desired KL 0.01, bounds 1e-5 and 1e-2) or that fixed LR. rlx runs twice: with
its joint gradient clip and with ``clip_grad_per_network=True`` (rsl_rl's rule).

Each run is evaluated after ``--eval-at`` iterations (5, 10, 20 and 40), deterministically
on 1024 fresh episodes (the same seed for every evaluation), and scored as a normalized
return: 0 is the random policy's, 1 a hand-written PD controller's (which does not know
the wind). Training wall-clock excludes the evaluations. With the adaptive schedule rlx
also runs with both of rsl_rl's rules (``clip_grad_per_network`` and
``kl_adaptive_lr_per_minibatch``, what :class:`rlx.runners.OnPolicyRunner` maps
``schedule: adaptive`` to), and ``rlx_rsl_rl_rules_compile`` runs them with ``compile=True``
(the whole update compiled: what the runner trains when ``torch_compile_mode`` is set; its first
iteration, compiling, counts in the wall-clock). Results: the score, the training
wall-clock, per run and the median per setting, in ``benchmarks/results/vs_rsl_rl_<device>.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rlx.examples.windy_reach import WindyReach, episode_return, pd_controller  # noqa: E402

def rsl_rl_cfg(args: argparse.Namespace, schedule: str) -> dict:
    return {
        "num_steps_per_env": 24, "save_interval": 10**9, "obs_groups": {"actor": ["policy"], "critic": ["policy", "critic"]},
        "algorithm": {"class_name": "PPO", "num_learning_epochs": 5, "num_mini_batches": 4, "clip_param": 0.2,
                      "gamma": 0.99, "lam": 0.95, "value_loss_coef": 1.0, "entropy_coef": 0.005, "learning_rate": 1e-3,
                      "max_grad_norm": 1.0, "use_clipped_value_loss": True, "schedule": schedule, "desired_kl": 0.01},
        "actor": {"class_name": "MLPModel", "hidden_dims": list(args.hidden), "activation": "elu",
                  "obs_normalization": False, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": {"class_name": "MLPModel", "hidden_dims": list(args.hidden), "activation": "elu",
                   "obs_normalization": False},
    }


def run_rsl_rl(args: argparse.Namespace, schedule: str, seed: int) -> tuple[list[float], float]:
    import contextlib
    import io

    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(seed)
    env = WindyReach(args.num_envs, args.device, seed=seed)
    returns, wall, done = [], 0.0, 0
    with contextlib.redirect_stdout(io.StringIO()):  # its model printout and per-iteration log
        runner = OnPolicyRunner(env, rsl_rl_cfg(args, schedule), log_dir=None, device=args.device)
        for at in args.eval_at:
            start = time.perf_counter()
            runner.learn(at - done)
            wall += time.perf_counter() - start
            done = at
            policy = runner.get_inference_policy(args.device)
            returns.append(episode_return(lambda obs: policy(obs), args.num_envs, args.device))
            runner.alg.train_mode()
    return returns, wall


def run_rlx(args: argparse.Namespace, schedule: str, seed: int, per_network: bool,
            per_minibatch: bool = False, compile: bool = False) -> tuple[list[float], float]:
    import dataclasses

    from rlx.envs import RslRlVecEnv
    from rlx.runners import algorithm_config_from_rsl_rl

    make = lambda num_envs, device: WindyReach(num_envs, device, seed=seed)  # noqa: E731
    # rsl_rl's dict as rlx's runner maps it, with the two rules under test set apart.
    config = dataclasses.replace(
        algorithm_config_from_rsl_rl(rsl_rl_cfg(args, schedule), args.num_envs, args.device),
        clip_grad_per_network=per_network, kl_adaptive_lr_per_minibatch=schedule == "adaptive" and per_minibatch,
        seed=seed, compile=compile,
    )
    algo = config.build(RslRlVecEnv.factory(make))
    returns, wall, done = [], 0.0, 0
    for at in args.eval_at:
        start = time.perf_counter()
        for _ in range(at - done):
            algo.collect()
            algo.step()
        wall += time.perf_counter() - start
        done = at
        returns.append(episode_return(lambda obs: algo.policy.act(obs, deterministic=True).env_actions,
                                      args.num_envs, args.device))
    return returns, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--hidden", type=int, nargs="+", default=[128, 128])
    parser.add_argument("--eval-at", type=int, nargs="+", default=[5, 10, 20, 40],
                        help="iterations after which both are evaluated (the last is the training length)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--schedules", nargs="+", default=["adaptive", "fixed"], choices=["adaptive", "fixed"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sides", nargs="+", default=["rsl_rl", "rlx", "rlx_per_network_clip", "rlx_rsl_rl_rules",
                                                       "rlx_rsl_rl_rules_compile"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from common import append_results, results_path

    random = episode_return(lambda obs: torch.randn(obs.batch_size[0], 2, device=args.device), args.num_envs, args.device)
    pd = episode_return(pd_controller, args.num_envs, args.device)
    print(f"WindyReach: random policy {random:.2f}, PD controller {pd:.2f} (normalized 0 and 1)", flush=True)
    sides = {"rsl_rl": lambda s, seed: run_rsl_rl(args, s, seed),
             "rlx": lambda s, seed: run_rlx(args, s, seed, False),
             "rlx_per_network_clip": lambda s, seed: run_rlx(args, s, seed, True),
             "rlx_rsl_rl_rules": lambda s, seed: run_rlx(args, s, seed, True, True),
             # What OnPolicyRunner trains with rsl_rl's torch_compile_mode set: the update compiled whole.
             "rlx_rsl_rl_rules_compile": lambda s, seed: run_rlx(args, s, seed, True, s == "adaptive", True)}
    sides = {name: side for name, side in sides.items() if name in args.sides}
    rows = []
    for schedule in args.schedules:
        names = [n for n in sides if schedule == "adaptive" or n != "rlx_rsl_rl_rules"]  # the same as per-network when fixed
        scores: dict[str, list[tuple[list[float], float]]] = {name: [] for name in names}
        for seed in args.seeds:  # interleaved: every side on a seed before the next seed
            for name in names:
                returns, wall = sides[name](schedule, seed)
                curve = [(r - random) / (pd - random) for r in returns]
                scores[name].append((curve, wall))
                rows.append({"side": name, "schedule": schedule, "seed": seed, "eval_at": args.eval_at,
                             "normalized_returns": [round(x, 4) for x in curve], "wall_s": round(wall, 2),
                             "num_envs": args.num_envs, "hidden": args.hidden, "device": args.device})
                print(f"{schedule:>8} seed {seed} {name:>22}: normalized " + " / ".join(f"{x:6.3f}" for x in curve)
                      + f" at {args.eval_at} iterations, wall {wall:6.1f} s", flush=True)
        for name, values in scores.items():
            medians = [statistics.median(c[i] for c, _ in values) for i in range(len(args.eval_at))]
            print(f"{schedule:>8} {name:>22}: median normalized " + " / ".join(f"{m:.3f}" for m in medians)
                  + f" at {args.eval_at}, median wall {statistics.median(w for _, w in values):.1f} s", flush=True)
    out = args.out or results_path(f"vs_rsl_rl_{args.device}")
    append_results(out, rows, threads=args.threads, random_return=round(random, 3), pd_return=round(pd, 3))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
