"""GAE against a slow float64 reference, and the episode-end rules one by one."""

from __future__ import annotations

import re

import pytest
import torch
from torch import Tensor

from rlx.core.gae import generalized_advantage_estimate, generalized_advantage_estimate_

GAMMAS = [0.0, 0.9, 0.99, 1.0]
LAMBDAS = [0.0, 0.95, 1.0]
SIZES = [(1, 1), (1, 7), (5, 1), (4, 16), (33, 9)]
DONE_PATTERNS = ["none", "all_terminated", "all_truncated", "random", "every_step_ends"]
# The recursion is elementwise: each multiply and add rounds once to the nearest float
# on every CPU and GPU (IEEE), so float32 GAE's distance to the float64 reference is set
# by the inputs, not the machine (a fused multiply-add, where a compiler emits one, only
# skips a rounding). Those roundings are of random sign: after T <= 16 steps about
# sqrt(T)·2^-24·|A| ≈ 2e-6 for |A| of a few, within rtol 1e-5 + atol 1e-5; in float64
# about 1e-14 (1e-12).
TOLERANCES = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}


def reference_gae(
    rewards: Tensor,
    values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    final_values: Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[Tensor, Tensor]:
    """Advantages from the definition, one env and one step at a time, in float64.

    Rather than the backward recursion, this sums the discounted TD errors forward from
    each step, A_t = sum_l (gamma * lambda)^l delta_{t+l}, stopping after the step that
    ends the episode: a different route to the same numbers.
    """
    r = rewards.double().tolist()
    v = values.double().tolist()
    term = terminated.tolist()
    trunc = truncated.tolist()
    fv = final_values.double().tolist()
    B, T = len(r), len(r[0])
    advantages = torch.zeros(B, T, 1, dtype=torch.float64)
    returns = torch.zeros(B, T, 1, dtype=torch.float64)
    for b in range(B):
        deltas = []
        for t in range(T):
            if term[b][t][0]:
                bootstrap = 0.0
            elif trunc[b][t][0]:
                bootstrap = fv[b][t][0]
            else:
                bootstrap = v[b][t + 1][0]
            deltas.append(r[b][t][0] + gamma * bootstrap - v[b][t][0])
        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(t, T):
                total += weight * deltas[k]
                if term[b][k][0] or trunc[b][k][0]:
                    break
                weight *= gamma * gae_lambda
            advantages[b, t, 0] = total
            returns[b, t, 0] = total + v[b][t][0]
    return advantages, returns


def make_inputs(
    B: int, T: int, pattern: str, dtype: torch.dtype, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Random rewards/values and a done pattern; final_values is random everywhere so a
    read outside truncated steps would show."""
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(B, T, 1, generator=g, dtype=torch.float64).to(dtype)
    values = torch.randn(B, T + 1, 1, generator=g, dtype=torch.float64).to(dtype)
    final_values = torch.randn(B, T, 1, generator=g, dtype=torch.float64).to(dtype)
    no_flags = torch.zeros(B, T, 1, dtype=torch.bool)
    all_flags = torch.ones(B, T, 1, dtype=torch.bool)
    if pattern == "none":
        terminated, truncated = no_flags, no_flags.clone()
    elif pattern == "all_terminated":
        terminated, truncated = all_flags, no_flags
    elif pattern == "all_truncated":
        terminated, truncated = no_flags, all_flags
    elif pattern == "random":
        # Independent flags, so some steps carry both.
        terminated = torch.rand(B, T, 1, generator=g) < 0.3
        truncated = torch.rand(B, T, 1, generator=g) < 0.3
    elif pattern == "every_step_ends":
        # Episodes of length one back to back, each ended by terminated, truncated or both.
        kind = torch.randint(0, 3, (B, T, 1), generator=g)
        terminated, truncated = kind != 1, kind != 0
    else:
        raise AssertionError(pattern)
    return rewards, values, terminated, truncated, final_values


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("pattern", DONE_PATTERNS)
@pytest.mark.parametrize(("B", "T"), SIZES)
@pytest.mark.parametrize("gae_lambda", LAMBDAS)
@pytest.mark.parametrize("gamma", GAMMAS)
def test_gae_matches_float64_reference(
    gamma: float, gae_lambda: float, B: int, T: int, pattern: str, dtype: torch.dtype
) -> None:
    inputs = make_inputs(B, T, pattern, dtype, seed=B * 100 + T)
    advantages, returns = generalized_advantage_estimate(
        *inputs, gamma=gamma, gae_lambda=gae_lambda
    )
    expected_adv, expected_ret = reference_gae(*inputs, gamma, gae_lambda)
    assert advantages.dtype == dtype and advantages.shape == (B, T, 1)
    torch.testing.assert_close(advantages.double(), expected_adv, **TOLERANCES[dtype])
    torch.testing.assert_close(returns.double(), expected_ret, **TOLERANCES[dtype])


def gae(*inputs: Tensor, gamma: float = 0.9, gae_lambda: float = 0.8) -> tuple[Tensor, Tensor]:
    return generalized_advantage_estimate(*inputs, gamma=gamma, gae_lambda=gae_lambda)


def column(*xs: float) -> Tensor:
    """A [1, len(xs), 1] float64 tensor: one env over len(xs) steps."""
    return torch.tensor(xs, dtype=torch.float64).view(1, -1, 1)


def flags(*xs: bool) -> Tensor:
    return torch.tensor(xs).view(1, -1, 1)


def test_truncation_bootstraps_from_final_value() -> None:
    # Two steps, the first truncated. values[1] = 100 is the first obs of the NEXT
    # episode and must not leak into step 0; final_values[0] = 5 is V(last obs).
    rewards, values, final_values = column(1.0, 2.0), column(0.5, 100.0, 3.0), column(5.0, -7.0)
    advantages, returns = gae(
        rewards, values, flags(False, False), flags(True, False), final_values
    )
    # delta_0 = 1 + 0.9 * 5 - 0.5 = 5.0, and the trace is cut, so A_0 = delta_0.
    # delta_1 = 2 + 0.9 * 3 - 100 = -95.3 (not done: bootstrap from values[2]).
    torch.testing.assert_close(advantages, column(5.0, -95.3))
    torch.testing.assert_close(returns, column(5.5, 4.7))


def test_termination_does_not_bootstrap() -> None:
    rewards, values, final_values = column(1.0, 2.0), column(0.5, 100.0, 3.0), column(5.0, -7.0)
    advantages, _ = gae(rewards, values, flags(True, False), flags(False, False), final_values)
    # delta_0 = 1 - 0.5: neither values[1] nor final_values[0] enters.
    torch.testing.assert_close(advantages, column(0.5, -95.3))
    # And the terminal step's advantage ignores whatever the critic says next.
    values_changed = column(0.5, -100.0, 3.0)
    moved, _ = gae(rewards, values_changed, flags(True, False), flags(False, False), final_values)
    torch.testing.assert_close(moved[:, 0], advantages[:, 0])


def test_terminated_wins_when_both_flags_are_set() -> None:
    rewards, values, final_values = column(1.0), column(0.5, 100.0), column(5.0)
    both, _ = gae(rewards, values, flags(True), flags(True), final_values)
    terminated_only, _ = gae(rewards, values, flags(True), flags(False), final_values)
    torch.testing.assert_close(both, column(0.5))
    torch.testing.assert_close(both, terminated_only)


def test_done_cuts_the_trace_to_earlier_steps() -> None:
    # Step 1 ends the episode, so step 0's advantage sees delta_1 but nothing after.
    rewards, values = column(0.0, 1.0, 10.0), column(0.0, 0.0, 0.0, 0.0)
    kwargs = {"gamma": 1.0, "gae_lambda": 1.0}
    advantages, _ = gae(
        rewards, values, flags(False, True, False), flags(False, False, False), column(0, 0, 0), **kwargs
    )
    torch.testing.assert_close(advantages, column(1.0, 1.0, 10.0))


def test_returns_are_reward_to_go_plus_bootstrap_without_discount() -> None:
    rewards, values, terminated, truncated, final_values = make_inputs(6, 11, "none", torch.float64)
    _, returns = gae(rewards, values, terminated, truncated, final_values, gamma=1.0, gae_lambda=1.0)
    reward_to_go = rewards.flip(1).cumsum(1).flip(1)  # sum_{k >= t} r_k
    torch.testing.assert_close(returns, reward_to_go + values[:, -1:])


def test_inputs_are_not_mutated() -> None:
    inputs = make_inputs(4, 6, "random", torch.float32)
    before = [x.clone() for x in inputs]
    gae(*inputs)
    generalized_advantage_estimate_(
        *inputs,
        gamma=0.9,
        gae_lambda=0.8,
        advantages=torch.empty(4, 6, 1),
        returns=torch.empty(4, 6, 1),
    )
    for x, x_before in zip(inputs, before):
        torch.testing.assert_close(x, x_before, rtol=0, atol=0)


def test_in_place_variant_writes_into_buffer_views() -> None:
    B, T = 5, 8
    inputs = make_inputs(B, T, "random", torch.float32, seed=3)
    advantages_buffer = torch.full((B, T + 1, 1), 123.0)
    returns_buffer = torch.full((B, T + 1, 1), 456.0)
    advantages_view, returns_view = advantages_buffer[:, :T], returns_buffer[:, :T]
    assert not advantages_view.is_contiguous()
    generalized_advantage_estimate_(
        *inputs, gamma=0.99, gae_lambda=0.95, advantages=advantages_view, returns=returns_view
    )
    expected_adv, expected_ret = gae(*inputs, gamma=0.99, gae_lambda=0.95)
    torch.testing.assert_close(advantages_buffer[:, :T], expected_adv)
    torch.testing.assert_close(returns_buffer[:, :T], expected_ret)
    # Column T lies outside the views and is left alone.
    assert (advantages_buffer[:, T] == 123.0).all() and (returns_buffer[:, T] == 456.0).all()


def test_buffer_width_inputs_are_refused_naming_the_shape() -> None:
    # One layout only: per-step inputs and outputs are [B, T, 1] (buffer[:, :T] views).
    B, T = 4, 7
    rewards, values, terminated, truncated, final_values = make_inputs(B, T + 1, "random", torch.float32)
    values = values[:, : T + 1]  # per-step entries as wide as values: the old buffer layout
    with pytest.raises(ValueError, match=r"rewards has shape \(4, 8, 1\); expected \(4, 7, 1\)"):
        gae(rewards, values, terminated, truncated, final_values)
    inputs = (rewards[:, :T], values, terminated[:, :T], truncated[:, :T], final_values[:, :T])
    out = torch.full((B, T + 1, 1), 9.0)
    with pytest.raises(ValueError, match=r"advantages has shape \(4, 8, 1\); expected \(4, 7, 1\)"):
        generalized_advantage_estimate_(*inputs, gamma=0.9, gae_lambda=0.8, advantages=out, returns=out.clone())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_are_computed_in_float32(dtype: torch.dtype) -> None:
    inputs = make_inputs(3, 12, "random", dtype)
    advantages, returns = gae(*inputs, gamma=0.99, gae_lambda=0.95)
    assert advantages.dtype == returns.dtype == torch.float32
    # The reference sees exactly the same (rounded) inputs, so only float32 error remains.
    expected_adv, expected_ret = reference_gae(*inputs, 0.99, 0.95)
    torch.testing.assert_close(advantages.double(), expected_adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(returns.double(), expected_ret, rtol=1e-5, atol=1e-5)
    # A half-precision output buffer receives the float32 result rounded once.
    advantages_out = torch.empty(3, 12, 1, dtype=dtype)
    returns_out = torch.empty(3, 12, 1, dtype=dtype)
    generalized_advantage_estimate_(
        *inputs, gamma=0.99, gae_lambda=0.95, advantages=advantages_out, returns=returns_out
    )
    torch.testing.assert_close(advantages_out, advantages.to(dtype), rtol=0, atol=0)
    torch.testing.assert_close(returns_out, returns.to(dtype), rtol=0, atol=0)


def test_no_autograd_graph_is_built() -> None:
    rewards, values, terminated, truncated, final_values = make_inputs(2, 3, "random", torch.float32)
    advantages, returns = gae(rewards, values.requires_grad_(), terminated, truncated, final_values)
    assert not advantages.requires_grad and not returns.requires_grad


def re_shape(text: object) -> str:
    """A shape's text escaped for a regex."""
    return re.escape(str(text))


BAD_SHAPES = [
    # (argument, index in the input tuple, bad shape, expected shape in the message)
    ("values", 1, (4, 6), "[B, T+1, 1]"),
    ("values", 1, (4, 1, 1), "[B, T+1, 1]"),
    ("rewards", 0, (4, 5, 1), "(4, 6, 1)"),
    ("rewards", 0, (3, 6, 1), "(4, 6, 1)"),
    ("rewards", 0, (4, 6, 2), "(4, 6, 1)"),
    ("terminated", 2, (4, 7, 1), "(4, 6, 1)"),
    ("truncated", 3, (4, 6), "(4, 6, 1)"),
    ("final_values", 4, (1, 6, 1), "(4, 6, 1)"),
]


@pytest.mark.parametrize(("name", "index", "bad_shape", "expected"), BAD_SHAPES)
def test_bad_shapes_raise_naming_the_argument(
    name: str, index: int, bad_shape: tuple[int, ...], expected: str
) -> None:
    inputs = list(make_inputs(4, 6, "random", torch.float32))
    inputs[index] = torch.zeros(bad_shape, dtype=inputs[index].dtype)
    message = rf"^{name} has shape {re_shape(bad_shape)}; expected .*{re_shape(expected)}"
    with pytest.raises(ValueError, match=message):
        gae(*inputs)


@pytest.mark.parametrize("name", ["advantages", "returns"])
def test_bad_output_shapes_raise_naming_the_output(name: str) -> None:
    inputs = make_inputs(4, 6, "random", torch.float32)
    outputs = {"advantages": torch.empty(4, 6, 1), "returns": torch.empty(4, 6, 1)}
    outputs[name] = torch.empty(4, 5, 1)
    message = rf"^{name} has shape \(4, 5, 1\); expected \(4, 6, 1\)"
    with pytest.raises(ValueError, match=message):
        generalized_advantage_estimate_(*inputs, gamma=0.9, gae_lambda=0.9, **outputs)


@pytest.mark.parametrize(("name", "index"), [("terminated", 2), ("truncated", 3)])
def test_float_done_flags_are_rejected(name: str, index: int) -> None:
    inputs = list(make_inputs(2, 3, "random", torch.float32))
    inputs[index] = inputs[index].float()
    with pytest.raises(TypeError, match=rf"^{name} must be a bool tensor"):
        gae(*inputs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gae_runs_without_host_syncs_on_cuda() -> None:
    inputs = [x.cuda() for x in make_inputs(64, 32, "random", torch.float32)]
    advantages = torch.empty(64, 33, 1, device="cuda")
    returns = torch.empty(64, 33, 1, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        generalized_advantage_estimate_(
            *inputs, gamma=0.99, gae_lambda=0.95,
            advantages=advantages[:, :32], returns=returns[:, :32],
        )  # fmt: skip
    finally:
        torch.cuda.set_sync_debug_mode("default")
    expected_adv, _ = reference_gae(*[x.cpu() for x in inputs], 0.99, 0.95)
    torch.testing.assert_close(advantages[:, :32].cpu().double(), expected_adv, rtol=1e-5, atol=1e-5)
