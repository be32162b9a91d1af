"""MuJoCo locomotion at 1M env steps: rlx's PPO, NPG, TRPO (and A2C) against tianshou's table.

(Not named ``mujoco.py``: run as a script, a file's folder leads ``sys.path``, and a
``benchmarks/mujoco.py`` would shadow the ``mujoco`` package for every script here,
torchrl's import of it included.)

    python benchmarks/locomotion.py --envs halfcheetah hopper --algos ppo npg trpo --seeds 0 1 2
        [--steps 1000000] [--libs rlx tianshou sb3] [--jobs 1] [--skip-done] [--table-only]

Each run is a fresh process with one torch thread, training the shipped config
``configs/mujoco/<env>_<algo>.yaml`` (``rlx train ... --set config.seed=S``) on gymnasium's
``<Env>-v5``, with a deterministic evaluation of 10 episodes (one per eval sub-env) every
~30k env steps. Peers, each an optional extra of this benchmark only:

* ``tianshou`` (``pip install tianshou==2.0.1``): tianshou's own NPG, TRPO and PPO built
  as in its ``examples/mujoco`` scripts (64x64 tanh, log-std -0.5, orthogonal init with a
  0.01 policy head, observation normalization, return scaling, linear LR decay; NPG/TRPO:
  16 envs, 1024 steps per collect, 20 critic iterations at LR 1e-3, actor step 0.1 /
  max KL 0.01; PPO: 8 envs, 2048 steps per collect, 10 epochs of 64, LR 3e-4, vf 0.25),
  tested on 10 episodes every 30k steps, as its trainer does;
* ``sb3`` (``pip install stable-baselines3``): Stable-Baselines3's PPO with its own
  defaults (2048 steps, 10 epochs of 64, LR 3e-4, 64x64 tanh as tianshou; but vf 0.5,
  log-std 0, no LR decay, normalized advantages) on one env behind ``VecNormalize``,
  evaluated deterministically every 30k steps on 10 episodes.

Both peers decay their LR to 0 over the ``--steps`` budget, as rlx's configs do.
tianshou's published figures come from 3M-step runs (100 epochs of 30k) read at 1M,
whose LR had decayed by a third there. Wall-clock: rlx's is its process's (imports and
start-up included); the peers' count their training call only.

Every finished run is appended to ``benchmarks/results/mujoco.jsonl`` (library, env,
algorithm, seed, env steps, wall-clock, the max over evaluations of the mean return, the
final evaluation, the commit), and ``benchmarks/results/mujoco.md`` is rewritten from all
of them: tianshou's metric (max over evaluations, mean ± std over seeds) next to its
published 1M-step figures, the final evaluation, and the mean wall-clock.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import ROOT, append_results, git_commit, git_dirty, results_path

RESULTS = results_path("mujoco")
TABLE = RESULTS.with_suffix(".md")
ENVS = {
    "halfcheetah": "HalfCheetah-v5",
    "hopper": "Hopper-v5",
    "walker2d": "Walker2d-v5",
    "ant": "Ant-v5",
    "humanoid": "Humanoid-v5",
    "inverted_double_pendulum": "InvertedDoublePendulum-v5",
}
ALGOS = ("ppo", "npg", "trpo", "a2c")
LIBS = ("rlx", "tianshou", "sb3")
EVAL_EVERY_STEPS = 30_000
EVAL_EPISODES = 10
#: tianshou's examples/mujoco/README.md at 1M steps (v3 envs): max average return over 10
#: seeds ± one standard deviation.
TIANSHOU_PUBLISHED = {
    ("halfcheetah", "npg"): (3485.2, 716.6), ("halfcheetah", "trpo"): (4471.2, 804.9), ("halfcheetah", "ppo"): (5783.9, 1244.0),
    ("hopper", "npg"): (1915.2, 550.5), ("hopper", "trpo"): (2046.0, 1037.9), ("hopper", "ppo"): (2609.3, 700.8),
    ("walker2d", "npg"): (2503.2, 963.3), ("walker2d", "trpo"): (3826.7, 782.7), ("walker2d", "ppo"): (3588.5, 756.6),
    ("ant", "npg"): (2358.0, 517.5), ("ant", "trpo"): (2866.7, 707.9), ("ant", "ppo"): (3258.4, 1079.3),
    ("humanoid", "npg"): (765.1, 91.3), ("humanoid", "trpo"): (810.1, 126.1), ("humanoid", "ppo"): (787.1, 193.5),
    ("inverted_double_pendulum", "npg"): (9243.2, 276.0), ("inverted_double_pendulum", "trpo"): (8435.2, 1073.3),
    ("inverted_double_pendulum", "ppo"): (9231.3, 270.4),
    ("ant", "a2c"): (3485.4, 433.1), ("halfcheetah", "a2c"): (1829.9, 1068.3), ("hopper", "a2c"): (1253.2, 458.0),
    ("walker2d", "a2c"): (1091.6, 709.2), ("humanoid", "a2c"): (1726.0, 1070.1),
    ("inverted_double_pendulum", "a2c"): (9257.7, 277.4),
}
PEER_ALGOS = {"tianshou": ("npg", "trpo", "ppo"), "sb3": ("ppo",)}


def commit() -> str:
    """The commit, ``+dirty`` when rlx/ or configs/ differ from it (new configs included)."""
    return git_commit() + ("+dirty" if git_dirty("rlx", "configs", untracked=True) else "")


def machine() -> str:
    from rlx.run.bench import cpu_name

    return f"{cpu_name()}, {os.cpu_count()} cores"


# -- rlx -------------------------------------------------------------------------------


def config_path(env: str, algo: str) -> Path:
    return ROOT / "configs" / "mujoco" / f"{env}_{algo}.yaml"


def run_rlx(env: str, algo: str, seed: int, steps: int, run_root: Path, variant: str | None = None,
            overrides: tuple[str, ...] = ()) -> dict:
    """Train one shipped config (with ``overrides``, ``--set`` style, for an ablation
    ``variant``) in a fresh process; read its metrics.jsonl."""
    tag = f"_{variant}" if variant else ""
    run_dir = run_root / f"{env}_{algo}{tag}_s{seed}_{int(time.time())}"
    cmd = [
        sys.executable, "-m", "rlx", "train", str(config_path(env, algo)), "--run-dir", str(run_dir), "--threads", "1",
        "--set", f"config.seed={seed}", "--set", f"trainer.max_env_steps={steps}", "--set", "trainer.progress=false",
        *(arg for o in overrides for arg in ("--set", o)),
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [(r["env_steps"], r["eval/return_mean"]) for r in rows if r.get("eval/return_mean") is not None]
    return {
        "env_steps": rows[-1]["env_steps"],
        "wall_s": wall,
        "train_wall_s": rows[-1]["wall_s"],
        "evals": evals,
        "run_dir": str(run_dir.relative_to(ROOT)) if run_dir.is_relative_to(ROOT) else str(run_dir),
        "make_kwargs": make_kwargs(env, algo),
    }


def make_kwargs(env: str, algo: str) -> dict:
    """The ``gymnasium.make`` options the shipped config sets (Ant's v3-like switches)."""
    import yaml

    config = yaml.safe_load(config_path(env, algo).read_text())
    return dict((config.get("env_kwargs") or {}).get("make_kwargs") or {})


def env_label(row: dict) -> str:
    """The env's id, with the config's ``make_kwargs`` when it sets any."""
    options = row.get("make_kwargs") or {}
    label = ENVS.get(row["env"], row["env"])
    return label + (" (" + ", ".join(f"{k}={v}" for k, v in sorted(options.items())) + ")" if options else "")


# -- peers (each in its own process: python benchmarks/locomotion.py --peer-run LIB ...) -----


def _seed_everything(seed: int) -> None:
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)


