"""rlx against rsl_rl 5.5.1's OnPolicyRunner on a VecEnv task with privileged critic state.

    python benchmarks/vs_rsl_rl.py [--device cpu] [--num-envs 1024] [--hidden 128 128] [--iterations 60]
                                   [--seeds 0 1 2] [--schedules adaptive fixed] [--threads 2]

The task, ``WindyReach`` (written for this benchmark): a 2-D point mass of unknown mass
(0.5 to 2) pushed by an unknown constant wind (each component within +-0.5) must reach a
goal within 100 steps (a time-out; no termination). The actor sees the offset to the goal
and the velocity; the critic also sees the wind and the mass (``critic`` group), the
asymmetric actor-critic of the GPU simulators' robot tasks. Reward per step: minus the
distance to the goal, minus 0.01 |a|^2, with actions clipped to [-1, 1].

Both sides train through rsl_rl's ``VecEnv`` interface (rlx through
:class:`rlx.envs.RslRlVecEnv`) with the same settings, rsl_rl's defaults for such tasks:
24 steps per env, [hidden] ELU actor and critic, initial std 1, 5 epochs x 4
minibatches, clip 0.2 with the value clipped alike, value coefficient 1, entropy 0.005,
gamma 0.99, lambda 0.95, max grad norm 1, Adam at lr 1e-3, and either rsl_rl's adaptive
schedule (desired KL 0.01, bounds 1e-5 and 1e-2) or that fixed LR. rlx runs twice: with
its joint gradient clip and with ``clip_grad_per_network=True`` (rsl_rl's rule).

Each run is then evaluated deterministically on 1024 fresh episodes (the same seed for
every run) and scored as a normalized return: 0 is the random policy's, 1 a hand-written
PD controller's (which does not know the wind). Results: the score, the training
wall-clock, per run and the median per setting, in ``benchmarks/results/vs_rsl_rl_<device>.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from tensordict import TensorDict

sys.path.insert(0, str(Path(__file__).resolve().parent))

EPISODE = 100
DT, DRAG = 0.05, 0.98


class WindyReach:
    """rsl_rl ``VecEnv``: reach a goal under an unobserved wind and mass (module docstring)."""

    num_actions = 2
    max_episode_length = EPISODE

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None) -> None:
        self.num_envs, self.device, self.cfg = num_envs, torch.device(device), {}
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed if seed is not None else torch.randint(2**31, ()).item())
        B = num_envs
        self.pos, self.vel, self.goal = (torch.zeros(B, 2, device=self.device) for _ in range(3))
        self.wind = torch.zeros(B, 2, device=self.device)
        self.mass = torch.ones(B, 1, device=self.device)
        self.episode_length_buf = torch.zeros(B, dtype=torch.long, device=self.device)
        self._reset(torch.ones(B, dtype=torch.bool, device=self.device))

    def _uniform(self, shape: tuple[int, ...], low: float, high: float) -> torch.Tensor:
        return torch.rand(shape, generator=self.generator, device=self.device) * (high - low) + low

    def _reset(self, rows: torch.Tensor) -> None:
        B, m = self.num_envs, rows.view(-1, 1)
        self.pos = torch.where(m, self._uniform((B, 2), -1.0, 1.0), self.pos)
        self.goal = torch.where(m, self._uniform((B, 2), -1.0, 1.0), self.goal)
        self.vel = torch.where(m, 0.0, self.vel)
        self.wind = torch.where(m, self._uniform((B, 2), -0.5, 0.5), self.wind)
        self.mass = torch.where(m, self._uniform((B, 1), 0.5, 2.0), self.mass)
        self.episode_length_buf = torch.where(rows, 0, self.episode_length_buf)

    def get_observations(self) -> TensorDict:
        policy = torch.cat([self.goal - self.pos, self.vel], dim=-1)
        critic = torch.cat([self.wind, self.mass], dim=-1)
        return TensorDict({"policy": policy, "critic": critic}, batch_size=[self.num_envs], device=self.device)

    def step(self, actions: torch.Tensor):
        a = actions.clamp(-1.0, 1.0)
        self.vel = (self.vel + DT * (2.0 * a + self.wind) / self.mass) * DRAG
        self.pos = self.pos + DT * self.vel
        rewards = -torch.linalg.vector_norm(self.goal - self.pos, dim=-1) - 0.01 * a.square().sum(-1)
        self.episode_length_buf = self.episode_length_buf + 1
        time_outs = self.episode_length_buf >= EPISODE
        self._reset(time_outs)
        extras = {"time_outs": time_outs, "log": {}}
        return self.get_observations(), rewards, time_outs.clone(), extras


def pd_controller(obs: TensorDict) -> torch.Tensor:
    policy = obs.get("policy")
    return (2.0 * policy[:, :2] - 1.0 * policy[:, 2:]).clamp(-1.0, 1.0)


def episode_return(act, num_envs: int, device: str, seed: int = 12345) -> float:
    """Mean return of one 100-step episode in each of ``num_envs`` fresh sub-envs."""
    env = WindyReach(num_envs, device, seed=seed)
    obs, total = env.get_observations(), torch.zeros(num_envs, device=device)
    with torch.no_grad():
        for _ in range(EPISODE):
            obs, rewards, _, _ = env.step(act(obs))
            total += rewards
    return float(total.mean())


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


def run_rsl_rl(args: argparse.Namespace, schedule: str, seed: int) -> tuple[float, float]:
    import contextlib
    import io

    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(seed)
    env = WindyReach(args.num_envs, args.device, seed=seed)
    with contextlib.redirect_stdout(io.StringIO()):  # its model printout and per-iteration log
        runner = OnPolicyRunner(env, rsl_rl_cfg(args, schedule), log_dir=None, device=args.device)
        start = time.perf_counter()
        runner.learn(args.iterations)
        wall = time.perf_counter() - start
    policy = runner.get_inference_policy(args.device)
    return episode_return(lambda obs: policy(obs), args.num_envs, args.device), wall


def run_rlx(args: argparse.Namespace, schedule: str, seed: int, per_network: bool) -> tuple[float, float]:
    from rlx import AlgorithmConfig
    from rlx.envs import RslRlVecEnv

    make = lambda num_envs, device: WindyReach(num_envs, device, seed=seed)  # noqa: E731
    config = AlgorithmConfig(
        num_envs=args.num_envs, horizon=24, num_sgd_iters=5, sgd_minibatch_size=args.num_envs * 24 // 4,
        clip_param=0.2, vf_clip_param=0.2, vf_coeff=1.0, entropy_coeff=0.005, gamma=0.99, gae_lambda=0.95,
        max_grad_norm=1.0, optimizer_config={"lr": 1e-3}, kl_adaptive_lr=schedule == "adaptive",
        target_kl_div=0.01 if schedule == "adaptive" else None, kl_adaptive_lr_bounds=(1e-5, 1e-2),
        model_config={"hiddens": list(args.hidden), "activation_fn": "elu"},
        obs_groups={"actor": ["policy"], "critic": ["policy", "critic"]},
        clip_grad_per_network=per_network, device=args.device, seed=seed,
    )
    algo = config.build(RslRlVecEnv.factory(make))
    start = time.perf_counter()
    for _ in range(args.iterations):
        algo.collect()
        algo.step()
    wall = time.perf_counter() - start
    return episode_return(lambda obs: algo.policy.act(obs, deterministic=True).env_actions, args.num_envs,
                          args.device), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--hidden", type=int, nargs="+", default=[128, 128])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--schedules", nargs="+", default=["adaptive", "fixed"], choices=["adaptive", "fixed"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from common import append_results, results_path

    random = episode_return(lambda obs: torch.randn(obs.batch_size[0], 2, device=args.device), args.num_envs, args.device)
    pd = episode_return(pd_controller, args.num_envs, args.device)
    print(f"WindyReach: random policy {random:.2f}, PD controller {pd:.2f} (normalized 0 and 1)", flush=True)
    sides = {"rsl_rl": lambda s, seed: run_rsl_rl(args, s, seed),
             "rlx": lambda s, seed: run_rlx(args, s, seed, False),
             "rlx_per_network_clip": lambda s, seed: run_rlx(args, s, seed, True)}
    rows = []
    for schedule in args.schedules:
        scores: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for seed in args.seeds:  # interleaved: every side on a seed before the next seed
            for name, run in sides.items():
                ret, wall = run(schedule, seed)
                score = (ret - random) / (pd - random)
                scores[name].append((score, wall))
                rows.append({"side": name, "schedule": schedule, "seed": seed, "normalized_return": round(score, 4),
                             "return": round(ret, 3), "wall_s": round(wall, 2), "num_envs": args.num_envs,
                             "iterations": args.iterations, "hidden": args.hidden, "device": args.device})
                print(f"{schedule:>8} seed {seed} {name:>22}: normalized {score:6.3f}  wall {wall:6.1f} s", flush=True)
        for name, values in scores.items():
            print(f"{schedule:>8} {name:>22}: scores {' / '.join(f'{s:.3f}' for s, _ in values)}, median "
                  f"{statistics.median(s for s, _ in values):.3f}, median wall {statistics.median(w for _, w in values):.1f} s")
    out = args.out or results_path(f"vs_rsl_rl_{args.device}")
    append_results(out, rows, threads=args.threads, random_return=round(random, 3), pd_return=round(pd, 3))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
