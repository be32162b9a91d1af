"""Recurrent PPO: hidden states across steps, episode ends and collects; sequences; state."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict import TensorDict
from torch import Tensor, nn
from torch.testing import assert_close
from torchrl.data import Categorical, Unbounded

from rlx import AlgorithmConfig, ConfigError, RecurrentAlgorithmConfig
from rlx.collect.buffer import ACTIONS, HIDDEN, LOGP, RESETS, VALUES
from rlx.env import OBS, Env, EnvOutputError
from rlx.envs import CartPole, CartPoleNoVelocity, CueRecall
from rlx.collect.evaluation import evaluate_policy
from rlx.policy import RecurrentPolicy

STEP_KEYS = [
    "losses/total", "losses/policy", "losses/vf", "losses/entropy",
    "monitors/kl_div", "monitors/kl_div_max", "monitors/clip_fraction", "monitors/sgd_epochs", "monitors/lr",
    "coefficients/entropy", "coefficients/vf", "profiling/step_ms",
]


def _config(**kwargs: Any) -> RecurrentAlgorithmConfig:
    base = dict(num_envs=6, horizon=12, seq_len=4, device="cpu", seed=0, model_config={"hidden_size": 8, "hiddens": [8]})
    base.update(kwargs)
    return RecurrentAlgorithmConfig(**base)


def _without_timing(stats: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in stats.items() if not k.startswith("profiling/")}


class StepCounter(nn.Module):
    """A scripted recurrent model: the state counts the steps since the episode began.

    The value is that count (1 at an episode's first step), so the buffer's values show
    exactly where the state was reset. The action logits prefer action 1 from the third
    step of an episode on.
    """

    def __init__(self, observation_spec: Any, action_spec: Any, /, *, num_params: tuple[int, int]) -> None:
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))  # an optimizer needs a parameter

    def initial_state(self, batch_size: int) -> Tensor:
        return torch.zeros(batch_size, 1)

    def forward(self, obs: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        B, L = resets.shape
        counts = []
        for t in range(L):
            state = state * (~resets[:, t : t + 1]).float() + 1.0
            counts.append(state)
        count = torch.stack(counts, dim=1)  # [B, L, 1]
        logits = torch.cat([torch.zeros_like(count), 10.0 * (count - 2.5)], dim=-1) + 0.0 * self.unused
        return logits, count, state


class FixedEpisodes(Env):
    """Every episode lasts 4 steps (terminated); the reward is the action (0 or 1)."""

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(1,), device=self.device)
        self.action_spec = Categorical(2, device=self.device)
        self.steps = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def reset(self, *, config: dict[str, Any] | None = None) -> Tensor:
        self.steps.zero_()
        return torch.zeros(self.num_envs, 1, device=self.device)

    def step(self, actions: Tensor) -> TensorDict:
        self.steps += 1
        done = self.steps >= 4
        self.steps = torch.where(done, 0, self.steps)
        return TensorDict(
            {"obs": torch.zeros(self.num_envs, 1), "rewards": actions.float().reshape(-1, 1), "terminated": done.unsqueeze(-1)},
            batch_size=[self.num_envs],
        )


# -- config -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        (dict(horizon=10, seq_len=4), "seq_len", "must divide horizon=10"),
        (dict(horizon=12, seq_len=4, sgd_minibatch_size=10), "sgd_minibatch_size", "multiple of seq_len=4"),
        (dict(horizon=12, seq_len=4, burn_in=9), "burn_in", "burn_in <= horizon - seq_len = 8"),
        (dict(horizon=12, seq_len=4, burn_in=-1), "burn_in", "must be"),
        (dict(horizon=12, seq_len=0), "seq_len", "must be"),
    ],
)
def test_bad_sequence_settings_name_the_field(kwargs: dict, field: str, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"RecurrentAlgorithmConfig\.{field}: .*{message}"):
        RecurrentAlgorithmConfig(num_envs=4, device="cpu", **kwargs)


def test_seq_len_defaults_to_the_horizon_and_minibatches_hold_whole_sequences() -> None:
    config = RecurrentAlgorithmConfig(num_envs=4, horizon=12, device="cpu")
    assert config.sequence_length == 12
    algo = _config(num_envs=4, sgd_minibatch_size=8).build(CartPole)
    assert algo.minibatches.num_units(4, 12) == 4 * 3  # 12 sequences of 4 steps
    assert [size for _, size in algo.minibatch_bounds()] == [2] * 6  # 2 per minibatch


def test_a_model_without_the_recurrent_interface_is_refused(scripted_env) -> None:
    class Feedforward(nn.Module):
        def __init__(self, obs_spec: Any, action_spec: Any, /, *, num_params: tuple[int, int]) -> None:
            super().__init__()
            self.linear = nn.Linear(2, 3)

    with pytest.raises(TypeError, match="no initial_state"):
        _config(model_cls=Feedforward, model_config=None).build(scripted_env)


def test_a_recurrent_model_in_a_feedforward_algorithm_is_refused(scripted_env) -> None:
    from rlx import NPGConfig
    from rlx.models import RecurrentActorCritic

    for cls in (AlgorithmConfig, NPGConfig):
        with pytest.raises(TypeError, match="is recurrent.*RecurrentAlgorithmConfig"):
            cls(num_envs=4, horizon=8, device="cpu", model_cls=RecurrentActorCritic).build(scripted_env)


def test_wrong_recurrent_output_shapes_are_reported(scripted_env) -> None:
    class WrongState(StepCounter):
        def forward(self, obs: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            params, values, state = super().forward(obs, state, resets)
            return params, values, state.repeat(1, 2)

    with pytest.raises(EnvOutputError, match=r"output 'state' has shape \[6, 2\], expected \[6, 1\]"):
        _config(model_cls=WrongState, model_config=None).build(scripted_env)


# -- collect: states and episode ends -------------------------------------------------------


def test_the_state_restarts_exactly_at_episode_ends_and_nowhere_else(scripted_env) -> None:
    # ScriptedEnv's sub-env i ends an episode every i % 5 + 1 steps (terminated or
    # truncated); its observation counts the steps taken in the episode so far.
    algo = _config(model_cls=StepCounter, model_config=None, num_envs=10, horizon=7, seq_len=7).build(scripted_env)
    for _ in range(3):  # 7 is no multiple of the episode lengths: episodes span collects
        algo.collect()
        buf = algo.buffer
        steps_so_far = buf.get(OBS)[:, :7, 0]  # [B, T]
        # The model's value is the state's step count: 1 + the steps taken before.
        assert torch.equal(buf.get(VALUES)[:, :7, 0], steps_so_far + 1)
        assert torch.equal(buf.get(RESETS)[:, :7, 0], steps_so_far == 0)
        # Column T carries the state into the next collect; its flag says whether it restarts.
        assert torch.equal(buf.get(RESETS)[:, 7, 0], buf.get(OBS)[:, 7, 0] == 0)


@pytest.mark.parametrize("rows_per_pass", [32768, 20])  # one pass; passes of 2 columns (7 = 2+2+2+1)
def test_truncation_bootstraps_from_the_state_that_continues_the_episode(scripted_env, rows_per_pass, monkeypatch) -> None:
    monkeypatch.setattr("rlx.algorithms.base.VALUE_PASS_ROWS", rows_per_pass)
    algo = _config(model_cls=StepCounter, model_config=None, num_envs=10, horizon=7, seq_len=7).build(scripted_env)
    algo.collect()
    buf = algo.buffer
    truncated = buf.get("truncated")[:, :7, 0]
    assert truncated.any()
    # V(final_obs) is taken with the state after the last step (not reset): the length + 1.
    lengths = (torch.arange(10) % 5 + 1).float().unsqueeze(1).expand(10, 7)
    expected = torch.where(truncated, lengths + 1, 0.0)
    assert torch.equal(buf.get("final_values")[:, :7, 0], expected)


def test_deterministic_collect_and_evaluation_reset_the_state_at_episode_ends() -> None:
    # Acting 1 from an episode's third step on scores 2 per 4-step episode; a state that
    # was not reset would keep acting 1 and score 4.
    algo = _config(model_cls=StepCounter, model_config=None, num_envs=3, horizon=12, seq_len=12).build(FixedEpisodes)
    for _ in range(2):
        assert algo.collect(deterministic=True)["episodes/return_mean"] == 2.0
    stats = evaluate_policy(algo.policy, FixedEpisodes(3), episodes=9, max_steps=100)
    assert stats["eval/return_mean"] == 2.0 and stats["eval/episodes"] >= 9


def test_state_carried_across_two_collects_equals_one_long_rollout() -> None:
    short = _config(num_envs=5, horizon=8, seq_len=8).build(CartPole)
    first, second = (short.collect() and short.buffer.clone() for _ in range(2))
    long = _config(num_envs=5, horizon=16, seq_len=16).build(CartPole)
    long.collect()
    buf = long.buffer
    for key in (OBS, ACTIONS, LOGP, VALUES, HIDDEN, RESETS):
        joined = torch.cat([first.get(key)[:, :8], second.get(key)[:, :8]], dim=1)
        assert_close(joined, buf.get(key)[:, :16], atol=1e-6, rtol=1e-6, msg=key)
    assert_close(second.get(HIDDEN)[:, 8], buf.get(HIDDEN)[:, 16], atol=1e-6, rtol=1e-6)
    assert buf.get(HIDDEN)[:, 1:].abs().sum() > 0


# -- the update on sequences ---------------------------------------------------------------


def test_step_returns_ppo_stats_and_learns_nothing_nan() -> None:
    algo = _config(sgd_minibatch_size=24, burn_in=4, target_kl_div=0.01).build(CartPoleNoVelocity)
    algo.collect()
    stats = algo.step()
    assert sorted(stats) == sorted([*STEP_KEYS, "monitors/optimizer_steps"])  # the early stop counts its steps
    assert all(v == v for v in stats.values())


def _params(algo) -> list[Tensor]:
    return [p.detach().clone() for p in algo.policy.model.parameters()]


def test_burn_in_reproduces_the_stored_state_until_the_parameters_change() -> None:
    common = dict(optimizer_cls=torch.optim.SGD, optimizer_config={"lr": 0.1}, num_sgd_iters=1, max_grad_norm=None)
    results = {}
    for burn_in in (0, 8):
        algo = _config(burn_in=burn_in, **common).build(CartPole)
        algo.collect()
        algo.step()  # one full-batch step with the collecting parameters: the same states
        results[burn_in] = _params(algo)
    for a, b in zip(results[0], results[8]):
        assert_close(a, b, atol=1e-6, rtol=1e-5)
    # With parameters changed since the collect, burn-in recomputes the states.
    changed = {}
    for burn_in in (0, 8):
        algo = _config(burn_in=burn_in, **common).build(CartPole)
        algo.collect()
        with torch.no_grad():
            for p in algo.policy.model.cells.parameters():
                p.mul_(1.5)
        algo.step()
        changed[burn_in] = _params(algo)
    assert any(not torch.allclose(a, b) for a, b in zip(changed[0], changed[8]))


@pytest.mark.parametrize("minibatch_size", [12, 24])
def test_gradient_accumulation_over_sequences_equals_the_full_batch(minibatch_size: int) -> None:
    common = dict(
        optimizer_cls=torch.optim.SGD, optimizer_config={"lr": 0.1}, num_sgd_iters=1, shuffle_minibatches=False,
        max_grad_norm=None,
    )
    accumulated = _config(sgd_minibatch_size=minibatch_size, accumulate_grads=True, **common).build(CartPole)
    accumulated.collect()
    accumulated.step()
    full = _config(**common).build(CartPole)
    full.collect()
    full.step()
    for a, b in zip(_params(accumulated), _params(full)):
        assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_amp_on_cpu_trains_with_finite_losses() -> None:
    algo = _config(enable_amp=True, sgd_minibatch_size=24).build(CartPoleNoVelocity)
    for _ in range(2):
        algo.collect()
        stats = algo.step()
    assert all(torch.isfinite(torch.tensor(stats[k])) for k in ("losses/total", "monitors/kl_div"))


def test_gru_and_stacked_layers_train() -> None:
    for model_config in ({"cell": "gru", "hidden_size": 8}, {"cell": "lstm", "hidden_size": 8, "num_layers": 2}):
        algo = _config(model_config=model_config, sgd_minibatch_size=24).build(CartPoleNoVelocity)
        algo.collect()
        before = _params(algo)
        algo.step()
        assert any(not torch.equal(a, b) for a, b in zip(before, _params(algo)))


# -- state ---------------------------------------------------------------------------------


@pytest.mark.parametrize("burn_in", [0, 4])
def test_state_dict_round_trips_the_live_hidden_states_and_resumes_exactly(burn_in: int, saved_and_loaded) -> None:
    config = _config(normalize_obs=True, sgd_minibatch_size=24, burn_in=burn_in, entropy_coeff=0.01)
    algo = config.build(CartPoleNoVelocity)
    for _ in range(2):
        algo.collect()
        algo.step()
    state = saved_and_loaded(algo.state_dict())
    assert torch.equal(state["recurrent"]["hidden"], algo.buffer.get(HIDDEN)[:, -1])
    assert state["recurrent"]["hidden"].abs().sum() > 0
    expected = [(_without_timing(algo.collect()), _without_timing(algo.step())) for _ in range(2)]
    resumed = config.build(CartPoleNoVelocity)
    resumed.load_state_dict(state)
    got = [(_without_timing(resumed.collect()), _without_timing(resumed.step())) for _ in range(2)]
    assert got == expected
    for a, b in zip(_params(algo), _params(resumed)):
        assert torch.equal(a, b)


def test_the_recurrent_policy_refuses_stateless_calls() -> None:
    algo = _config().build(CartPole)
    for name in ("act", "evaluate", "value"):
        assert not hasattr(RecurrentPolicy, name)
        with pytest.raises(AttributeError, match="act_step"):
            getattr(algo.policy, name)(torch.zeros(2, 4))


# -- learning ------------------------------------------------------------------------------


def _cue_config(cls: type, delay: int, **kwargs: Any) -> Any:
    return cls(
        num_envs=64, horizon=2 * (delay + 1), sgd_minibatch_size=32 * (delay + 1), optimizer_config={"lr": 3e-3},
        gamma=0.99, entropy_coeff=0.01, device="cpu", seed=0, **kwargs,
    )


def _cue_env(delay: int) -> Any:
    return lambda num_envs, horizon=None, device="cpu": CueRecall(num_envs, horizon, device=device, delay=delay)


def _returns(algo, iterations: int, stop_at: float | None = None) -> list[float]:
    returns = []
    for _ in range(iterations):
        returns.append(algo.collect()["episodes/return_mean"])
        algo.step()
        if stop_at is not None and returns[-1] >= stop_at:
            break
    return returns


@pytest.mark.slow
def test_recurrent_ppo_remembers_the_cue_and_feedforward_ppo_stays_at_chance() -> None:
    delay = 8
    recurrent = _cue_config(RecurrentAlgorithmConfig, delay, model_config={"hidden_size": 32, "hiddens": [32]})
    returns = _returns(recurrent.build(_cue_env(delay)), 150, stop_at=0.95)
    assert returns[-1] >= 0.95, f"recurrent PPO reached {max(returns):.3f}"
    # The same budget for a feedforward policy: it cannot tell the cues apart at the query.
    feedforward = _cue_config(AlgorithmConfig, delay, model_config={"hiddens": [64, 64], "activation_fn": "tanh"})
    ff_returns = _returns(feedforward.build(_cue_env(delay)), len(returns))
    last = ff_returns[-20:]
    # 128 episodes per collect: the mean of 20 collects has a std of about 0.02 at chance.
    assert abs(sum(last) / len(last)) < 0.1, f"feedforward PPO averaged {sum(last) / len(last):.3f}"


def test_micro_batches_of_whole_sequences_give_the_update_of_one_pass() -> None:
    common = dict(optimizer_cls=torch.optim.SGD, optimizer_config={"lr": 0.1}, num_sgd_iters=2, shuffle_minibatches=False)
    runs = []
    for micro in (0, 8):  # 8 samples: 2 sequences of 4 per pass, 18 sequences in all
        algo = _config(micro_batch_size=micro, **common).build(CartPole)
        assert algo._micro_units == (2 if micro else algo._micro_units)
        algo.collect()
        runs.append((_without_timing(algo.step()), _params(algo)))
    for a, b in zip(runs[0][1], runs[1][1]):
        assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert runs[1][0] == pytest.approx(runs[0][0], rel=1e-5, abs=1e-7)
