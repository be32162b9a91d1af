"""``matmul_precision``: torch's float32 matmul precision, set at build; learning with each."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlx import AlgorithmConfig
from rlx.config import ConfigError
from rlx.envs import CartPole


@pytest.fixture(autouse=True)
def _restore_precision():
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


@pytest.mark.parametrize("name, torch_name", [("fp32", "highest"), ("tf32", "high"), ("bf16", "medium")])
def test_the_build_sets_torchs_matmul_precision(name: str, torch_name: str) -> None:
    torch.set_float32_matmul_precision("highest" if torch_name != "highest" else "high")
    AlgorithmConfig(num_envs=4, horizon=4, device="cpu", matmul_precision=name).build(CartPole)
    assert torch.get_float32_matmul_precision() == torch_name


def test_none_leaves_the_users_setting_and_a_bad_name_is_refused() -> None:
    torch.set_float32_matmul_precision("high")
    AlgorithmConfig(num_envs=4, horizon=4, device="cpu").build(CartPole)
    assert torch.get_float32_matmul_precision() == "high"
    with pytest.raises(ConfigError, match=r"AlgorithmConfig.matmul_precision: must be one of \['bf16', 'fp32', 'tf32'\]"):
        AlgorithmConfig(num_envs=4, horizon=4, device="cpu", matmul_precision="fp16")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fp32", "tf32", "bf16"])
def test_ppo_solves_cartpole_at_each_precision(name: str, train_best) -> None:
    from rlx.examples.cartpole import SOLVED_LENGTH, cartpole_config

    device = "cuda" if torch.cuda.is_available() else "cpu"
    algo = dataclasses.replace(cartpole_config(seed=0, device=device), matmul_precision=name).build(CartPole)
    best = train_best(algo, "episodes/length_mean", SOLVED_LENGTH, 300_000)
    assert best >= SOLVED_LENGTH, f"{name}: best mean episode length {best:.1f} after {algo.env_steps} env steps"
