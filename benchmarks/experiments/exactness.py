"""Bit-exact regression harness for refactors: every statistic of 3 short iterations, the
parameters and the optimizer state of 19 runs, saved on one commit and compared on another.

    PYTHONPATH=<old checkout> python benchmarks/experiments/exactness.py save FILE [names...]
    PYTHONPATH=<new checkout> python benchmarks/experiments/exactness.py check FILE [names...]

The runs: PPO (minibatches with the KL early stop, the adaptive LR, accumulation,
schedules with clips, micro-batches, compile), A2C, NPG, TRPO and recurrent PPO, most also
with 3 seeds; CPU, one thread. ``check`` prints OK or the first difference of each run
(``torch.equal``: bit for bit) and how many differ.
"""
import sys, torch, pickle, math
torch.set_num_threads(1)
from rlx import AlgorithmConfig, NPGConfig, A2CConfig, RecurrentAlgorithmConfig
from rlx.envs import CartPole, Pendulum, CartPoleNoVelocity

BASE = dict(num_envs=16, horizon=16, device="cpu", seed=0, model_config={"hiddens": [16, 16]})
CASES = {
 "ppo": (AlgorithmConfig, CartPole, {}),
 "ppo_mb_kl": (AlgorithmConfig, CartPole, dict(sgd_minibatch_size=64, num_sgd_iters=6, target_kl_div=0.002)),
 "ppo_adaptive": (AlgorithmConfig, Pendulum, dict(sgd_minibatch_size=64, kl_adaptive_lr=True, target_kl_div=0.01, normalize_rewards=True, normalize_obs=True)),
 "ppo_accum": (AlgorithmConfig, CartPole, dict(sgd_minibatch_size=64, accumulate_grads=True, target_kl_div=0.01)),
 "ppo_sched": (AlgorithmConfig, Pendulum, dict(lr_schedule=[[0, 1e-3], [2000, 1e-4]], entropy_coeff=0.01, entropy_coeff_schedule=[[0, 0.01], [2000, 0.0]], vf_clip_param=0.2, dual_clip_param=3.0)),
 "ppo_micro": (AlgorithmConfig, CartPole, dict(micro_batch_size=50, sgd_minibatch_size=128)),
 "a2c": (A2CConfig, CartPole, {}),
 "npg": (NPGConfig, Pendulum, dict(normalize_obs=True)),
 "trpo": (NPGConfig, CartPole, dict(line_search=True, critic_minibatch_size=64, fvp_subsample=0.3)),
 "ppo_compile": (AlgorithmConfig, CartPole, dict(compile=True, sgd_minibatch_size=64)),
 "rppo": (RecurrentAlgorithmConfig, CartPoleNoVelocity, dict(sgd_minibatch_size=64, target_kl_div=0.01)),
}
SEEDED = {f"{k}_s3": (c, e, {**kw, "num_seeds": 3}) for k, (c, e, kw) in CASES.items() if k not in ("ppo_accum", "ppo_micro", "ppo_compile")}
ALL = {**CASES, **SEEDED}

def run(name):
    cls, env, kw = ALL[name]
    torch.manual_seed(0)
    algo = cls(**{**BASE, **kw}).build(env)
    out = []
    for _ in range(3):
        c = algo.collect(); s = algo.step()
        out.append({k: v for k, v in {**c, **s}.items() if not k.startswith("profiling/")})
    params = {k: v.detach().clone() for k, v in algo.policy.state_dict().items()}
    opt = algo.optimizer.state_dict()
    return out, params, opt

def same(a, b, path=""):
    if isinstance(a, dict):
        if set(a) != set(b): return f"{path}: keys {sorted(set(a)^set(b))[:5]}"
        for k in a:
            r = same(a[k], b[k], f"{path}.{k}")
            if r: return r
        return None
    if isinstance(a, (list, tuple)):
        if len(a) != len(b): return f"{path}: len"
        for i, (x, y) in enumerate(zip(a, b)):
            r = same(x, y, f"{path}[{i}]")
            if r: return r
        return None
    if isinstance(a, torch.Tensor):
        if a.shape != b.shape or not torch.equal(a, b): 
            return f"{path}: tensor differs (max {(a.float()-b.float()).abs().max() if a.shape==b.shape else 'shape'})"
        return None
    if isinstance(a, float) and math.isnan(a) and isinstance(b, float) and math.isnan(b): return None
    return None if a == b else f"{path}: {a} != {b}"

if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or list(ALL)
    if mode == "save":
        res = {n: run(n) for n in names}
        with open(path, "wb") as f:
            pickle.dump(res, f)
        print("saved", len(res))
    else:
        with open(path, "rb") as f:
            gold = pickle.load(f)
        bad = 0
        for n in names:
            try:
                r = same(gold[n], run(n))
            except Exception as e:
                r = f"ERROR {type(e).__name__}: {e}"
            print(("OK  " if r is None else "DIFF"), n, r or "")
            bad += r is not None
        print("differ:", bad)
