"""The default MLP actor-critic and the model hooks."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchrl.data import Bounded, Categorical, Composite, Unbounded

from rlx import AlgorithmConfig, EnvOutputError
from rlx.models import MLPActorCritic, flatten_obs, obs_feature_size


def test_default_model_uses_hiddens_and_activation_from_model_config() -> None:
    model = MLPActorCritic(Unbounded(shape=(4,)), Categorical(2), num_params=(2, 0), hiddens=[32, 8], activation_fn="tanh")
    linears = [m for m in model.actor if isinstance(m, nn.Linear)]
    assert [(l.in_features, l.out_features) for l in linears] == [(4, 32), (32, 8), (8, 2)]
    assert any(isinstance(m, nn.Tanh) for m in model.critic)
    params, values = model(torch.randn(5, 4))
    assert params.shape == (5, 2) and values.shape == (5, 1)


def test_default_model_defaults_to_two_256_relu_layers() -> None:
    model = MLPActorCritic(Unbounded(shape=(3,)), Categorical(2), num_params=(2, 0))
    linears = [m for m in model.critic if isinstance(m, nn.Linear)]
    assert [l.out_features for l in linears] == [256, 256, 1]
    assert any(isinstance(m, nn.ReLU) for m in model.critic)


def test_gaussian_log_std_is_a_state_independent_parameter() -> None:
    model = MLPActorCritic(Unbounded(shape=(3,)), Bounded(-1.0, 1.0, shape=(2,)), num_params=(2, 2), log_std_init=-0.5)
    params, _ = model(torch.randn(7, 3))
    assert torch.equal(params[:, 2:], torch.full((7, 2), -0.5))
    assert model.log_std.requires_grad


def test_bad_model_config_names_the_key() -> None:
    with pytest.raises(ValueError, match="model_config.activation_fn='swishy'"):
        MLPActorCritic(Unbounded(shape=(3,)), Categorical(2), num_params=(2, 0), activation_fn="swishy")
    with pytest.raises(ValueError, match="model_config.hiddens"):
        MLPActorCritic(Unbounded(shape=(3,)), Categorical(2), num_params=(2, 0), hiddens=[0])


def test_composite_observations_flatten_without_the_action_mask() -> None:
    spec = Composite(
        pos=Unbounded(shape=(2, 3)),
        vel=Unbounded(shape=(4,)),
        action_mask=Categorical(2, shape=(5,), dtype=torch.bool),
    )
    assert obs_feature_size(spec) == 10
    obs = spec.rand((6,))
    flat = flatten_obs(obs, spec)
    assert flat.shape == (6, 10)
    assert torch.equal(flat[:, :6], obs["pos"].reshape(6, 6))


def test_custom_model_cls_and_wrong_output_shapes_are_reported(scripted_env) -> None:
    class TooFewParams(nn.Module):
        def __init__(self, observation_spec, action_spec, /, *, num_params, width=4):
            super().__init__()
            self.net = nn.Linear(2, width)

        def forward(self, obs):
            out = self.net(obs)
            return out[:, :1], out[:, 1:2]

    with pytest.raises(EnvOutputError, match=r"'dist_params' has shape \[4, 1\], expected \[4, 2\]"):
        AlgorithmConfig(num_envs=4, horizon=2, device="cpu", model_cls=TooFewParams, model_config={"width": 3}).build(
            scripted_env
        )


def test_a_model_instance_is_used_as_given(scripted_env) -> None:
    model = MLPActorCritic(Unbounded(shape=(2,)), Categorical(2), num_params=(2, 0), hiddens=[5])
    algo = AlgorithmConfig(num_envs=4, horizon=2, device="cpu", model=model).build(scripted_env)
    assert algo.policy.model is model