def peer_tianshou(env_id: str, algo: str, seed: int, steps: int) -> dict:
    """tianshou 2.0's NPG / TRPO / PPO with its examples/mujoco hyperparameters."""
    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn
    from torch.distributions import Independent, Normal

    from tianshou.algorithm import NPG, PPO, TRPO
    from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory, LRSchedulerFactoryLinear
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv, VectorEnvNormObs
    from tianshou.trainer import OnPolicyTrainerParams
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic

    _seed_everything(seed)
    ppo = algo == "ppo"
    num_train, per_collect = (8, 2048) if ppo else (16, 1024)
    lr = 3e-4 if ppo else 1e-3
    env = gym.make(env_id)
    train_envs = VectorEnvNormObs(DummyVectorEnv([lambda: gym.make(env_id) for _ in range(num_train)]))
    test_envs = VectorEnvNormObs(DummyVectorEnv([lambda: gym.make(env_id) for _ in range(EVAL_EPISODES)]), update_obs_rms=False)
    test_envs.set_obs_rms(train_envs.get_obs_rms())  # one shared object: tests see the training statistics
    train_envs.seed(seed)
    test_envs.seed(seed)
    state_shape, action_shape = env.observation_space.shape, env.action_space.shape
    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=state_shape, hidden_sizes=[64, 64], activation=nn.Tanh),
        action_shape=action_shape, unbounded=True,
    )
    critic = ContinuousCritic(preprocess_net=Net(state_shape=state_shape, hidden_sizes=[64, 64], activation=nn.Tanh))
    torch.nn.init.constant_(actor.sigma_param, -0.5)
    for m in list(actor.modules()) + list(critic.modules()):
        if isinstance(m, nn.Linear):
            torch.nn.init.orthogonal_(m.weight, gain=np.sqrt(2))
            torch.nn.init.zeros_(m.bias)
    for m in actor.mu.modules():
        if isinstance(m, nn.Linear):
            torch.nn.init.zeros_(m.bias)
            m.weight.data.copy_(0.01 * m.weight.data)
    epoch_steps = min(EVAL_EVERY_STEPS, steps)
    epochs = math.ceil(steps / epoch_steps)
    optim = AdamOptimizerFactory(lr=lr)
    optim.with_lr_scheduler_factory(
        LRSchedulerFactoryLinear(max_epochs=epochs, epoch_num_steps=epoch_steps, collection_step_num_env_steps=per_collect)
    )

    def dist(loc_scale):
        loc, scale = loc_scale
        return Independent(Normal(loc, scale), 1)

    policy = ProbabilisticActorPolicy(
        actor=actor, dist_fn=dist, action_scaling=True, action_bound_method="clip", action_space=env.action_space
    )
    common = dict(policy=policy, critic=critic, optim=optim, gamma=0.99, gae_lambda=0.95, return_scaling=True)
    if ppo:
        algorithm = PPO(
            **common, max_grad_norm=0.5, vf_coef=0.25, ent_coef=0.0, eps_clip=0.2, value_clip=False,
            dual_clip=None, advantage_normalization=False, recompute_advantage=True,
        )
    elif algo == "npg":
        algorithm = NPG(**common, advantage_normalization=True, optim_critic_iters=20, trust_region_size=0.1)
    else:
        algorithm = TRPO(
            **common, advantage_normalization=True, optim_critic_iters=20, trust_region_size=0.1,
            max_kl=0.01, backtrack_coeff=0.8, max_backtracks=10,
        )
    train_collector = Collector[CollectStats](algorithm, train_envs, VectorReplayBuffer(4096, num_train), exploration_noise=True)
    test_collector = Collector[CollectStats](algorithm, test_envs)
    evals: list[tuple[int, float]] = []

    start = time.perf_counter()
    result = algorithm.run_training(
        OnPolicyTrainerParams(
            training_collector=train_collector, test_collector=test_collector, max_epochs=epochs,
            epoch_num_steps=epoch_steps, update_step_num_repetitions=10 if ppo else 1,
            test_step_num_episodes=EVAL_EPISODES, batch_size=64 if ppo else None,
            collection_step_num_env_steps=per_collect, test_in_training=False, verbose=False, show_progress=False,
        )
    )
    wall = time.perf_counter() - start
    test_collector.reset()
    final = test_collector.collect(n_episode=EVAL_EPISODES)
    return {
        "env_steps": int(result.train_step),
        "wall_s": wall,
        "max_eval": float(result.best_reward),
        "final_eval": float(final.returns_stat.mean),
        "evals": evals,
    }


