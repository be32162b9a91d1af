"""What the GPU suite measures, and at which sizes: the GPU run's and the dry run's."""

from __future__ import annotations

import dataclasses

from common import RESULTS

#: Where the results files go unless ``--out`` says otherwise.
DEFAULT_OUT = RESULTS

ENVS = ("CartPole", "Pendulum")
#: ``ppo`` takes minibatches of at most 32768 samples (256 optimizer steps an update at
#: B=65536); ``ppo_4mb`` four minibatches an epoch, rsl_rl's default for GPU envs.
ALGORITHMS = ("ppo", "ppo_4mb", "npg", "recurrent_ppo")
HIDDENS = [64, 64]
#: The collect stat each env is solved on, and its threshold (as ``time_to_solve.py``).
GOALS = {"CartPole": ("episodes/length_mean", 475.0), "Pendulum": ("episodes/return_mean", -250.0)}
#: The issue's targets for CartPole PPO end to end on an H100: env steps/s by B.
END_TO_END_GOALS = {65536: 50e6, 4096: 10e6}
#: Buffer keys the graphed collect must reproduce to the bit.
CHECKED_KEYS = ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated")
#: Keys every row carries, whatever its part.
ROW_KEYS = ("part", "device", "env", "algorithm", "mode", "num_envs")
#: A compile point starts only with this much budget left: compiling alone takes tens of seconds.
COMPILE_MIN_S = 60.0
#: Optional packages, by import name: why the suite wants each.
OPTIONAL = {
    "tensordict": "required by rlx (carry its wheel: see the docstring of benchmarks/gpu_suite.py)",
    "torchrl": "required by rlx (carry its wheel: see the docstring of benchmarks/gpu_suite.py)",
    "gymnasium": "its parity tests are not collected without it",
    "rl8": "the side-by-side part (pip install 'rlx[bench]')",
    "matplotlib": "rlx plot and its tests",
    "jax": "the vs_jax part (pip install 'rlx[jax]')",
}


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How large each part runs: the GPU sizes, or the dry run's tiny ones."""

    #: Throughput batch sizes B.
    num_envs: tuple[int, ...]
    #: T, env steps per collect, for throughput and solving.
    horizon: int
    #: Untimed iterations before the timed ones (graphed PPO: at least 3, see ``bench_one``).
    warmup: int
    #: Timed iterations per throughput point; the rows report medians.
    iters: int
    #: B and T of the graphed-vs-eager check, and its rounds per collect mode.
    check_num_envs: int
    check_horizon: int
    check_rounds: int
    #: B of the solve runs, and the env-step budget of each.
    solve_num_envs: int
    solve_max_env_steps: int
    #: B of the rl8 side by side, and its timed iterations per library.
    rl8_num_envs: tuple[int, ...]
    rl8_iters: int


GPU_SIZES = Sizes(
    num_envs=(4096, 16384, 65536), horizon=32, warmup=2, iters=3, check_num_envs=4096, check_horizon=32,
    check_rounds=3, solve_num_envs=4096, solve_max_env_steps=50_000_000, rl8_num_envs=(4096, 65536), rl8_iters=3,
)
DRY_SIZES = Sizes(
    num_envs=(64, 128), horizon=8, warmup=1, iters=1, check_num_envs=64, check_horizon=8, check_rounds=2,
    solve_num_envs=64, solve_max_env_steps=2 * 64 * 8, rl8_num_envs=(64,), rl8_iters=1,
)


class Skip(Exception):
    """Raised inside a part to record it as skipped with this reason (not an error)."""
