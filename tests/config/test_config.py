"""Config validation: every bad value is a ValueError naming the field, at construction."""

from __future__ import annotations

import pytest
import torch

from rlx import AlgorithmConfig, ConfigError


@pytest.mark.parametrize(
    "field, value",
    [
        ("gamma", -0.1),
        ("gamma", 1.01),
        ("gae_lambda", -0.5),
        ("gae_lambda", 1.5),
        ("num_envs", 0),
        ("num_envs", -3),
        ("horizon", 0),
        ("num_sgd_iters", 0),
        ("clip_param", 0.0),
        ("clip_param", -0.2),
        ("vf_clip_param", 0.0),
        ("dual_clip_param", 1.0),
        ("target_kl_div", 0.0),
        ("max_grad_norm", -1.0),
        ("vf_coeff", -1.0),
        ("entropy_coeff", -0.01),
        ("horizons_per_env_reset", 0),
        ("num_envs", 2.5),
        ("num_envs", True),
        ("normalize_rewards", "yes"),
        ("seed", -1),
        ("device", "not-a-device"),
    ],
)
def test_bad_values_raise_naming_the_field(field: str, value) -> None:
    with pytest.raises(ValueError, match=rf"AlgorithmConfig\.{field}"):
        AlgorithmConfig(**{field: value})


def test_negative_learning_rate_is_rejected() -> None:
    with pytest.raises(ValueError, match="optimizer_config: lr must be a positive number"):
        AlgorithmConfig(optimizer_config={"lr": -1e-3})


def test_minibatch_larger_than_the_buffer_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"sgd_minibatch_size: 129 is larger than the buffer.*8 \* 16 = 128"):
        AlgorithmConfig(num_envs=8, horizon=16, sgd_minibatch_size=129)
    assert AlgorithmConfig(num_envs=8, horizon=16, sgd_minibatch_size=128).minibatch_size == 128
    assert AlgorithmConfig(num_envs=8, horizon=16).minibatch_size == 128


def test_unknown_field_raises_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"AlgorithmConfig\.num_env: unknown field; did you mean 'num_envs'\?$"):
        AlgorithmConfig(num_env=8)
    with pytest.raises(ConfigError):
        AlgorithmConfig(lamda=0.9)
    with pytest.raises(ConfigError, match=r"unknown field; valid: .*num_envs"):  # nothing close: every field
        AlgorithmConfig(zzzz=1)


def test_schedule_errors_name_the_config_class_and_the_schedule_field() -> None:
    with pytest.raises(ConfigError, match=r"^AlgorithmConfig\.lr_schedule\[1\]: .*got 50 after 100"):
        AlgorithmConfig(lr_schedule=[(100, 1e-3), (50, 1e-4)])
    with pytest.raises(ConfigError, match=r"^AlgorithmConfig\.entropy_coeff_schedule_kind: .*'cosine'"):
        AlgorithmConfig(entropy_coeff_schedule=[(0, 0.01)], entropy_coeff_schedule_kind="cosine")
    with pytest.raises(ConfigError, match=r"^AlgorithmConfig\.entropy_coeff_schedule: entropy coefficients must be >= 0"):
        AlgorithmConfig(entropy_coeff_schedule=[(0, 0.01), (1000, -0.01)], entropy_coeff_schedule_kind="interp")


def test_kl_adaptive_lr_needs_a_target_and_no_schedule() -> None:
    with pytest.raises(ValueError, match="kl_adaptive_lr: needs target_kl_div"):
        AlgorithmConfig(kl_adaptive_lr=True)
    with pytest.raises(ValueError, match="kl_adaptive_lr: cannot be combined with lr_schedule"):
        AlgorithmConfig(kl_adaptive_lr=True, target_kl_div=0.01, lr_schedule=[(0, 1e-3)])


def test_model_and_model_cls_are_mutually_exclusive() -> None:
    with pytest.raises(ValueError, match="model and model_cls are mutually exclusive"):
        AlgorithmConfig(model=torch.nn.Linear(1, 1), model_cls=torch.nn.Linear)