def peer_sb3(env_id: str, algo: str, seed: int, steps: int) -> dict:
    """Stable-Baselines3's PPO, its defaults, one env behind VecNormalize."""
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    _seed_everything(seed)
    train_env = VecNormalize(DummyVecEnv([lambda: gym.make(env_id)]), gamma=0.99)
    eval_env = VecNormalize(
        DummyVecEnv([lambda: gym.make(env_id) for _ in range(EVAL_EPISODES)]), training=False, norm_reward=False
    )
    evals: list[tuple[int, float]] = []

    def evaluate(model) -> float:
        eval_env.obs_rms = train_env.obs_rms.copy()
        mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
        return float(mean)

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY_STEPS == 0:
                evals.append((self.num_timesteps, evaluate(self.model)))
            return True

    model = PPO("MlpPolicy", train_env, seed=seed, device="cpu", verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=steps, callback=Evaluate())
    wall = time.perf_counter() - start
    final = evaluate(model)
    evals.append((steps, final))
    return {"env_steps": int(model.num_timesteps), "wall_s": wall, "evals": evals}


PEERS = {"tianshou": peer_tianshou, "sb3": peer_sb3}


def run_peer(lib: str, env: str, algo: str, seed: int, steps: int, python: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    cmd = [python, __file__, "--peer-run", lib, "--envs", env, "--algos", algo, "--seeds", str(seed),
           "--steps", str(steps), "--peer-out", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        return json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)


# -- sync or async gymnasium vectorization ---------------------------------------------


def measure_vectorization(env: str, sizes: list[int], repeats: int = 3, steps: int = 300) -> list[dict]:
    """Env steps per second of ``GymnasiumEnv`` (random actions, one torch thread) with
    gymnasium's sync and async vector envs, alternated, median of ``repeats``."""
    import torch

    from rlx.envs import GymnasiumEnv

    torch.set_num_threads(1)
    rates: dict[tuple[str, int], list[float]] = {}
    for _ in range(repeats):
        for mode in ("sync", "async"):
            for B in sizes:
                vec = GymnasiumEnv.factory(ENVS[env], vectorization=mode)(B, None, device="cpu")
                vec.reset()
                actions = torch.zeros(B, *vec.action_spec.shape)
                for _ in range(20):
                    vec.step(actions)
                start = time.perf_counter()
                for _ in range(steps):
                    vec.step(actions.uniform_(-1, 1))
                rates.setdefault((mode, B), []).append(steps * B / (time.perf_counter() - start))
                vec.close()
    return [{"env": env, "vectorization": mode, "num_envs": B, "steps_per_s": statistics.median(r), "repeats": repeats}
            for (mode, B), r in rates.items()]


# -- records and the table ------------------------------------------------------------


def summarize(result: dict) -> dict:
    evals = result.get("evals") or []
    returns = [r for _, r in evals if r is not None and not math.isnan(r)]
    result.setdefault("max_eval", max(returns) if returns else math.nan)
    result.setdefault("final_eval", returns[-1] if returns else math.nan)
    return result


def load(path: Path = RESULTS) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _mean_std(values: list[float]) -> str:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return "n/a"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.1f} ± {std:.1f}"


