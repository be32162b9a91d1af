"""Built-in batched, torch-native environments (every sub-env steps at once, on any device),
adapters for gymnasium and TorchRL envs, and ``check_env`` for your own.
"""

from rlx.envs.acrobot import Acrobot
from rlx.envs.cartpole import CartPole, CartPoleNoVelocity
from rlx.envs.dummy import ContinuousDummyEnv, DiscreteDummyEnv
from rlx.envs.memory import CueRecall
from rlx.envs.mountain_car import MountainCarContinuous
from rlx.envs.pendulum import Pendulum
from rlx.envs.pixel_reach import PixelReach
from rlx.envs.point_mass import PointMass
from rlx.envs.check import check_env
from rlx.envs.gymnasium import GymnasiumEnv
from rlx.envs.torchrl import TorchRLEnv, to_torchrl
from rlx.envs.rsl_rl import RslRlVecEnv
from rlx.envs.torch_vector import TorchVectorEnv

#: Adapters and tools: not envs to list or benchmark by themselves.
TOOLS = ["GymnasiumEnv", "RslRlVecEnv", "TorchRLEnv", "TorchVectorEnv", "check_env", "to_torchrl"]

__all__ = [
    "Acrobot",
    "CartPole",
    "CartPoleNoVelocity",
    "CueRecall",
    "ContinuousDummyEnv",
    "DiscreteDummyEnv",
    "MountainCarContinuous",
    "Pendulum",
    "PixelReach",
    "PointMass",
    *TOOLS,
]
