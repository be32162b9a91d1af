"""PPO step(): minibatching, accumulation, early stopping, schedules, AMP and state."""

from __future__ import annotations

import math

import copy

import pytest
import torch
from torch.testing import assert_close

from rlx import AlgorithmConfig

STEP_KEYS = [
    "losses/total", "losses/policy", "losses/vf", "losses/entropy",
    "monitors/kl_div", "monitors/kl_div_max", "monitors/clip_fraction", "monitors/sgd_epochs", "monitors/lr",
    "coefficients/entropy", "coefficients/vf", "profiling/step_ms",
]


def _config(**kwargs) -> AlgorithmConfig:
    base = dict(num_envs=6, horizon=10, device="cpu", seed=0, model_config={"hiddens": [16, 16]})
    base.update(kwargs)
    return AlgorithmConfig(**base)


def _params(algo) -> list[torch.Tensor]:
    return [p.detach().clone() for p in algo.policy.model.parameters()]


def _without_timing(stats: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in stats.items() if not k.startswith("profiling/")}


def test_step_before_collect_says_to_call_collect(scripted_env) -> None:
    algo = _config().build(scripted_env)
    with pytest.raises(RuntimeError, match=r"call collect\(\) before step\(\)"):
        algo.step()
    algo.collect()
    algo.step()
    with pytest.raises(RuntimeError, match=r"call collect\(\)"):
        algo.step()


def test_step_returns_the_stats_contract(scripted_env) -> None:
    algo = _config().build(scripted_env)
    algo.collect()
    stats = algo.step()
    assert sorted(stats) == sorted(STEP_KEYS)
    assert all(isinstance(v, float) for v in stats.values())


