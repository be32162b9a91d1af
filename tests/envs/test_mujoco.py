"""The MuJoCo path end to end: gymnasium's InvertedPendulum-v5 through GymnasiumEnv.

Skipped without ``gymnasium[mujoco]`` (``pip install 'rlx[mujoco]'``; the dev extra has it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("mujoco")

from rlx import AlgorithmConfig  # noqa: E402
from rlx.envs import GymnasiumEnv  # noqa: E402
from rlx.collect.evaluation import evaluate_policy  # noqa: E402
from rlx.config.run import load_run_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV = GymnasiumEnv.factory("InvertedPendulum-v5")


def deterministic_return(algo) -> float:
    """Mean deterministic return of 8 episodes (one per eval sub-env), max 1000."""
    return evaluate_policy(algo.policy, ENV(8, None, device="cpu"), episodes=8, max_steps=1100)["eval/return_mean"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_ppo_balances_the_inverted_pendulum_within_16k_steps(seed: int) -> None:
    algo = AlgorithmConfig(
        num_envs=8, horizon=128, num_sgd_iters=10, sgd_minibatch_size=256, optimizer_config={"lr": 1e-3},
        model_config={"hiddens": [64, 64], "activation_fn": "tanh", "log_std_init": -0.5}, gamma=0.99,
        vf_clip_param=None, max_grad_norm=0.5, normalize_obs=True, device="cpu", seed=seed,
    ).build(ENV)
    before = deterministic_return(algo)
    for _ in range(16):  # 16 x 1024 env steps
        algo.collect()
        stats = algo.step()
        assert all(torch.isfinite(torch.tensor(v)) for v in stats.values() if isinstance(v, float))
    after = deterministic_return(algo)
    assert before < 200, before  # an untrained policy drops the pole within a few dozen steps
    assert after >= 900, (before, after)  # 1000 is balancing for the whole episode


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "mujoco").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_mujoco_config_builds_and_steps(path: Path) -> None:
    run = load_run_config(path, ["config.num_envs=2", "config.horizon=32"])
    assert run.trainer.max_env_steps == 1_000_000 and run.trainer.eval_every > 0
    assert [float(v) for v in run.config.lr_schedule[-1]] == [1e6, 0.0]  # annealed to 0 over the budget
    algo = run.config.build(run.env_cls)
    algo.collect()
    stats = algo.step()
    assert stats, path
