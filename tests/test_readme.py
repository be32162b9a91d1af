"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_env_example_builds_and_trains() -> None:
    block = next(b for b in _python_blocks() if "class Corridor" in b)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    from rlx import AlgorithmConfig

    algo = AlgorithmConfig(num_envs=16, horizon=32, device="cpu", seed=0, model_config={"hiddens": [16]}).build(
        namespace["Corridor"]
    )
    stats = algo.collect()
    algo.step()
    assert stats["env/steps"] == 512


@pytest.mark.slow
def test_readme_quickstart_solves_cartpole() -> None:
    block = next(b for b in _python_blocks() if "config.build(CartPole)" in b)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["collect_stats"]["episodes/length_mean"] >= 475


@pytest.mark.slow
def test_readme_npg_example_runs_and_improves_pendulum() -> None:
    block = next(b for b in _python_blocks() if "NPGConfig(" in b)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    algo, stats = namespace["algo"], namespace["stats"]
    assert 0 < stats["monitors/kl_div"] < 0.1
    # Pendulum episodes last 200 steps and started together: within 4 collects of 64
    # steps every env finishes one. The untrained policy scores -1170 to -1300 per
    # collect (seeds 0-2); after these 60 steps the best of 4 collects ranged from -250
    # to -810 over seeds 0-4 (NPG's seed spread at 245k env steps, float rounding
    # included: seed 0 went from -290 to -810 when Adam switched to its fused kernel).
    returns = [algo.collect()["episodes/return_mean"] for _ in range(4)]
    assert max(r for r in returns if r == r) > -900


@pytest.mark.slow
def test_readme_recurrent_example_balances_cartpole_without_velocities() -> None:
    block = next(b for b in _python_blocks() if "RecurrentAlgorithmConfig(" in b)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["stats"]["episodes/length_mean"] >= 400


def test_readme_a2c_example_runs_one_step() -> None:
    block = next(b for b in _python_blocks() if "A2CConfig(" in b)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["stats"]["monitors/sgd_epochs"] == 1.0 and namespace["stats"]["env/steps"] == 512
