"""rlx against rl8, side by side in one process, on rl8's own dummy envs.

    pip install 'rlx[bench]'     # rl8 1.0.0 (pulls mlflow-skinny and pandas)
    python benchmarks/compare_rl8.py [--num-envs 64 1024 4096] [--repeats 5] [--threads 2] [--device cpu]

Both libraries run rl8's ``DiscreteDummyEnv`` and ``ContinuousDummyEnv`` classes
unchanged, with the same settings: 256x256 separate ReLU actor and critic MLPs, T=32,
minibatch = the whole buffer, 4 epochs, rl8's env reset every collect
(``horizons_per_env_reset=1``), reward normalization on. For each B it alternates rl8 and
rlx iterations and reports medians of collect, step and end-to-end env steps/s, and the
rlx / rl8 ratio of each (above 1: rlx is faster); step samples/s here is N / step time
(``rlx bench`` counts N x epochs). rlx runs with its defaults, which include its own
implementation choices: the whole-buffer minibatch in 2048-row micro-batches on a CPU
(the same gradient) and fused Adam (the same update up to rounding). Its opt-in
switches, which rl8 lacks, are off unless asked for: ``--compile`` (``compile=True``)
and ``--amp`` (``enable_amp=True``: bf16 autocast in the update (fp16 on a GPU before Ampere);
rl8 stays float32). Every row records them. Two untimed warm-up iterations per library.

A third column is the no-framework ceiling (``--no-ceiling`` skips it): :class:`Ceiling`
does the same work in plain eager torch, as short as it can be written, with the same
nets, env class, buffer and epochs (the actor alone in the T loop, the values in
2048-row passes after it, GAE, then whole-buffer PPO with fused Adam). Its rate over
rl8's is the most any eager library could show against rl8 on this machine, so a
target above it is out of reach without changing the math (bf16) or leaving eager
execution. Appends to ``benchmarks/results/compare_rl8.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import rlx
from common import append_results, results_path

#: Rows per value pass of the ceiling's critic, as rlx's ``VALUE_PASS_ROWS``.
CEILING_PASS_ROWS = 2048


class Ceiling:
    """rl8's PPO work in plain eager torch with nothing around it: the ceiling.

    Separate 256x256 ReLU actor and critic (the actor's head scaled to a near-uniform
    first policy, as rl8 and rlx start), rl8's env class, a ``[T+1, B]`` buffer, the
    actor alone in the T loop (Gumbel-max sampling for discrete actions, a state-free
    log-std Gaussian for continuous ones), values after it, GAE, and ``epochs`` epochs of
    whole-buffer PPO (clip 0.2, value loss 0.5 MSE, grad clip 5) with fused Adam.
    """

    def __init__(self, env_cls, num_envs: int, horizon: int, *, epochs: int = 4, device: str = "cpu") -> None:
        self.B, self.T, self.epochs, self.device = num_envs, horizon, epochs, torch.device(device)
        self.env = env_cls(num_envs, horizon, device=device)
        self.discrete = env_cls.__name__.startswith("Discrete")
        out = 2 if self.discrete else 1

        def mlp(width_out: int) -> nn.Sequential:
            return nn.Sequential(nn.Linear(1, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, width_out)).to(device)

        self.actor, self.critic = mlp(out), mlp(1)
        with torch.no_grad():  # a near-uniform first policy, as rl8 and rlx initialise theirs
            self.actor[-1].weight.mul_(0.01)
            self.actor[-1].bias.zero_()
        self.log_std = nn.Parameter(torch.zeros(1, device=device))
        self.params = [*self.actor.parameters(), *self.critic.parameters(), self.log_std]
        self.opt = torch.optim.Adam(self.params, lr=1e-3, fused=True)
        B, T = num_envs, horizon
        self.obs = torch.zeros(T + 1, B, 1, device=device)
        self.actions = torch.zeros(T, B, 1, dtype=torch.long if self.discrete else torch.float32, device=device)
        self.logp = torch.zeros(T, B, 1, device=device)
        self.rewards = torch.zeros(T, B, 1, device=device)
        self.values = torch.zeros(T + 1, B, 1, device=device)
        self.adv = torch.zeros(T, B, 1, device=device)

    def _logp(self, head: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return torch.log_softmax(head, -1).gather(-1, actions)
        return -0.5 * ((actions - head) / self.log_std.exp()).square() - self.log_std - 0.9189385332046727

    @torch.no_grad()
    def collect(self) -> None:
        self.obs[0] = self.env.reset()  # rl8's horizons_per_env_reset=1
        for t in range(self.T):
            head = self.actor(self.obs[t])
            if self.discrete:
                u = torch.rand_like(head).clamp_(min=1e-38)
                a = torch.argmax(head - torch.log(-torch.log(u)), -1, keepdim=True)
            else:
                a = head + self.log_std.exp() * torch.randn_like(head)
            self.actions[t], self.logp[t] = a, self._logp(head, a)
            out = self.env.step(a)
            self.rewards[t], self.obs[t + 1] = out["rewards"], out["obs"]
        flat = self.obs.view(-1, 1)  # [(T+1) B, 1]
        values = self.values.view(-1, 1)
        for lo in range(0, flat.shape[0], CEILING_PASS_ROWS):
            values[lo : lo + CEILING_PASS_ROWS] = self.critic(flat[lo : lo + CEILING_PASS_ROWS])

    def update(self, gamma: float = 0.99, lam: float = 0.95) -> None:
        with torch.no_grad():
            delta = self.rewards + gamma * self.values[1:] - self.values[:-1]
            last = torch.zeros_like(delta[0])
            for t in reversed(range(self.T)):
                last = delta[t] + gamma * lam * last
                self.adv[t] = last
            returns = (self.adv + self.values[:-1]).view(-1, 1)
            adv = self.adv.view(-1, 1)
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        obs, actions, old_logp = self.obs[:-1].reshape(-1, 1), self.actions.view(-1, 1), self.logp.view(-1, 1)
        for _ in range(self.epochs):
            ratio = (self._logp(self.actor(obs), actions) - old_logp).exp()
            pg = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
            vf = 0.5 * (self.critic(obs) - returns).square().mean()
            self.opt.zero_grad(set_to_none=True)
            (pg + vf).backward()
            nn.utils.clip_grad_norm_(self.params, 5.0, foreach=True)
            self.opt.step()


def _timed(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compile", action="store_true",
                        help="rlx side only: AlgorithmConfig(compile=True); the untimed first iteration compiles")
    parser.add_argument("--amp", action="store_true",
                        help="rlx side only: AlgorithmConfig(enable_amp=True), mixed-precision updates")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the no-framework ceiling (plain eager torch)")
    args = parser.parse_args()
    try:
        import rl8
        from rl8.env import ContinuousDummyEnv, DiscreteDummyEnv
    except ImportError as e:
        raise SystemExit(f"compare_rl8 needs rl8: pip install 'rlx[bench]' ({e})")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    T = 32
    rows = []
    for env_cls in (DiscreteDummyEnv, ContinuousDummyEnv):
        for B in args.num_envs:
            theirs = rl8.AlgorithmConfig(num_envs=B, horizon=T, device=args.device).build(env_cls)
            ours = rlx.AlgorithmConfig(
                num_envs=B, horizon=T, device=args.device, seed=0, horizons_per_env_reset=1,
                model_config={"hiddens": [256, 256], "activation_fn": "relu"}, compile=args.compile,
                enable_amp=args.amp,
            ).build(env_cls)
            libs = {"rl8": (theirs.collect, theirs.step), "rlx": (ours.collect, ours.step)}
            if not args.no_ceiling:
                ceiling = Ceiling(env_cls, B, T, device=args.device)
                libs["ceiling"] = (ceiling.collect, ceiling.update)
            times = {f"{lib}_{phase}": [] for lib in libs for phase in ("collect", "step")}
            for i in range(args.repeats + 2):
                for lib, (collect, step) in libs.items():  # interleaved: a slow spell hits all
                    c, s = _timed(collect, device), _timed(step, device)
                    if i >= 2:
                        times[f"{lib}_collect"].append(c)
                        times[f"{lib}_step"].append(s)
            n = B * T
            row = {"env": env_cls.__name__, "num_envs": B}
            for lib in libs:
                row[f"{lib}_collect_steps_per_s"] = n / statistics.median(times[f"{lib}_collect"])
                row[f"{lib}_step_samples_per_s"] = n / statistics.median(times[f"{lib}_step"])
                row[f"{lib}_end_to_end_steps_per_s"] = n / statistics.median(
                    [a + b for a, b in zip(times[f"{lib}_collect"], times[f"{lib}_step"])]
                )
            for phase in ("collect_steps_per_s", "step_samples_per_s", "end_to_end_steps_per_s"):
                row[f"ratio_{phase}"] = row[f"rlx_{phase}"] / row[f"rl8_{phase}"]
                if "ceiling" in libs:  # the most an eager library could show against rl8
                    row[f"ceiling_ratio_{phase}"] = row[f"ceiling_{phase}"] / row[f"rl8_{phase}"]
            rows.append(row)
            print(
                f"{env_cls.__name__:18s} B={B:5d}  collect rl8 {row['rl8_collect_steps_per_s']:10,.0f}/s rlx "
                f"{row['rlx_collect_steps_per_s']:10,.0f}/s ({row['ratio_collect_steps_per_s']:.2f}x)  step "
                f"{row['ratio_step_samples_per_s']:.2f}x  end-to-end rl8 {row['rl8_end_to_end_steps_per_s']:9,.0f}/s "
                f"rlx {row['rlx_end_to_end_steps_per_s']:9,.0f}/s ({row['ratio_end_to_end_steps_per_s']:.2f}x)",
                flush=True,
            )
            if "ceiling" in libs:
                print(
                    f"{'':18s} ceiling / rl8:  collect {row['ceiling_ratio_collect_steps_per_s']:.2f}x  step "
                    f"{row['ceiling_ratio_step_samples_per_s']:.2f}x  end-to-end {row['ceiling_ratio_end_to_end_steps_per_s']:.2f}x",
                    flush=True,
                )
    append_results(results_path("compare_rl8"), rows, compile=args.compile, amp=args.amp, device=args.device,
                   threads=args.threads, rl8=getattr(rl8, "__version__", "1.0.0"))


if __name__ == "__main__":
    main()
