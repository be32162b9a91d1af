"""The PPO settings rlx and its JAX peer share in ``vs_jax.py`` (and ``dispatch_counts.py``).

Kept apart from :mod:`jax_ppo` so that what needs only torch can read them without JAX.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PPOSettings", "warm_compiled_cartpole"]


@dataclass(frozen=True)
class PPOSettings:
    num_envs: int = 1024
    horizon: int = 32
    epochs: int = 4
    minibatches: int = 4
    lr: float = 2.5e-3
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    vf_coeff: float = 0.5
    entropy_coeff: float = 0.0
    max_grad_norm: float = 0.5
    hidden: int = 64

    def rlx_config(self, device: str, *, seed: int = 0, compile: bool = False, cudagraphs: bool = False,
                   amp: bool = False, num_seeds: int = 1, cudagraphs_scope: str = "minibatch"):
        """rlx's ``AlgorithmConfig`` doing this work (64x64 tanh, no value clip)."""
        from rlx import AlgorithmConfig

        return AlgorithmConfig(
            num_envs=self.num_envs, horizon=self.horizon, num_sgd_iters=self.epochs,
            sgd_minibatch_size=self.num_envs * self.horizon // self.minibatches, optimizer_config={"lr": self.lr},
            gamma=self.gamma, gae_lambda=self.gae_lambda, clip_param=self.clip, vf_clip_param=None,
            vf_coeff=self.vf_coeff, entropy_coeff=self.entropy_coeff, max_grad_norm=self.max_grad_norm,
            model_config={"hiddens": [self.hidden, self.hidden], "activation_fn": "tanh"}, device=device, seed=seed,
            compile=compile, cudagraphs=cudagraphs, cudagraphs_scope=cudagraphs_scope, enable_amp=amp,
            num_seeds=num_seeds)


def warm_compiled_cartpole(num_envs: int, warmups: int):
    """The algorithm the CPU experiments time and profile: vs_jax.py's CartPole PPO (T = 32,
    64x64 tanh, 4 epochs x 4 minibatches) with ``compile=True`` on one thread, after
    ``warmups`` iterations (the first compiles its programs)."""
    import torch

    from rlx.envs import CartPole

    torch.set_num_threads(1)
    algo = PPOSettings(num_envs=num_envs, horizon=32, minibatches=4).rlx_config("cpu", seed=0, compile=True)
    algo = algo.build(CartPole)
    for _ in range(warmups):
        algo.collect()
        algo.step()
    return algo
