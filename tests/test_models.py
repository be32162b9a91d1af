"""The default MLP actor-critic and the model hooks."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchrl.data import Bounded, Categorical, Composite, Unbounded

from rlx import AlgorithmConfig, EnvOutputError
from rlx.envs import CartPole
from torch.testing import assert_close

from rlx.models import MLPActorCritic, RecurrentActorCritic, flatten_obs, obs_feature_size


def test_default_model_uses_hiddens_and_activation_from_model_config() -> None:
    model = MLPActorCritic(Unbounded(shape=(4,)), Categorical(2), num_params=(2, 0), hiddens=[32, 8], activation_fn="tanh")
    linears = [m for m in model.actor if isinstance(m, nn.Linear)]
    assert [(l.in_features, l.out_features) for l in linears] == [(4, 32), (32, 8), (8, 2)]
    assert any(isinstance(m, nn.Tanh) for m in model.critic)
    params, values = model(torch.randn(5, 4))
    assert params.shape == (5, 2) and values.shape == (5, 1)


def test_the_critic_can_be_wider_than_the_actor() -> None:
    model = MLPActorCritic(Unbounded(shape=(4,)), Categorical(2), num_params=(2, 0), hiddens=[16], critic_hiddens=[64, 64])
    widths = lambda mlp: [(l.in_features, l.out_features) for l in mlp if isinstance(l, nn.Linear)]  # noqa: E731
    assert widths(model.actor) == [(4, 16), (16, 2)]
    assert widths(model.critic) == [(4, 64), (64, 64), (64, 1)]
    params, values = model(torch.randn(3, 4))
    assert params.shape == (3, 2) and values.shape == (3, 1)
    for bad in ([], 256):
        with pytest.raises(ValueError, match="model_config.critic_hiddens"):
            MLPActorCritic(Unbounded(shape=(4,)), Categorical(2), num_params=(2, 0), critic_hiddens=bad)
    algo = AlgorithmConfig(num_envs=4, horizon=8, device="cpu", model_config={"hiddens": [8], "critic_hiddens": [32]})
    assert widths(algo.build(CartPole).policy.model.critic) == [(4, 32), (32, 1)]


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


# -- the recurrent model -------------------------------------------------------------------


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize(("B", "T"), [(1, 1), (1, 9), (5, 1), (5, 9)])
def test_a_sequence_forward_with_resets_equals_single_step_forwards(cell: str, num_layers: int, B: int, T: int) -> None:
    torch.manual_seed(0)
    model = RecurrentActorCritic(
        Unbounded(shape=(3,)), Bounded(-1.0, 1.0, shape=(2,)), num_params=(2, 2), cell=cell, hidden_size=6,
        num_layers=num_layers, hiddens=[5],
    )
    obs = torch.randn(B, T, 3)
    resets = torch.rand(B, T) < 0.3
    start = torch.randn(B, num_layers, 2 if cell == "lstm" else 1, 6)  # a state from earlier steps
    params, values, final = model(obs, start, resets)
    assert params.shape == (B, T, 4) and values.shape == (B, T, 1) and final.shape == start.shape
    state = start
    for t in range(T):
        p, v, state = model(obs[:, t : t + 1], state, resets[:, t : t + 1])
        assert_close(p[:, 0], params[:, t], atol=1e-6, rtol=1e-6)
        assert_close(v[:, 0], values[:, t], atol=1e-6, rtol=1e-6)
    assert_close(state, final, atol=1e-6, rtol=1e-6)


def test_a_reset_step_ignores_the_state_it_was_given() -> None:
    model = RecurrentActorCritic(Unbounded(shape=(3,)), Categorical(2), num_params=(2, 0), hidden_size=4)
    obs = torch.randn(2, 1, 3)
    resets = torch.ones(2, 1, dtype=torch.bool)
    from_noise = model(obs, torch.randn(2, 1, 2, 4), resets)
    from_initial = model(obs, model.initial_state(2), resets)
    for a, b in zip(from_noise, from_initial):
        assert torch.equal(a, b)


def test_integer_resets_act_as_bool_and_a_reset_ignores_even_a_nan_state() -> None:
    model = RecurrentActorCritic(Unbounded(shape=(3,)), Categorical(2), num_params=(2, 0), hidden_size=4)
    obs, state = torch.randn(2, 3, 3), torch.randn(2, 1, 2, 4)
    resets = torch.tensor([[True, False, True], [False, True, False]])
    expected = model(obs, state, resets)
    for as_int in (resets.long(), resets.to(torch.int32), resets.float()):
        for a, b in zip(model(obs, state, as_int), expected):
            assert torch.equal(a, b)
    nan_state = torch.full_like(state, float("nan"))
    starts = torch.ones(2, 1, dtype=torch.bool)
    for a, b in zip(model(obs[:, :1], nan_state, starts), model(obs[:, :1], model.initial_state(2), starts)):
        assert torch.equal(a, b)


def test_recurrent_model_config_errors_name_the_key() -> None:
    for kwargs, key in (({"cell": "rnn"}, "cell"), ({"hidden_size": 0}, "hidden_size"), ({"num_layers": 1.5}, "num_layers")):
        with pytest.raises(ValueError, match=f"model_config.{key}"):
            RecurrentActorCritic(Unbounded(shape=(3,)), Categorical(2), num_params=(2, 0), **kwargs)


def test_the_recurrent_model_reads_composite_observations() -> None:
    spec = Composite(a=Unbounded(shape=(2,)), b=Unbounded(shape=(3,)))
    model = RecurrentActorCritic(spec, Categorical(2), num_params=(2, 0), hidden_size=4)
    obs = spec.rand((3, 5))  # [B, L]
    params, values, state = model(obs, model.initial_state(3), torch.zeros(3, 5, dtype=torch.bool))
    assert params.shape == (3, 5, 2) and values.shape == (3, 5, 1) and state.shape == (3, 1, 2, 4)


def test_output_heads_compute_in_float32_under_autocast() -> None:
    # Values near 100 in bf16 are resolved only to 0.5: the value loss would measure rounding.
    model = MLPActorCritic(Unbounded(shape=(4,)), Categorical(2), num_params=(2, 0), hiddens=[16, 16])
    obs = torch.randn(32, 4) * 30
    with torch.autocast("cpu", dtype=torch.bfloat16):
        params, values = model(obs)
        hidden = model.critic[:-1](obs)  # bf16 features, as the head receives them
    assert params.dtype == values.dtype == torch.float32 and hidden.dtype == torch.bfloat16
    head = model.critic[-1]
    assert torch.equal(values, torch.nn.functional.linear(hidden.float(), head.weight, head.bias))
    recurrent = RecurrentActorCritic(Unbounded(shape=(3,)), Categorical(2), num_params=(2, 0), hidden_size=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        head_out, value_out, _ = recurrent(torch.randn(2, 3, 3), recurrent.initial_state(2), torch.zeros(2, 3, dtype=torch.bool))
    assert head_out.dtype == value_out.dtype == torch.float32