def run_key(r: dict) -> tuple:
    """What makes two records the same run: library, env, algorithm, ablation variant, seed, steps."""
    return r["lib"], r["env"], r["algo"], r.get("variant"), r["seed"], r["steps"]


def latest(rows: list[dict]) -> list[dict]:
    """One record per run key (:func:`run_key`): the latest, so a rerun replaces a run
    instead of counting its seed twice."""
    by_key = {run_key(r): r for r in rows}
    return list(by_key.values())


def table(rows: list[dict]) -> str:
    """Markdown: per (env, algo, lib, steps), tianshou's metric over seeds (the latest run
    of each), the final evaluation, the mean wall-clock, and tianshou's published figure."""
    groups: dict[tuple, list[dict]] = {}
    for r in latest(rows):
        algo = r["algo"] + (f" [{r['variant']}]" if r.get("variant") else "")
        groups.setdefault((r["env"], algo, r["lib"], r["steps"]), []).append(r)
    order = {e: i for i, e in enumerate(ENVS)}
    lines = [
        "| env | algo | library | env steps | seeds | max eval (mean ± std) | final eval (mean ± std) | "
        "tianshou published | wall-clock (mean, s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (env, algo, lib, steps), group in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1:])):
        pub = TIANSHOU_PUBLISHED.get((env, algo.split(" [")[0]))
        published = f"{pub[0]:.1f} ± {pub[1]:.1f}" if pub and steps == 1_000_000 else "n/a"
        lines.append(
            f"| {' / '.join(sorted({env_label(r) for r in group}))} | {algo} | {lib} | {steps:,} | {len(group)} | "
            f"{_mean_std([r['max_eval'] for r in group])} | {_mean_std([r['final_eval'] for r in group])} | "
            f"{published} | {statistics.mean(r['wall_s'] for r in group):.0f} |"
        )
    return "\n".join(lines) + "\n"


def write_table(rows: list[dict], path: Path = TABLE) -> None:
    header = (
        "# MuJoCo locomotion (gymnasium v5)\n\n"
        f"Written by `python benchmarks/locomotion.py` from `{path.with_suffix('.jsonl').name}`. "
        "\"max eval\" is tianshou's metric: "
        "the max over evaluations (every ~30k env steps) of the mean deterministic return of 10 test "
        "episodes, then mean ± sample std (n - 1) over seeds; \"final eval\" is the last evaluation. tianshou's "
        "published figures are from its examples/mujoco README (v3 envs, 10 seeds). Wall-clock: one "
        "process with one torch thread per run, evaluations included, on "
        f"{machine()}. tianshou rows use its own test (its example's stochastic policy); rlx and SB3 rows "
        "a deterministic one.\n\n"
    )
    path.write_text(header + table(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", choices=list(ENVS), default=["halfcheetah"])
    parser.add_argument("--algos", nargs="+", choices=ALGOS, default=["ppo", "npg", "trpo"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--libs", nargs="+", choices=LIBS, default=["rlx"])
    parser.add_argument("--peer-python", default=sys.executable, help="python with the peer libraries installed")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each one process, one thread)")
    parser.add_argument("--skip-done", action="store_true", help="skip runs already in the results file")
    parser.add_argument("--table-only", action="store_true", help="rewrite the table from the results file")
    parser.add_argument("--run-root", default=str(ROOT / "runs" / "mujoco"))
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--variant", help="an ablation's name, recorded with its runs (use with --set and --out)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field of the shipped rlx config (repeatable), as rlx train --set")
    parser.add_argument("--vectorization", action="store_true",
                        help="only measure sync vs async gymnasium vector envs on --envs (B = 8, 16)")
    parser.add_argument("--peer-run", choices=list(PEERS), help=argparse.SUPPRESS)
    parser.add_argument("--peer-out", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.peer_run:  # a child process of run_peer
        result = PEERS[args.peer_run](ENVS[args.envs[0]], args.algos[0], args.seeds[0], args.steps)
        Path(args.peer_out).write_text(json.dumps(result))
        return

    out = Path(args.out)
    if args.vectorization:
        for env in args.envs:
            for row in measure_vectorization(env, [8, 16]):
                row.update(commit=commit(), machine=machine(), finished=time.strftime("%Y-%m-%dT%H:%M:%S"))
                append_results(out.with_name("mujoco_vectorization.jsonl"), row)
                print(f"{env} {row['vectorization']:5s} B={row['num_envs']:2d}: {row['steps_per_s']:,.0f} env steps/s")
        return
    if args.table_only:
        write_table(load(out), out.with_suffix(".md"))
        print(table(load(out)))
        return
    if args.overrides and not args.variant:
        parser.error("--set changes the shipped config: name the ablation with --variant")
    done = {run_key(r) for r in load(out)} if args.skip_done else set()
    jobs = []
    for env in args.envs:
        for algo in args.algos:
            for lib in args.libs:
                if lib != "rlx" and algo not in PEER_ALGOS[lib]:
                    continue
                for seed in args.seeds:
                    if (lib, env, algo, args.variant, seed, args.steps) not in done:
                        jobs.append((lib, env, algo, seed))
    print(f"{len(jobs)} runs, {args.jobs} at a time; results -> {out}", flush=True)
    rev, host = commit(), machine()
    lock = threading.Lock()

    def one(job: tuple) -> dict:
        lib, env, algo, seed = job
        if lib == "rlx":
            result = run_rlx(env, algo, seed, args.steps, Path(args.run_root), args.variant, tuple(args.overrides))
        else:
            result = run_peer(lib, env, algo, seed, args.steps, args.peer_python)
        record = {
            "lib": lib, "env": env, "algo": algo, "seed": seed, "steps": args.steps, **summarize(result),
            **({"variant": args.variant, "overrides": args.overrides} if args.variant else {}),
            "commit": rev, "machine": host, "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        with lock:  # one line per finished run, appended at once
            append_results(out, record)
            write_table(load(out), out.with_suffix(".md"))
        print(f"{lib} {env} {algo} seed {seed}: max eval {record['max_eval']:.1f}, final {record['final_eval']:.1f}, "
              f"{record['wall_s']:.0f} s", flush=True)
        return record

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for future in [pool.submit(one, job) for job in jobs]:
            try:
                future.result()
            except Exception as e:  # one failed run must not end the others
                print(f"FAILED: {type(e).__name__}: {e}", flush=True)
    print(table(load(out)))


if __name__ == "__main__":
    main()
