"""``matmul_precision``: torch's float32 matmul precision, set at build; learning with each."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlx import AlgorithmConfig
from rlx.config import ConfigError
from rlx.envs import CartPole


@pytest.mark.parametrize("name, torch_name", [("fp32", "highest"), ("tf32", "high"), ("bf16", "medium")])
def test_the_build_sets_torchs_matmul_precision(name: str, torch_name: str) -> None:
    torch.set_float32_matmul_precision("highest" if torch_name != "highest" else "high")
    AlgorithmConfig(num_envs=4, horizon=4, device="cpu", matmul_precision=name).build(CartPole)
    assert torch.get_float32_matmul_precision() == torch_name


@pytest.mark.parametrize("name", [None, "auto"])
def test_none_and_auto_on_a_cpu_leave_the_users_setting_and_a_bad_name_is_refused(name) -> None:
    torch.set_float32_matmul_precision("high")
    algo = AlgorithmConfig(num_envs=4, horizon=4, device="cpu", matmul_precision=name).build(CartPole)
    assert torch.get_float32_matmul_precision() == "high"
    assert algo.modes.matmul_precision is None
    assert ("matmul_precision as torch has it (auto on cpu)" in algo.modes.summary()) == (name == "auto")
    with pytest.raises(ConfigError, match=r"AlgorithmConfig.matmul_precision: must be 'auto', one of "
                                          r"\['bf16', 'fp32', 'tf32'\] or None, got 'fp16'"):
        AlgorithmConfig(num_envs=4, horizon=4, device="cpu", matmul_precision="fp16")


def test_auto_is_tf32_on_cuda_and_an_explicit_name_stays_what_it_says() -> None:
    """The default's resolution per device (the choice the H100 learning test made), and
    what ``algo.modes`` reports, decided without a GPU: ``resolve_modes`` reads only the
    device's type."""
    from rlx.algorithms.modes import resolve_modes

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    config = AlgorithmConfig(num_envs=4, horizon=4, device="cpu", cudagraphs=False)
    assert config.matmul_precision == "auto"
    modes = resolve_modes(config, cuda, 1, False, captures=True)
    assert modes.matmul_precision == "tf32" and modes.notes["matmul_precision"] == "tf32 (auto on cuda)"
    assert resolve_modes(config, cpu, 1, False, captures=True).matmul_precision is None
    fp32 = dataclasses.replace(config, matmul_precision="fp32")
    assert resolve_modes(fp32, cuda, 1, False, captures=True).matmul_precision == "fp32"
    assert "matmul_precision" not in resolve_modes(fp32, cuda, 1, False, captures=True).notes


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fp32", "tf32", "bf16"])
def test_ppo_solves_cartpole_at_each_precision(name: str, train_best) -> None:
    from rlx.examples.cartpole import SOLVED_LENGTH, cartpole_config

    device = "cuda" if torch.cuda.is_available() else "cpu"
    algo = dataclasses.replace(cartpole_config(seed=0, device=device), matmul_precision=name).build(CartPole)
    best = train_best(algo, "episodes/length_mean", SOLVED_LENGTH, 300_000)
    assert best >= SOLVED_LENGTH, f"{name}: best mean episode length {best:.1f} after {algo.env_steps} env steps"