def test_defaults_follow_rl8_except_episode_resets() -> None:
    config = AlgorithmConfig()
    assert (config.horizon, config.num_envs, config.num_sgd_iters, config.clip_param) == (32, 8192, 4, 0.2)
    assert config.horizons_per_env_reset == -1
    assert config.optimizer_kwargs == {"lr": 1e-3}


def test_a_graph_per_minibatch_needs_equal_minibatches_and_no_accumulated_grads() -> None:
    minibatch = dict(num_envs=10, horizon=10, cudagraphs=True, cudagraphs_scope="minibatch")
    with pytest.raises(ValueError, match=r"cudagraphs: needs equal minibatches with cudagraphs_scope=\"minibatch\""):
        AlgorithmConfig(**minibatch, sgd_minibatch_size=30)
    with pytest.raises(ValueError, match=r"cudagraphs: cannot be combined with accumulate_grads"):
        AlgorithmConfig(**minibatch, accumulate_grads=True)
    # One graph for the whole step (the default scope) holds them as they are.
    assert AlgorithmConfig(num_envs=10, horizon=10, sgd_minibatch_size=30, cudagraphs=True).cudagraphs is True
    assert AlgorithmConfig(num_envs=10, horizon=10, accumulate_grads=True, cudagraphs=True).cudagraphs is True
    # bf16 AMP is captured (tests/algorithms/test_update_phase.py checks what a capture needs);
    # whether the GPU autocasts to bf16 is decided at build (rlx.algorithms.modes).
    assert AlgorithmConfig(num_envs=10, horizon=10, cudagraphs=True, enable_amp=True).cudagraphs_blocker() is None
    with pytest.raises(ValueError, match=r"cudagraphs: needs optimizer_cls torch.optim.Adam or AdamW .*, got SGD"):
        AlgorithmConfig(num_envs=10, horizon=10, cudagraphs=True, optimizer_cls=torch.optim.SGD)
    if not torch.cuda.is_available():
        from rlx.envs import CartPole

        with pytest.raises(ValueError, match=r"cudagraphs: needs a CUDA device"):
            AlgorithmConfig(num_envs=10, horizon=10, cudagraphs=True, device="cpu").build(CartPole)


def test_npgs_cudagraphs_needs_adam_for_the_critic_and_no_amp() -> None:
    """NPG captures its whole step: no minibatch condition, the critic's optimizer and AMP
    refused by name; "auto" by default (on where it can run: CUDA), which falls back on a
    CPU, saying why."""
    from rlx import NPGConfig
    from rlx.envs import Pendulum

    with pytest.raises(ValueError, match=r"NPGConfig.cudagraphs: cannot be combined with enable_amp"):
        NPGConfig(num_envs=10, horizon=10, cudagraphs=True, enable_amp=True)
    with pytest.raises(ValueError, match=r"NPGConfig.cudagraphs: needs optimizer_cls torch.optim.Adam or AdamW .*, got SGD"):
        NPGConfig(num_envs=10, horizon=10, cudagraphs=True, optimizer_cls=torch.optim.SGD)
    with pytest.raises(ValueError, match=r"NPGConfig.cudagraphs: must be"):
        NPGConfig(num_envs=10, horizon=10, cudagraphs="yes")
    assert NPGConfig().cudagraphs == "auto"
    algo = NPGConfig(num_envs=10, horizon=10, device="cpu").build(Pendulum)
    assert not algo.uses_cuda_graphs and algo.modes.notes["cudagraphs"] == "off (auto: needs a CUDA device, got cpu)"
    assert algo.run_update_phase == algo.update_phase


def test_cudagraphs_scope_is_minibatch_or_step() -> None:
    with pytest.raises(ValueError, match=r"AlgorithmConfig.cudagraphs_scope: must be 'minibatch' or 'step', got 'epoch'"):
        AlgorithmConfig(num_envs=10, horizon=10, cudagraphs_scope="epoch")
    assert AlgorithmConfig(num_envs=10, horizon=10, cudagraphs_scope="step").cudagraphs_scope == "step"
