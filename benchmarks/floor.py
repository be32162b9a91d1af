"""The hand-written floor: PPO in plain torch, no framework, against rlx doing the same work.

    python benchmarks/floor.py [--solve-seeds 0 1 2] [--num-envs 1024] [--repeats 7] [--threads 2] [--out FILE]

1. Time to solve CartPole (mean episode length >= 475), hand-written vs rlx, with the same
   hyperparameters (B=32, T=64, 10 epochs, 4 minibatches, lr 2e-3, 64x64 tanh, gamma
   0.99, lambda 0.95, clip 0.2, grad clip 0.5), on rlx's batched CartPole, training time
   only, per seed and median.
2. Per-phase time at ``--num-envs`` (T=32, 4 epochs, 4 minibatches): collect (MLP forward,
   sampling, env step, writes into preallocated tensors) and update (minibatch PPO
   forward/backward/Adam), medians after warm-up, and rlx / floor ratios.

Both run in this process, interleaved, so the ratios are side by side.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from common import append_results, results_path, train_until
from rlx import AlgorithmConfig
from rlx.envs import CartPole


class FloorPPO:
    """About 100 lines of PPO: the least eager torch can do for this work.

    It has the algorithms' interface that :func:`common.train_until` drives: ``collect()``
    returns the rollout's ``episodes/length_mean``, ``step()`` trains on it, and
    ``env_steps`` counts the env steps collected.
    """

    def __init__(self, num_envs: int, horizon: int, *, epochs: int, minibatches: int, lr: float, seed: int) -> None:
        torch.manual_seed(seed)
        self.B, self.T, self.epochs, self.minibatches = num_envs, horizon, epochs, minibatches
        self.env = CartPole(num_envs)

        def mlp(out: int, gain: float) -> nn.Sequential:
            layers = [nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out)]
            for i, layer in enumerate(l for l in layers if isinstance(l, nn.Linear)):
                nn.init.orthogonal_(layer.weight, gain if i == 2 else math.sqrt(2))
                nn.init.zeros_(layer.bias)
            return nn.Sequential(*layers)

        self.actor, self.critic = mlp(2, 0.01), mlp(1, 1.0)
        self.params = list(self.actor.parameters()) + list(self.critic.parameters())
        self.opt = torch.optim.Adam(self.params, lr=lr, fused=True)  # the fastest Adam, as rlx uses
        B, T = num_envs, horizon
        self.obs = torch.zeros(T + 1, B, 4)
        self.actions = torch.zeros(T, B, dtype=torch.long)
        self.logp = torch.zeros(T, B)
        self.values = torch.zeros(T + 1, B)
        self.rewards = torch.zeros(T, B)
        self.term = torch.zeros(T, B, dtype=torch.bool)
        self.trunc = torch.zeros(T, B, dtype=torch.bool)
        self.final_values = torch.zeros(T, B)
        self.adv = torch.zeros(T, B)
        self.obs[0] = self.env.reset()
        self.ep_len = torch.zeros(B)
        self.finished_lengths: list[float] = []
        self.env_steps = 0

    @torch.no_grad()
    def collect(self) -> dict[str, float]:
        self.obs[0] = self.obs[self.T]
        lengths_sum, ended = torch.zeros(()), torch.zeros(())
        for t in range(self.T):
            logits = self.actor(self.obs[t])
            logp_all = torch.log_softmax(logits, -1)
            a = torch.multinomial(logp_all.exp(), 1).squeeze(-1)
            self.actions[t], self.logp[t] = a, logp_all.gather(-1, a[:, None]).squeeze(-1)
            self.values[t] = self.critic(self.obs[t]).squeeze(-1)
            out = self.env.step(a)
            self.rewards[t] = out["rewards"].squeeze(-1)
            self.term[t], self.trunc[t] = out["terminated"].squeeze(-1), out["truncated"].squeeze(-1)
            self.final_values[t] = torch.where(self.trunc[t], self.critic(out["final_obs"]).squeeze(-1), 0.0)
            self.obs[t + 1] = out["obs"]
            self.ep_len += 1
            done = self.term[t] | self.trunc[t]
            lengths_sum += (self.ep_len * done).sum()
            ended += done.sum()
            self.ep_len *= ~done
        self.values[self.T] = self.critic(self.obs[self.T]).squeeze(-1)
        self.env_steps += self.B * self.T
        return {"episodes/length_mean": (lengths_sum / ended).item() if ended > 0 else math.nan}

    def step(self, gamma: float = 0.99, lam: float = 0.95) -> None:
        with torch.no_grad():
            next_v = torch.where(self.term, 0.0, torch.where(self.trunc, self.final_values, self.values[1:]))
            delta = self.rewards + gamma * next_v - self.values[:-1]
            keep = gamma * lam * (~(self.term | self.trunc)).float()
            last = torch.zeros(self.B)
            for t in reversed(range(self.T)):
                last = delta[t] + keep[t] * last
                self.adv[t] = last
            returns = (self.adv + self.values[:-1]).reshape(-1)
            adv = self.adv.reshape(-1)
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        obs, actions, old_logp = self.obs[:-1].reshape(-1, 4), self.actions.reshape(-1), self.logp.reshape(-1)
        n = obs.shape[0]
        m = n // self.minibatches
        for _ in range(self.epochs):
            perm = torch.randperm(n)
            for k in range(self.minibatches):
                idx = perm[k * m : (k + 1) * m]
                logp_all = torch.log_softmax(self.actor(obs[idx]), -1)
                ratio = (logp_all.gather(-1, actions[idx, None]).squeeze(-1) - old_logp[idx]).exp()
                pg = -torch.min(ratio * adv[idx], ratio.clamp(0.8, 1.2) * adv[idx]).mean()
                vf = 0.5 * (self.critic(obs[idx]).squeeze(-1) - returns[idx]).square().mean()
                self.opt.zero_grad(set_to_none=True)
                (pg + vf).backward()
                nn.utils.clip_grad_norm_(self.params, 0.5)
                self.opt.step()


def rlx_algo(num_envs: int, horizon: int, *, epochs: int, minibatches: int, lr: float, seed: int):
    return AlgorithmConfig(
        num_envs=num_envs, horizon=horizon, num_sgd_iters=epochs, sgd_minibatch_size=num_envs * horizon // minibatches,
        optimizer_config={"lr": lr}, model_config={"hiddens": [64, 64], "activation_fn": "tanh"}, gamma=0.99,
        gae_lambda=0.95, clip_param=0.2, vf_clip_param=None, max_grad_norm=0.5, normalize_rewards=False,
        device="cpu", seed=seed,
    ).build(CartPole)


def solve(kind: str, seed: int, budget: int = 300_000) -> tuple[int, float]:
    kwargs = dict(epochs=10, minibatches=4, lr=2e-3, seed=seed)
    algo = FloorPPO(32, 64, **kwargs) if kind == "floor" else rlx_algo(32, 64, **kwargs)
    run = train_until(algo, "episodes/length_mean", 475, max_env_steps=budget, step_on_goal=True)
    return (run.env_steps if run.solved else -1), run.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--solve-seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=results_path("floor"),
                        help="JSON lines file to append to (default benchmarks/results/floor.jsonl)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    record: dict = {"solve": {"floor": [], "rlx": []}, "phases": {}}
    # Seed by seed, floor then rlx: a slow spell of this shared machine hits both.
    for seed in args.solve_seeds:
        for kind in ("floor", "rlx"):
            record["solve"][kind].append(solve(kind, seed))
    for kind, runs in record["solve"].items():
        if runs:
            print(f"{kind:5s} time to solve CartPole: " + ", ".join(f"{s} steps {t:.2f} s" for s, t in runs)
                  + f"  | median {statistics.median(t for _, t in runs):.2f} s")
    B, T = args.num_envs, 32
    kwargs = dict(epochs=4, minibatches=4, lr=2e-3, seed=0)
    floor, algo = FloorPPO(B, T, **kwargs), rlx_algo(B, T, **kwargs)
    times = {k: [] for k in ("floor_collect", "floor_update", "rlx_collect", "rlx_update")}
    for i in range(args.repeats + 2):
        t0 = time.perf_counter(); floor.collect(); t1 = time.perf_counter(); floor.step(); t2 = time.perf_counter()
        algo.collect(); t3 = time.perf_counter(); algo.step(); t4 = time.perf_counter()
        if i >= 2:
            times["floor_collect"].append(t1 - t0); times["floor_update"].append(t2 - t1)
            times["rlx_collect"].append(t3 - t2); times["rlx_update"].append(t4 - t3)
    med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    record["phases"] = {"num_envs": B, "horizon": T, **med}
    print(f"B={B}, T={T}: collect floor {med['floor_collect']:.1f} ms, rlx {med['rlx_collect']:.1f} ms "
          f"(rlx/floor {med['rlx_collect'] / med['floor_collect']:.2f}); update floor {med['floor_update']:.1f} ms, "
          f"rlx {med['rlx_update']:.1f} ms (rlx/floor {med['rlx_update'] / med['floor_update']:.2f})")
    append_results(args.out, record, threads=args.threads)


if __name__ == "__main__":
    main()
