"""The suite's measurements: throughput, the graphed-collect check, time to solve and rl8
side by side. Each returns the fields of one results row."""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

from common import train_until
from gpu.settings import CHECKED_KEYS, GOALS, HIDDENS, Sizes


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
    """Collect, update and end-to-end throughput of one grid point (see :func:`rlx.run.bench.bench_one`)."""
    from rlx.run.bench import bench_one

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
    from rlx.core.cuda_graphs import GRAPH_WARMUPS

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
    # Judged on the rollout before training on it.
    run = train_until(algo, key, goal, max_env_steps=max_env_steps, budget_s=budget_s)
    return {
        "solved": run.solved, "seconds": run.seconds, "env_steps": run.env_steps, "iterations": run.iterations,
        "best": run.best if run.best > -math.inf else math.nan, "metric": key, "goal": goal,
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
    from rlx.core.cuda_graphs import GRAPH_WARMUPS
    from rlx.run.bench import _sync

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
