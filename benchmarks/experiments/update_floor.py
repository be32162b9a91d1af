"""One PPO minibatch update, three ways, at vs_jax.py's shapes: where the CPU gap to JAX is.

    python benchmarks/experiments/update_floor.py [--samples 512 8192] [--rounds 5] [--threads 1]

The update of ``vs_jax.py`` (CartPole's 4 observations and 2 actions, separate 64x64 tanh
actor and critic, the clipped surrogate, half the squared value error, Adam with the
gradient clipped to a global norm 0.5) on one minibatch of ``--samples`` rows, timed per
update, interleaved, median over rounds:

* ``jax``: 16 updates as one jitted ``lax.scan`` (``jax_ppo.py``'s loss and optimizer),
  the time divided by 16: JAX's whole-program update, no per-call cost at all;
* ``torch floor``: the same update written as one plain function (``torch.func.grad``,
  the clip and Adam written out) and compiled with rlx's inductor options, called 16
  times: what a compiled torch update costs with nothing else in it;
* ``rlx fused``: rlx's own compiled update (``PPO.minibatch_update``, compiled whole) on a real
  minibatch of a CartPole PPO with ``compile=True``, called 16 times (its losses also
  carry the statistics rlx reports: KL, clip fraction, entropy).

At 512 rows the per-call cost of a compiled torch program shows; at 8192 the arithmetic
(MKL's GEMMs and inductor's C++ kernels against XLA's fused program). Results:
``benchmarks/experiments/results/update_floor.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

UPDATES = 16


def jax_update(samples: int):
    import jax
    import jax.numpy as jnp
    import optax
    from jax_ppo import ActorCritic, PPOSettings, optimizer, ppo_loss

    s = PPOSettings()
    net, tx, loss_fn = ActorCritic(actions=2, hidden=s.hidden), optimizer(s), ppo_loss(s)
    key = jax.random.PRNGKey(0)
    obs = jax.random.normal(key, (UPDATES, samples, 4))
    mbs = (obs, jax.random.randint(key, (UPDATES, samples), 0, 2), jnp.full((UPDATES, samples), -0.69),
           jax.random.normal(key, (UPDATES, samples)), jax.random.normal(key, (UPDATES, samples)))
    params = net.init(key, obs[0, :1])

    def run(params, opt_state, mbs):
        def minibatch(c, mb):
            params, opt_state = c
            updates, opt_state = tx.update(jax.grad(loss_fn)(params, mb), opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), None

        return jax.lax.scan(minibatch, (params, opt_state), mbs)[0]

    program = jax.jit(run).lower(params, tx.init(params), mbs).compile()
    state = (params, tx.init(params))

    def call() -> None:
        nonlocal state
        state = jax.block_until_ready(program(*state, mbs))

    return call


def torch_floor(samples: int):
    import torch
    from torch.func import grad_and_value

    from rlx.core.compiling import compiled

    def mlp(out: int) -> torch.nn.Sequential:
        return torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                   torch.nn.Linear(64, out))

    params = [p.detach().clone() for p in [*mlp(2).parameters(), *mlp(1).parameters()]]
    exp_avg, exp_avg_sq = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    step = torch.zeros(())
    obs, actions = torch.randn(samples, 4), torch.randint(0, 2, (samples,))
    old_logp, adv, targets = torch.full((samples,), -0.69), torch.randn(samples), torch.randn(samples)

    def forward(ps: list, x: torch.Tensor) -> torch.Tensor:
        for i in range(0, 6, 2):
            x = torch.nn.functional.linear(x, ps[i], ps[i + 1])
            x = torch.tanh(x) if i < 4 else x
        return x

    def loss(ps: list) -> tuple:
        logp_all = torch.log_softmax(forward(ps[:6], obs), -1)
        ratio = (logp_all.gather(1, actions[:, None])[:, 0] - old_logp).exp()
        policy = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
        vf = 0.5 * (forward(ps[6:], obs)[:, 0] - targets).square().mean()
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        total = policy + 0.5 * vf
        return total, torch.stack([total.detach(), policy, vf, entropy])

    def update(ps: list, m: list, v: list, step: torch.Tensor) -> torch.Tensor:
        grads, (_, terms) = grad_and_value(loss, has_aux=True)([p.detach() for p in ps])
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        coef = torch.clamp(0.5 / (norm + 1e-6), max=1.0)
        with torch.no_grad():
            step.add_(1)
            for p, g, m_, v_ in zip(ps, grads, m, v):
                g = g * coef
                m_.lerp_(g, 0.1)
                v_.mul_(0.999).addcmul_(g, g, value=0.001)
                p.sub_((2.5e-3 / (1 - 0.9**step)) * m_ / (v_.sqrt() / torch.sqrt(1 - 0.999**step) + 1e-8))
        return terms

    program = compiled(update, device="cpu")

    def call() -> None:
        for _ in range(UPDATES):
            program(params, exp_avg, exp_avg_sq, step)

    return call


def rlx_fused(samples: int):
    from rlx import AlgorithmConfig
    from rlx.envs import CartPole

    B = samples * 4 // 32  # 4 minibatches of T = 32 columns
    algo = AlgorithmConfig(num_envs=B, horizon=32, num_sgd_iters=4, sgd_minibatch_size=samples,
                           optimizer_config={"lr": 2.5e-3}, vf_clip_param=None, vf_coeff=0.5, entropy_coeff=0.0,
                           max_grad_norm=0.5, model_config={"hiddens": [64, 64], "activation_fn": "tanh"},
                           compile=True).build(CartPole)
    assert algo.compiled_update is not None, algo.compile_fallback
    seen = []
    update = algo.update
    algo.update = lambda mb: seen.append({k: x.clone() for k, x in mb.items()}) or update(mb)
    algo.collect()
    algo.step()  # one real iteration; its first minibatch is the one timed
    algo.update = update
    mb = seen[0]

    def call() -> None:
        for _ in range(UPDATES):
            algo.compiled_update(mb)

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[512, 8192])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    from common import jax_on_cpu_threads

    jax_on_cpu_threads(args.threads)
    import torch
    from common import append_results, results_path

    torch.set_num_threads(args.threads)
    rows = []
    for samples in args.samples:
        sides = {"jax": jax_update(samples), "torch floor": torch_floor(samples), "rlx fused": rlx_fused(samples)}
        times: dict[str, list[float]] = {side: [] for side in sides}
        for call in sides.values():  # warm-up: compiling, first calls
            for _ in range(3):
                call()
        for _ in range(args.rounds):
            for side, call in sides.items():
                start = time.perf_counter()
                call()
                times[side].append((time.perf_counter() - start) / UPDATES)
        jax_ms = statistics.median(times["jax"]) * 1e3
        for side, ts in times.items():
            ms = statistics.median(ts) * 1e3
            rows.append({"side": side, "samples": samples, "ms_per_update": round(ms, 3),
                         "vs_jax": round(jax_ms / ms, 3), "rounds": args.rounds})
            print(f"{samples:>6} rows {side:>12}: {ms:7.3f} ms per update  (JAX / this {jax_ms / ms:4.2f})", flush=True)
    out = results_path("update_floor", Path(__file__).resolve().parent / "results")
    append_results(out, rows, threads=args.threads)
    print(f"results: {out}")


if __name__ == "__main__":
    main()
