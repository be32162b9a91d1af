"""Wall-clock and env steps to solve CartPole and Pendulum: rlx against what users pick instead.

    python benchmarks/time_to_solve.py [--seeds 0 1 2] [--systems rlx_ppo rlx_npg torchrl_ppo sb3_ppo rl8_ppo]
        [--tasks cartpole pendulum] [--budget-s 120] [--threads 2]

Goals: a mean episode length >= 475 on CartPole (gymnasium CartPole-v1 dynamics) and a mean
return >= -250 on Pendulum, measured on the episodes that ended in the latest rollout.
Times count training only: imports, model and env construction are excluded; each run
gives up after ``--budget-s`` seconds. Every system is judged on a rollout before it
trains on it. Medians over the seeds.

Systems (each skipped, with a line saying so, when its package is not installed):

* ``rlx_ppo``, ``rlx_npg``: the shipped configs ``configs/{cartpole,pendulum}_{ppo,npg}.yaml``.
* ``torchrl_ppo``: TorchRL's own PPO pieces (``SyncDataCollector``, ``GAE``,
  ``ClipPPOLoss``, a ``ReplayBuffer`` sampling without replacement) on rlx's batched
  CartPole through :func:`rlx.envs.to_torchrl`, so the env costs the same; two settings:
  rlx's CartPole hyperparameters (B=32, T=64, 10 epochs, 4 minibatches, lr 2e-3,
  64x64 tanh) and B=512, T=64 with 4 epochs of 8 minibatches. Its losses are weighted as
  rlx's (critic 0.5 (V - R)^2) and GAE runs once per rollout, as in rlx, not once per
  epoch as in TorchRL's tutorial. TorchRL keeps its own weight initialisation.
* ``sb3_ppo``: Stable-Baselines3's PPO with the RL-Zoo ``CartPole-v1`` hyperparameters (8
  gymnasium envs, n_steps 32, batch 256, 20 epochs, gamma 0.98, lambda 0.8, linear lr
  1e-3 and clip 0.2 schedules to 0 over RL-Zoo's 1e5 steps, which is also its step
  budget). Its 256-step rollouts hold one or two CartPole episodes near the goal, so it
  is judged on the episodes of its latest 2048 steps (8 rollouts), one rlx collect's
  worth.
* ``rl8_ppo``: rl8 1.0.0 on rlx's CartPole at B=512, T=64 (rl8 sees only observations and
  rewards: it has no episode ends, so its values bootstrap across them). Run twice: with
  gymnasium's reward (+1 per step) and with a failure penalty (0 per step, -1 on
  failure), which an infinite-horizon learner can optimise.

Pendulum is run for the rlx systems only. Appends every run to
``benchmarks/results/time_to_solve.jsonl`` and prints a markdown table of medians.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any, Callable

import torch
from torch import nn

from common import ROOT, append_results, results_path, train_until
from rlx.envs import CartPole

#: RL-Zoo's ``n_timesteps`` for PPO on CartPole-v1, the length of its linear lr and clip schedules.
RL_ZOO_CARTPOLE_STEPS = 100_000
GOALS = {"cartpole": ("episodes/length_mean", 475.0), "pendulum": ("episodes/return_mean", -250.0)}


class Result(dict):
    """One run: solved, env_steps, seconds, best."""


def _result(solved: bool, env_steps: int, seconds: float, best: float) -> Result:
    return Result(solved=solved, env_steps=int(env_steps), seconds=seconds, best=best)


# -- rlx ---------------------------------------------------------------------------------


def run_rlx(algo_name: str, task: str, seed: int, budget_s: float) -> Result:
    from rlx.run.trainer import load_run_config

    run = load_run_config(ROOT / "configs" / f"{task}_{algo_name}.yaml", [f"config.seed={seed}"])
    algo = run.config.build(run.env_cls)
    # Judged on the rollout before training on it, as every system here is.
    training = train_until(algo, *GOALS[task], budget_s=budget_s)
    return _result(training.solved, training.env_steps, training.seconds, training.best)


# -- TorchRL -----------------------------------------------------------------------------


def run_torchrl(seed: int, budget_s: float, *, num_envs: int, horizon: int, epochs: int, minibatches: int, lr: float) -> Result:
    from tensordict.nn import TensorDictModule
    try:  # TorchRL >= 0.11 renamed SyncDataCollector to Collector
        from torchrl.collectors import Collector as SyncDataCollector
    except ImportError:
        from torchrl.collectors import SyncDataCollector
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
    from torchrl.modules import MLP, ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    from rlx.envs import to_torchrl

    torch.manual_seed(seed)
    env = to_torchrl(CartPole(num_envs))
    actor = ProbabilisticActor(
        TensorDictModule(MLP(in_features=4, out_features=2, num_cells=[64, 64], activation_class=nn.Tanh),
                         in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"], distribution_class=torch.distributions.Categorical, spec=env.action_spec,
        return_log_prob=True,
    )
    critic = ValueOperator(MLP(in_features=4, out_features=1, num_cells=[64, 64], activation_class=nn.Tanh),
                           in_keys=["observation"])
    n = num_envs * horizon
    collector = SyncDataCollector(env, actor, frames_per_batch=n, total_frames=-1)
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=critic, average_gae=True)
    # TorchRL's "l2" critic loss is (V - R)^2; rlx's is 0.5 (V - R)^2 with vf_coeff 1.
    loss_fn = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_bonus=False, critic_coeff=0.5, loss_critic_type="l2")
    optimizer = torch.optim.Adam(loss_fn.parameters(), lr=lr)
    buffer = ReplayBuffer(storage=LazyTensorStorage(n), sampler=SamplerWithoutReplacement(), batch_size=n // minibatches)
    running = torch.zeros(num_envs)
    best = -math.inf
    env_steps = 0
    start = time.perf_counter()
    for data in collector:  # [B, T]
        env_steps += n
        done = data.get(("next", "done")).reshape(num_envs, -1)  # [B, T]
        lengths = []
        for t in range(done.shape[1]):
            running += 1
            lengths.append(running[done[:, t]])
            running[done[:, t]] = 0
        ended = torch.cat(lengths)
        if ended.numel():
            mean = ended.float().mean().item()
            best = max(best, mean)
            if mean >= 475:
                collector.shutdown()
                return _result(True, env_steps, time.perf_counter() - start, best)
        # GAE once per rollout, with the values before the update, as rlx (and rl8,
        # SB3) do; TorchRL's tutorial recomputes it every epoch, 10x the value passes.
        with torch.no_grad():
            advantage(data)
        buffer.extend(data.reshape(-1))
        for _ in range(epochs):
            for _ in range(minibatches):
                batch = buffer.sample()
                losses = loss_fn(batch)
                total = losses["loss_objective"] + losses["loss_critic"]
                optimizer.zero_grad()
                total.backward()
                torch.nn.utils.clip_grad_norm_(loss_fn.parameters(), 0.5)
                optimizer.step()
        collector.update_policy_weights_()
        if time.perf_counter() - start > budget_s:
            break
    collector.shutdown()
    return _result(False, env_steps, time.perf_counter() - start, best)


# -- Stable-Baselines3 -------------------------------------------------------------------


def run_sb3(seed: int, budget_s: float) -> Result:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    def linear(initial: float) -> Callable[[float], float]:
        return lambda progress_remaining: progress_remaining * initial

    class Goal(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.lengths: list[int] = []
            self.rollouts: list[list[int]] = []
            self.best = -math.inf
            self.solved_at: tuple[int, float] | None = None
            self.start = 0.0

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.lengths.append(info["episode"]["l"])
            return self.solved_at is None and time.perf_counter() - self.start < budget_s

        def _on_rollout_end(self) -> None:
            # Judge on the episodes of the latest 2048 env steps (8 rollouts of 256), as
            # much data as one collect of rlx's CartPole config: one rollout's one or two
            # episodes would call a lucky 500 solved.
            self.rollouts.append(self.lengths)
            self.lengths = []
            window = self.rollouts[-(2048 // 256):]
            ended = [n for rollout in window for n in rollout]
            if len(self.rollouts) >= 8 and ended:
                mean = sum(ended) / len(ended)
                self.best = max(self.best, mean)
                if mean >= 475 and self.solved_at is None:
                    self.solved_at = (self.num_timesteps, time.perf_counter() - self.start)

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO(
        "MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
        learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, device="cpu", verbose=0,
    )
    goal = Goal()
    # RL-Zoo's n_timesteps: the linear schedules reach 0 there, so a run unsolved by then is unsolved.
    model.learn(total_timesteps=RL_ZOO_CARTPOLE_STEPS, callback=goal)
    if goal.solved_at is not None:
        return _result(True, goal.solved_at[0], goal.solved_at[1], goal.best)
    return _result(False, model.num_timesteps, time.perf_counter() - goal.start, goal.best)


# -- rl8 ---------------------------------------------------------------------------------


def run_rl8(seed: int, budget_s: float, *, reward: str) -> Result:
    import rl8
    from tensordict import TensorDict
    from torchrl.data import Categorical

    class RecordedCartPole(CartPole):
        """rlx's CartPole as rl8 sees it: observations and rewards only, and an action
        spec of shape [1] as rl8 requires; the episode lengths are recorded on the side
        for the goal check."""

        ended: list[torch.Tensor] = []

        def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
            super().__init__(num_envs, horizon, device=device)
            self.action_spec = Categorical(2, shape=(1,), device=self.device)

        def step(self, actions: torch.Tensor) -> TensorDict:
            steps = self.steps + 1
            out = super().step(actions)
            done = (out["terminated"] | out["truncated"]).squeeze(-1)
            RecordedCartPole.ended.append(steps[done])
            rewards = out["rewards"] if reward == "gymnasium" else -out["terminated"].float()
            return TensorDict({"obs": out["obs"], "rewards": rewards}, batch_size=[self.num_envs])

    torch.manual_seed(seed)
    algo = rl8.AlgorithmConfig(
        num_envs=512, horizon=64, horizons_per_env_reset=-1, gamma=0.99, gae_lambda=0.95, num_sgd_iters=4,
        sgd_minibatch_size=4096, optimizer_config={"lr": 1e-3}, device="cpu",
        model_config={"hiddens": [64, 64], "activation_fn": "tanh"},
    ).build(RecordedCartPole)
    best = -math.inf
    env_steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < budget_s:
        RecordedCartPole.ended = []
        algo.collect()
        env_steps += 512 * 64
        ended = torch.cat(RecordedCartPole.ended)
        if ended.numel():
            mean = ended.float().mean().item()
            best = max(best, mean)
            if mean >= 475:
                return _result(True, env_steps, time.perf_counter() - start, best)
        algo.step()
    return _result(False, env_steps, time.perf_counter() - start, best)


# -- main --------------------------------------------------------------------------------


def _runners(task: str, budget_s: float) -> dict[str, Callable[[int], Result]]:
    runners: dict[str, Callable[[int], Result]] = {
        "rlx_ppo": lambda seed: run_rlx("ppo", task, seed, budget_s),
        "rlx_npg": lambda seed: run_rlx("npg", task, seed, budget_s),
    }
    if task == "cartpole":
        runners.update({
            "torchrl_ppo (rlx hparams, B=32)": lambda seed: run_torchrl(
                seed, budget_s, num_envs=32, horizon=64, epochs=10, minibatches=4, lr=2e-3),
            "torchrl_ppo (B=512)": lambda seed: run_torchrl(
                seed, budget_s, num_envs=512, horizon=64, epochs=4, minibatches=8, lr=1e-3),
            "sb3_ppo (RL-Zoo)": lambda seed: run_sb3(seed, budget_s),
            "rl8_ppo (failure penalty)": lambda seed: run_rl8(seed, budget_s, reward="penalty"),
            "rl8_ppo (gymnasium reward)": lambda seed: run_rl8(seed, budget_s, reward="gymnasium"),
        })
    return runners


def _available(system: str) -> str | None:
    module = {"torchrl": "torchrl", "sb3": "stable_baselines3", "rl8": "rl8"}.get(system.split("_")[0])
    if module is None:
        return None
    try:
        __import__(module)
    except ImportError as e:
        return f"{module} is not installed ({e})"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--systems", nargs="+", default=["rlx_ppo", "rlx_npg", "torchrl_ppo", "sb3_ppo", "rl8_ppo"])
    parser.add_argument("--tasks", nargs="+", default=["cartpole", "pendulum"], choices=list(GOALS))
    parser.add_argument("--budget-s", type=float, default=120.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    table = ["| task | system | solved | median env steps | median seconds | best (median) |", "|---|---|---|---|---|---|"]
    for task in args.tasks:
        for name, runner in _runners(task, args.budget_s).items():
            if not any(name.startswith(s) for s in args.systems):
                continue
            missing = _available(name)
            if missing:
                print(f"{task} {name}: skipped, {missing}", flush=True)
                continue
            results = []
            for seed in args.seeds:
                result = runner(seed)
                results.append(result)
                print(f"{task} {name} seed {seed}: {'solved' if result['solved'] else 'NOT solved'} in "
                      f"{result['env_steps']:,} env steps, {result['seconds']:.1f} s (best {result['best']:.1f})", flush=True)
                append_results(results_path("time_to_solve"), {"task": task, "system": name, "seed": seed, **result},
                               threads=args.threads, budget_s=args.budget_s)
            solved = [r for r in results if r["solved"]]
            steps = f"{statistics.median(r['env_steps'] for r in solved):,.0f}" if solved else "-"
            # Unsolved seeds count as the whole budget: a lower bound on their time.
            seconds = statistics.median(r["seconds"] for r in results)
            best = statistics.median(r["best"] for r in results)
            table.append(f"| {task} | {name} | {len(solved)}/{len(results)} | {steps} | "
                         f"{seconds:.1f}{'' if len(solved) == len(results) else '+'} | {best:.1f} |")
    print("\n".join(table))


if __name__ == "__main__":
    main()
