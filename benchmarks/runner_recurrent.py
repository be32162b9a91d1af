"""A recurrent rsl_rl 5 train_cfg (``RNNModel``, GRU) through rlx's ``OnPolicyRunner``
and, side by side, rsl_rl's own, on WindyReach.

    python benchmarks/runner_recurrent.py [--num-envs 512] [--chunks 4] [--chunk 10] [--seed 0]
                                          [--sides rlx rsl_rl] [--threads 1]

WindyReach's actor never sees the wind and the mass (:mod:`rlx.examples.windy_reach`); a
recurrent actor can infer them from how the velocity answers its actions, which the PD
controller (score 1) cannot. Every ``--chunk`` iterations the deterministic policy is
scored on 512 fresh 100-step episodes (its state reset first): 0 is the random policy's
return, 1 the PD controller's. Wall-clock excludes the scoring.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import time
import warnings

import torch

from rlx.examples.windy_reach import WindyReach, episode_return, pd_controller

RNN = {"class_name": "RNNModel", "rnn_type": "gru", "rnn_hidden_dim": 64, "rnn_num_layers": 1, "hidden_dims": [64],
       "activation": "elu"}
CFG = {"seed": 0, "num_steps_per_env": 24, "save_interval": 100,
       "obs_groups": {"actor": ["policy"], "critic": ["policy", "critic"]},
       "algorithm": {"class_name": "PPO", "num_learning_epochs": 5, "num_mini_batches": 4, "clip_param": 0.2,
                     "gamma": 0.99, "lam": 0.95, "value_loss_coef": 1.0, "entropy_coef": 0.005, "learning_rate": 1e-3,
                     "max_grad_norm": 1.0, "use_clipped_value_loss": True, "schedule": "adaptive", "desired_kl": 0.01},
       "actor": {**RNN, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 0.5}},
       "critic": RNN}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--chunk", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sides", nargs="+", default=["rlx", "rsl_rl"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    random = episode_return(lambda obs: torch.randn(obs.batch_size[0], 2), 512, "cpu")
    pd = episode_return(pd_controller, 512, "cpu")
    for side in args.sides:
        if side == "rlx":
            from rlx.runners import OnPolicyRunner
        else:
            from rsl_rl.runners import OnPolicyRunner
        torch.manual_seed(args.seed)
        cfg = {**copy.deepcopy(CFG), "seed": args.seed}
        with contextlib.redirect_stdout(io.StringIO()):
            runner = OnPolicyRunner(WindyReach(args.num_envs, "cpu", seed=args.seed), cfg, log_dir=None, device="cpu")
        trained, seconds, scores = 0, 0.0, []
        for _ in range(args.chunks):
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                runner.learn(args.chunk)
            seconds += time.perf_counter() - start
            trained += args.chunk
            policy = runner.get_inference_policy()
            policy.reset()
            scores.append((trained, (episode_return(policy, 512, "cpu") - random) / (pd - random)))
            runner.alg.train_mode()
        row = " ".join(f"{it}: {score:.3f}" for it, score in scores)
        print(f"{side:7s} B={args.num_envs} seed={args.seed} | normalized score after iterations {row} | "
              f"train {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main()