@pytest.mark.parametrize("minibatch_size", [15, 16])  # 60 samples: even and uneven splits
def test_gradient_accumulation_equals_the_full_batch(scripted_env, minibatch_size: int) -> None:
    common = dict(
        optimizer_cls=torch.optim.SGD, optimizer_config={"lr": 0.1}, num_sgd_iters=1,
        shuffle_minibatches=False, max_grad_norm=None,
    )
    # Each build seeds the global RNG, so build and collect one after the other.
    accumulated = _config(sgd_minibatch_size=minibatch_size, accumulate_grads=True, **common).build(scripted_env)
    accumulated.collect()
    full = _config(**common).build(scripted_env)
    full.collect()
    assert torch.equal(accumulated.buffer["actions"], full.buffer["actions"])
    before = _params(full)
    accumulated.step()
    full.step()
    for p_acc, p_full, p0 in zip(_params(accumulated), _params(full), before):
        assert not torch.equal(p_full, p0)
        assert_close(p_acc, p_full, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_sample_is_visited_once_per_epoch(scripted_env, shuffle: bool) -> None:
    algo = _config(sgd_minibatch_size=16, num_sgd_iters=3, shuffle_minibatches=shuffle).build(scripted_env)
    algo.collect()
    # Tag every sample with its flat index so the minibatches can be traced.
    algo.buffer["obs"][:, :10, 0] = torch.arange(60, dtype=torch.float32).view(6, 10)
    seen: list[torch.Tensor] = []
    evaluate = algo.policy.evaluate

    def recording_evaluate(obs, actions):
        seen.append(obs[:, 0].detach().clone())
        return evaluate(obs, actions)

    algo.policy.evaluate = recording_evaluate
    algo.step()
    assert [len(s) for s in seen] == [16, 16, 16, 12] * 3
    epochs = [torch.cat(seen[i * 4 : (i + 1) * 4]) for i in range(3)]
    for order in epochs:
        assert torch.equal(order.sort().values, torch.arange(60, dtype=torch.float32))
    if shuffle:
        assert not torch.equal(epochs[0], epochs[1])
    else:
        assert all(torch.equal(order, torch.arange(60, dtype=torch.float32)) for order in epochs)


@pytest.mark.parametrize("enable_amp, accumulate_grads", [(False, False), (True, False), (False, True)])
def test_kl_early_stopping_stops_after_the_first_epoch_with_a_tiny_target(
    scripted_env, enable_amp: bool, accumulate_grads: bool
) -> None:
    algo = _config(
        target_kl_div=1e-12, num_sgd_iters=8, sgd_minibatch_size=20, enable_amp=enable_amp,
        accumulate_grads=accumulate_grads, optimizer_config={"lr": 1e-2},
    ).build(scripted_env)
    algo.collect()
    # Each optimizer step is judged on the KL before it. Without accumulation the first
    # minibatch sees the rollout policy (KL 0) and steps; the second is judged above the
    # target, so the first epoch is the last. With accumulation the first epoch's one step
    # sees the rollout policy too, and the second epoch's is refused. Under bf16 autocast
    # the first KL is rounding noise, which a 1e-12 target already refuses.
    stats = algo.step()
    assert stats["monitors/sgd_epochs"] == (2.0 if accumulate_grads else 1.0)
    assert stats["monitors/optimizer_steps"] == (0.0 if enable_amp else 1.0)
    relaxed = _config(target_kl_div=10.0, num_sgd_iters=8, enable_amp=enable_amp).build(scripted_env)
    relaxed.collect()
    assert relaxed.step()["monitors/sgd_epochs"] == 8.0


def test_kl_adaptive_lr_shrinks_and_grows_within_bounds(scripted_env) -> None:
    shrink = _config(
        target_kl_div=1e-12, kl_adaptive_lr=True, optimizer_config={"lr": 3e-3}, sgd_minibatch_size=20
    ).build(scripted_env)
    shrink.collect()
    assert shrink.step()["monitors/sgd_epochs"] == 4.0  # the adaptive LR never stops an update
    assert shrink.lr == pytest.approx(3e-3 / 1.5)  # once per update, on the KL it reached
    grow = _config(
        target_kl_div=1e3, kl_adaptive_lr=True, optimizer_config={"lr": 1e-3}, kl_adaptive_lr_bounds=(1e-5, 4e-3)
    ).build(scripted_env)
    for expected in (1.5e-3, 2.25e-3, 3.375e-3, 4e-3):  # x1.5 per update, clamped at 4e-3
        grow.collect()
        grow.step()
        assert grow.lr == pytest.approx(expected)


def test_schedules_count_env_transitions(scripted_env) -> None:
    # One collect is B * T = 6 * 10 = 60 env steps; the milestones are at 120 (2 collects).
    algo = _config(
        lr_schedule=[(0, 1e-3), (120, 1e-4)],
        entropy_coeff_schedule=[(0, 0.0), (120, 0.5)],
        entropy_coeff_schedule_kind="interp",
    ).build(scripted_env)
    seen = []
    for _ in range(3):
        algo.collect()
        stats = algo.step()
        seen.append((stats["monitors/lr"], stats["coefficients/entropy"]))
    assert seen == [(1e-3, 0.0), (1e-3, pytest.approx(0.25)), (1e-4, pytest.approx(0.5))]
    assert algo.env_steps == 180


def test_the_same_seed_gives_identical_stats(scripted_env) -> None:
    runs = []
    for _ in range(2):
        algo = _config(normalize_obs=True, sgd_minibatch_size=20).build(scripted_env)
        runs.append([(_without_timing(algo.collect()), _without_timing(algo.step())) for _ in range(3)])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("normalize_obs", [False, True])
def test_state_dict_resumes_exactly(scripted_env, normalize_obs: bool, saved_and_loaded) -> None:
    config = _config(normalize_obs=normalize_obs, sgd_minibatch_size=20, entropy_coeff=0.01)
    algo = config.build(scripted_env)
    for _ in range(2):
        algo.collect()
        algo.step()
    # Through bytes with weights_only=True: the state is plain tensors and containers.
    state = saved_and_loaded(algo.state_dict())
    expected = [(_without_timing(algo.collect()), _without_timing(algo.step())) for _ in range(2)]
    # Envs and sampling share torch's global RNG, so the resumed run goes second.
    resumed = config.build(scripted_env)
    resumed.load_state_dict(state)
    got = [(_without_timing(resumed.collect()), _without_timing(resumed.step())) for _ in range(2)]
    assert got == expected
    for a, b in zip(_params(algo), _params(resumed)):
        assert torch.equal(a, b)


def test_state_dict_covers_normalizers_optimizer_and_counters(scripted_env) -> None:
    algo = _config(normalize_obs=True).build(scripted_env)
    algo.collect()
    algo.step()
    state = algo.state_dict()
    assert state["counters"] == {"env_steps": 60, "num_collects": 1, "num_steps": 1}
    assert any("obs_normalizers" in k for k in state["policy"])
    assert state["optimizer"]["state"]
    assert state["reward_scaler"]["stats.count"] > 0
    assert "env" in state and "rng" in state
    copy.deepcopy(state)


def test_amp_on_cpu_trains_in_bfloat16_with_finite_losses(scripted_env) -> None:
    algo = _config(enable_amp=True, sgd_minibatch_size=20).build(scripted_env)
    for _ in range(3):
        algo.collect()
        stats = algo.step()
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    assert algo.buffer["advantages"].dtype == torch.float32


def test_amp_is_bf16_for_one_member_and_many_and_fp16_only_for_one_on_an_old_gpu(monkeypatch) -> None:
    """bf16 wherever the device has it (one member and S alike, no loss scale, so the
    update compiles whole); a GPU without bf16 (here: torch.cuda's answer for one, as no
    GPU is in reach) gives one member fp16 and refuses S members by name."""
    from rlx.core.config_fields import ConfigError
    from rlx.envs import CartPole
    from rlx.members import Members

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert Members(1, cpu).amp_dtype(cpu, True) == Members(3, cpu).amp_dtype(cpu, True) == torch.bfloat16
    amp = AlgorithmConfig(num_envs=8, horizon=8, device="cpu", enable_amp=True, compile=True).build(CartPole)
    assert amp.amp_dtype == torch.bfloat16 and not amp.grad_scaler.is_enabled() and amp.compile_fallback is None
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert Members(1, cpu).amp_dtype(cuda, True) == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100")
    assert Members(1, cpu).amp_dtype(cuda, True) == torch.float16
    assert Members(3, cpu).amp_dtype(cuda, False) == torch.float16  # AMP off: nothing to refuse
    with pytest.raises(ConfigError, match=r"enable_amp: num_seeds=3 needs bf16 autocast, which this GPU \(Tesla V100\)"):
        Members(3, cpu).amp_dtype(cuda, True)


def test_reward_normalization_divides_by_the_running_return_std(scripted_env) -> None:
    algo = _config().build(scripted_env)
    algo.collect()
    scale = algo.reward_scaler.scale()
    assert scale > 1.0  # ScriptedEnv's returns are large
    algo.step()
    expected_advantages = algo.buffer["advantages"].clone()
    unscaled = _config(normalize_rewards=False).build(scripted_env)
    unscaled.collect()
    # The same rollout (same seed), with rewards scaled by hand, gives the same GAE.
    assert torch.equal(algo.buffer["rewards"], unscaled.buffer["rewards"])
    unscaled.buffer["rewards"].div_(scale)
    unscaled.step()
    assert_close(unscaled.buffer["advantages"], expected_advantages)


def test_state_dict_is_a_snapshot_that_later_steps_do_not_change(scripted_env) -> None:
    algo = _config().build(scripted_env)
    algo.collect()
    algo.step()
    state = algo.state_dict()
    saved = {k: v.clone() for k, v in state["policy"].items()}
    algo.collect()
    algo.step()
    assert all(torch.equal(state["policy"][k], v) for k, v in saved.items())
    assert not all(torch.equal(a, b) for a, b in zip(algo.policy.state_dict().values(), saved.values()))


@pytest.mark.parametrize("micro_batch_size", [7, 16, 60])  # uneven, even, no split of the 60 samples
def test_micro_batches_give_the_update_and_stats_of_one_pass(scripted_env, micro_batch_size: int) -> None:
    common = dict(optimizer_cls=torch.optim.SGD, optimizer_config={"lr": 0.1}, num_sgd_iters=2, shuffle_minibatches=False,
                  vf_clip_param=0.5, entropy_coeff=0.01)
    runs = []
    for micro in (0, micro_batch_size):
        algo = _config(micro_batch_size=micro, **common).build(scripted_env)
        algo.collect()
        stats = _without_timing(algo.step())
        runs.append((stats, _params(algo)))
    (one_pass, params), (micro, micro_params) = runs
    for a, b in zip(params, micro_params):
        assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert micro == pytest.approx(one_pass, rel=1e-5, abs=1e-7)


def test_micro_batch_size_defaults_to_a_split_on_cpu_only(scripted_env) -> None:
    from rlx.algorithms.ppo import CPU_MICRO_BATCH_SIZE, CPU_WIDE_MICRO_BATCH_SIZE

    assert CPU_MICRO_BATCH_SIZE == 4096 and CPU_WIDE_MICRO_BATCH_SIZE == 2048
    # By the model's widest layer: up to 128 wide the larger passes.
    for hiddens, expected in (([64, 64], 4096), ([128], 4096), ([256, 256], 2048), ([64, 512], 2048)):
        algo = _config(model_config={"hiddens": hiddens}).build(scripted_env)
        assert algo._micro_units == expected, hiddens
    assert _config(micro_batch_size=0).build(scripted_env)._micro_units > 10**9
    with pytest.raises(ValueError, match="micro_batch_size"):
        _config(micro_batch_size=-1)


def test_compile_combines_with_cudagraphs_and_takes_dict_observations(masked_choice_env, scripted_env) -> None:
    both = AlgorithmConfig(num_envs=4, horizon=8, device="cpu", compile=True, cudagraphs=True)
    with pytest.raises(ValueError, match="AlgorithmConfig.cudagraphs: needs a CUDA device"):  # the device, not the pair
        both.build(scripted_env)
    with pytest.raises(ValueError, match="AlgorithmConfig.compile: must be true, false or .auto."):
        AlgorithmConfig(num_envs=4, horizon=8, device="cpu", compile="yes")
    # A Composite observation (here with an action mask) goes through the compiled programs.
    masked = AlgorithmConfig(num_envs=4, horizon=8, device="cpu", compile=True, sgd_minibatch_size=16).build(masked_choice_env)
    assert masked.compiled_update is not None, masked.compile_fallback
    for _ in range(2):
        masked.collect()
        stats = masked.step()
    assert math.isfinite(stats["losses/total"])
    assert masked.env.invalid_taken == 0  # the compiled acting honours the action mask


@pytest.mark.slow
def test_compiled_ppo_solves_cartpole_like_eager(train_best) -> None:
    import dataclasses

    from rlx.envs import CartPole
    from rlx.examples.cartpole import SOLVED_LENGTH, cartpole_config

    algo = dataclasses.replace(cartpole_config(seed=0, device="cpu"), compile=True).build(CartPole)
    assert algo.compiled_update is not None  # the compiled path (the whole update, one program) is the one that runs
    best = train_best(algo, "episodes/length_mean", SOLVED_LENGTH, 300_000)
    assert best >= SOLVED_LENGTH, f"best mean episode length {best:.1f} after {algo.env_steps} env steps"


def test_adam_is_fused_by_default_and_explicit_kernel_choices_are_honoured(scripted_env) -> None:
    def defaults(algo) -> dict:
        return algo.optimizer.defaults

    assert defaults(_config().build(scripted_env))["fused"] is True
    assert defaults(_config(optimizer_cls=torch.optim.AdamW).build(scripted_env))["fused"] is True
    chosen = defaults(_config(optimizer_config={"lr": 1e-3, "foreach": True}).build(scripted_env))
    assert chosen["foreach"] is True and not chosen["fused"]
    assert not defaults(_config(optimizer_cls=torch.optim.SGD).build(scripted_env)).get("fused")  # Adam only
