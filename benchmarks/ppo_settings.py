"""The PPO settings rlx and its JAX peer share in ``vs_jax.py`` (and ``dispatch_counts.py``).

Kept apart from :mod:`jax_ppo` so that what needs only torch can read them without JAX.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PPOSettings"]


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
