"""Built-in batched, torch-native environments (every sub-env steps at once, on any device)."""

from rlx.envs.cartpole import CartPole
from rlx.envs.dummy import ContinuousDummyEnv, DiscreteDummyEnv
from rlx.envs.pendulum import Pendulum

__all__ = ["CartPole", "ContinuousDummyEnv", "DiscreteDummyEnv", "Pendulum"]
