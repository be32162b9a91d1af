"""PPO's KL controls: the early stop and the adaptive LR judge each optimizer step on the
KL before it, and the reported KL is the one the update reached."""

from __future__ import annotations

import statistics

import pytest
import torch
from torch.testing import assert_close

from rlx import AlgorithmConfig, ConfigError, RecurrentAlgorithmConfig
from rlx.algorithms.kl_control import EARLY_STOP_FACTOR, KLEarlyStop, adapted_lr
from rlx.collect.buffer import ACTIONS, LOGP
from rlx.env import OBS
from rlx.envs import CartPole, CartPoleNoVelocity

# One minibatch per epoch, four accumulated minibatches, four minibatches (B=32, T=32).
SETTINGS = {
    "one_minibatch": {},
    "accumulated": {"sgd_minibatch_size": 256, "accumulate_grads": True},
    "four_minibatches": {"sgd_minibatch_size": 256},
}


def _config(**kwargs) -> AlgorithmConfig:
    base = dict(num_envs=32, horizon=32, device="cpu", seed=0, gamma=0.99, num_sgd_iters=4,
                model_config={"hiddens": [64, 64], "activation_fn": "tanh"})
    return AlgorithmConfig(**{**base, **kwargs})


def _true_kl(algo) -> float:
    """E[(r - 1) - log r] over the rollout, from the collect-time log-probabilities and
    ``policy.evaluate`` now: measured outside the algorithm."""
    T = algo.horizon
    buf = algo.buffer
    obs = buf.get(OBS)[:, :T].reshape(-1, *buf.get(OBS).shape[2:])
    actions = buf.get(ACTIONS)[:, :T].reshape(-1, *buf.get(ACTIONS).shape[2:])
    with torch.no_grad():
        log_ratio = algo.policy.evaluate(obs, actions).logp - buf.get(LOGP)[:, :T].reshape(-1, 1)
    return float((torch.expm1(log_ratio) - log_ratio).mean())


# -- the controls on their own ---------------------------------------------------------------


def test_early_stop_zeroes_the_lr_from_the_first_step_judged_above_the_limit() -> None:
    """The gate a single run's optimizer step applies to its tensor LR (Members.optimizer_step)."""
    stop = KLEarlyStop(0.01, device=torch.device("cpu"))
    lr, applied_lr, active = torch.tensor(1e-3), torch.tensor(1e-3), torch.tensor(1.0)
    stop.begin()
    seen = []
    for kl in (0.0, 0.012, 0.015, 0.0151, 0.001):  # 0.015 = 1.5 x target is still allowed
        torch.mul(lr, stop.gate(torch.tensor(kl), active), out=applied_lr)
        seen.append(float(applied_lr))
    assert seen == pytest.approx([1e-3, 1e-3, 1e-3, 0.0, 0.0])  # no step after the crossing, even below it again
    assert float(stop.applied) == 3 and bool(stop.stopped(active)) and float(lr) == pytest.approx(1e-3)
    stop.begin()  # the next step() starts open
    torch.mul(lr, stop.gate(torch.tensor(0.0), active), out=applied_lr)
    assert float(applied_lr) == pytest.approx(1e-3) and not bool(stop.stopped(active))


def test_adapted_lr_follows_rsl_rl_rule_within_bounds() -> None:
    bounds = (1e-4, 2e-3)
    assert adapted_lr(1e-3, 0.0201, 0.01, bounds) == pytest.approx(1e-3 / 1.5)
    assert adapted_lr(1e-3, 0.02, 0.01, bounds) == pytest.approx(1e-3)  # 2 x target: kept
    assert adapted_lr(1e-3, 0.005, 0.01, bounds) == pytest.approx(1e-3)  # target / 2: kept
    assert adapted_lr(1e-3, 0.0049, 0.01, bounds) == pytest.approx(1.5e-3)
    assert adapted_lr(1.5e-3, 0.0, 0.01, bounds) == pytest.approx(2e-3)  # clamped high
    assert adapted_lr(1.2e-4, 1.0, 0.01, bounds) == pytest.approx(1e-4)  # clamped low
    assert adapted_lr(1e-3, float("nan"), 0.01, bounds) == pytest.approx(1e-3)


# -- the early stop inside step() ----------------------------------------------------------


def _reference_steps(algo, target: float) -> int:
    """Replay step()'s minibatches with host decisions: judge each optimizer step on the
    KL of its data before it (SB3's rule) and stop at the first one above the limit."""
    cfg = algo.config
    algo.compute_advantages()
    batch = algo.minibatches.batch(algo.buffer, algo.horizon, algo.members.normalize)
    bounds = algo.minibatch_bounds()
    N = sum(size for _, size in bounds)
    params = [p for p in algo.policy.model.parameters() if p.requires_grad]
    applied = 0
    for _ in range(cfg.num_sgd_iters):
        judged = 0.0
        for k, (lo, size) in enumerate(bounds):
            mb = {key: x[lo : lo + size] for key, x in batch.items()}
            losses = algo.losses(mb)
            weight = size / N if cfg.accumulate_grads else 1.0
            (losses.total * weight).backward()
            judged += weight * float(losses.kl)
            if not cfg.accumulate_grads or k == len(bounds) - 1:
                if judged > EARLY_STOP_FACTOR * target:
                    algo.optimizer.zero_grad(set_to_none=True)
                    return applied
                algo.optimizer_step(params)
                applied += 1
                judged = 0.0
    return applied


@pytest.mark.parametrize("setting", [*SETTINGS, "micro_batches", "amp"])
def test_no_optimizer_step_is_applied_after_the_judged_kl_crossed_the_limit(setting: str) -> None:
    extra = {
        "micro_batches": {"sgd_minibatch_size": 256, "micro_batch_size": 100},
        "amp": {"sgd_minibatch_size": 256, "enable_amp": True},
    }.get(setting) or SETTINGS[setting]
    target = 0.002
    kwargs = dict(optimizer_config={"lr": 1e-2}, shuffle_minibatches=False, num_sgd_iters=10, **extra)
    controlled = _config(target_kl_div=target, **kwargs).build(CartPole)
    controlled.collect()
    reference = _config(**kwargs).build(CartPole)  # the same seed: the same parameters and rollout
    reference.collect()
    stats = controlled.step()
    expected = _reference_steps(reference, target)
    total = 10 * (1 if "sgd_minibatch_size" not in extra or extra.get("accumulate_grads") else 4)
    assert 0 < expected < total  # the limit is crossed mid-update: the test can fail
    assert stats["monitors/optimizer_steps"] == expected
    for a, b in zip(controlled.policy.model.parameters(), reference.policy.model.parameters()):
        assert_close(a, b, atol=1e-5, rtol=1e-4)
    # One epoch more than the steps it holds would never run: the stop ends the epochs.
    steps_per_epoch = total // 10
    assert stats["monitors/sgd_epochs"] == expected // steps_per_epoch + 1


@pytest.mark.parametrize("setting", [*SETTINGS, "members"])
def test_the_early_stop_without_a_host_read_holds_the_later_epochs_exactly(setting: str) -> None:
    """``sync_kl_stop=False`` (a GPU's way: no host read inside the update) runs every
    epoch, the ones after the stop with their steps held. The parameters, the optimizer's
    state and the statistics are those of the loop that reads the stop and ends there,
    bit for bit: a held step adds exact zeros (its LR is 0, its moments' weights 0 and 1)."""
    extra = {"num_seeds": 2, "sgd_minibatch_size": 256} if setting == "members" else SETTINGS[setting]
    kwargs = dict(target_kl_div=0.002, optimizer_config={"lr": 1e-2}, num_sgd_iters=10, **extra)
    ending, holding = _config(**kwargs).build(CartPole), _config(**kwargs).build(CartPole)
    assert ending.sync_kl_stop  # a CPU reads the stop: it costs nothing there
    holding.sync_kl_stop = False
    for i in range(2):
        stats = []
        for algo in (ending, holding):
            torch.manual_seed(i)  # the same rollout and epoch orders for both
            algo.collect()
            stats.append(algo.step())
        assert stats[0] == {**stats[1], "profiling/step_ms": stats[0]["profiling/step_ms"]}
    assert 1 <= stats[0]["monitors/sgd_epochs"] < 10  # the stop ended the epochs: the test can fail
    for a, b in zip(ending.policy.model.parameters(), holding.policy.model.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(ending.optimizer.state.values(), holding.optimizer.state.values()):
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(ending.kl_stop.applied, holding.kl_stop.applied)


# -- the adaptive LR keeps the KL near the target -------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_adaptive_lr_keeps_the_kl_per_step_near_the_target(setting: str) -> None:
    target = 0.002
    algo = _config(target_kl_div=target, kl_adaptive_lr=True, **SETTINGS[setting]).build(CartPole)
    kls, lrs = [], []
    for _ in range(60):
        algo.collect()
        stats = algo.step()
        kls.append(_true_kl(algo))
        lrs.append(stats["monitors/lr"])
        assert stats["monitors/kl_div"] == pytest.approx(kls[-1], rel=1e-3, abs=1e-7)  # the reported KL is the reached one
        assert stats["monitors/kl_div_max"] >= stats["monitors/kl_div"]
    median = statistics.median(kls[30:])
    assert target / 3 <= median <= 3 * target, (median, kls[30:])
    assert len(set(lrs[30:])) > 1 and max(lrs) < algo.config.kl_adaptive_lr_bounds[1]  # it keeps moving, unclamped


def test_the_adaptive_lr_moves_once_per_update_on_the_kl_it_reached() -> None:
    # One, accumulated and several minibatches alike: the rule judges the whole update.
    for setting in SETTINGS.values():
        algo = _config(target_kl_div=0.002, kl_adaptive_lr=True, optimizer_config={"lr": 3e-3}, **setting).build(CartPole)
        for _ in range(3):
            lr = algo.lr
            algo.collect()
            stats = algo.step()
            assert stats["monitors/lr"] == pytest.approx(lr)  # the LR this update used
            assert algo.lr == pytest.approx(adapted_lr(lr, stats["monitors/kl_div"], 0.002, (1e-5, 1e-2)))
            assert "monitors/optimizer_steps" not in stats  # it never stops an update


# -- what is reported ----------------------------------------------------------------------


def test_reported_kl_is_the_kl_after_the_last_step_with_or_without_controls() -> None:
    for kwargs in ({}, {"target_kl_div": 0.01}, {"sgd_minibatch_size": 256, "micro_batch_size": 300}):
        algo = _config(optimizer_config={"lr": 3e-3}, **kwargs).build(CartPole)
        for _ in range(2):
            algo.collect()
            stats = algo.step()
            assert stats["monitors/kl_div"] == pytest.approx(_true_kl(algo), rel=1e-3, abs=1e-7)
            assert stats["monitors/kl_div_max"] >= stats["monitors/kl_div"] > 0


def test_recurrent_ppo_reports_the_kl_after_its_update() -> None:
    algo = RecurrentAlgorithmConfig(
        num_envs=8, horizon=16, seq_len=8, device="cpu", seed=0, target_kl_div=0.01, optimizer_config={"lr": 3e-3}
    ).build(CartPoleNoVelocity)
    algo.collect()
    stats = algo.step()
    # Measured outside the algorithm: every sequence from its stored state.
    T, L = 16, 8
    buf = algo.buffer
    seq = {key: buf.get(key)[:, :T].reshape(8 * (T // L), L, *buf.get(key).shape[2:]) for key in (OBS, ACTIONS, LOGP, "resets")}
    state = buf.get("hidden")[:, 0:T:L].reshape(8 * (T // L), *buf.get("hidden").shape[2:])
    with torch.no_grad():
        out = algo.policy.evaluate_sequences(seq[OBS], seq[ACTIONS], state, seq["resets"].squeeze(-1))
    log_ratio = out.logp - seq[LOGP].reshape(-1, 1)
    assert stats["monitors/kl_div"] == pytest.approx(float((torch.expm1(log_ratio) - log_ratio).mean()), rel=1e-3)


def test_a_resume_keeps_the_adapted_lr() -> None:
    algo = _config(target_kl_div=1e-9, kl_adaptive_lr=True).build(CartPole)
    for _ in range(3):  # each update's KL is above 2 x target: lr / 1.5 each
        algo.collect()
        algo.step()
    assert algo.lr == pytest.approx(1e-3 / 1.5**3)
    state = algo.state_dict()
    expected = [algo.collect(), algo.step()]
    resumed = _config(target_kl_div=1e-9, kl_adaptive_lr=True).build(CartPole)
    resumed.load_state_dict(state)  # the RNG state too
    assert resumed.lr == pytest.approx(1e-3 / 1.5**3)
    got = [resumed.collect(), resumed.step()]
    for e, g in zip(expected, got):
        assert {k: v for k, v in e.items() if "profiling" not in k} == {k: v for k, v in g.items() if "profiling" not in k}


def test_a_checkpoint_of_another_optimizer_kernel_resumes_with_this_ones() -> None:
    plain = _config(optimizer_config={"lr": 1e-3, "foreach": False}).build(CartPole)
    plain.collect()
    plain.step()
    fused = _config().build(CartPole)  # rlx's default: fused Adam
    fused.load_state_dict(plain.state_dict())
    group = fused.optimizer.param_groups[0]
    assert group["fused"] is True and group["foreach"] is None
    steps = [s["step"] for s in fused.optimizer.state.values()]
    assert steps and all(float(s) == 4.0 and s.dtype == torch.float32 for s in steps)  # 4 epochs of one step
    fused.collect()
    fused.step()  # the fused kernel runs with the loaded moments


def test_a_resume_keeps_the_early_stop_lr_tensor_live_in_the_optimizer() -> None:
    algo = _config(target_kl_div=0.002, sgd_minibatch_size=256, optimizer_config={"lr": 1e-2}).build(CartPole)
    algo.collect()
    algo.step()
    state = algo.state_dict()
    expected = [algo.collect(), algo.step()]
    resumed = _config(target_kl_div=0.002, sgd_minibatch_size=256, optimizer_config={"lr": 1e-2}).build(CartPole)
    resumed.load_state_dict(state)
    assert all(g["lr"] is resumed._lr_applied for g in resumed.optimizer.param_groups)  # the tensor the gate writes
    assert float(resumed._lr_applied) == pytest.approx(1e-2)  # the base LR, not a stopped step's 0
    got = [resumed.collect(), resumed.step()]
    for e, g in zip(expected, got):
        assert {k: v for k, v in e.items() if "profiling" not in k} == {k: v for k, v in g.items() if "profiling" not in k}


# -- the adaptive rule per minibatch (rsl_rl's placement) -------------------------------------


@pytest.mark.parametrize("env_name", ["CartPole", "Pendulum"])
def test_the_per_minibatch_rule_sets_each_steps_lr_from_that_minibatchs_kl(env_name: str) -> None:
    """Each optimizer step runs at the LR the rule gives from the previous one's LR and
    the KL of the minibatch it steps on (measured before the step), as rsl_rl does."""
    import rlx.envs
    from rlx.algorithms.kl_control import adapted_lr

    target, bounds = 0.002, (1e-4, 2e-2)
    algo = AlgorithmConfig(num_envs=32, horizon=32, device="cpu", seed=0, sgd_minibatch_size=128, num_sgd_iters=3,
                           optimizer_config={"lr": 3e-3}, kl_adaptive_lr=True, target_kl_div=target,
                           kl_adaptive_lr_bounds=bounds, kl_adaptive_lr_per_minibatch=True,
                           model_config={"hiddens": [32, 32]}).build(getattr(rlx.envs, env_name))
    for _ in range(2):
        kls, lrs = [], []
        losses = algo.loss_fn
        algo.loss_fn = lambda mb: (out := losses(mb), kls.append(float(out.kl)))[0]
        hook = algo.optimizer.register_step_pre_hook(lambda opt, a, k: lrs.append(float(opt.param_groups[0]["lr"])))
        lr = algo.lr
        algo.collect()
        stats = algo.step()
        hook.remove()
        algo.loss_fn = losses
        assert len(kls) == len(lrs) == 3 * 8
        expected = []
        for kl in kls:  # rsl_rl's rule: raise only on a positive KL
            lr = adapted_lr(lr, kl, target, bounds) if (kl > 2 * target or 0.0 < kl < 0.5 * target) else lr
            expected.append(lr)
        # The LR tensor is float32: each of its n = 24 adaptations rounds once (IEEE-exact on
        # every device), so it is within (n + 1)·2^-24 of the float64 replay.
        rel = (len(kls) + 1) * 2**-24
        assert lrs == pytest.approx(expected, rel=rel)
        assert stats["monitors/lr"] == pytest.approx(expected[-1], rel=rel) and algo.lr == pytest.approx(expected[-1], rel=rel)
        assert len(set(round(x, 9) for x in lrs)) > 1  # it did move within the update


def test_with_accumulated_gradients_the_per_minibatch_rule_sets_each_epochs_lr_from_its_kl() -> None:
    """With ``accumulate_grads`` the optimizer steps once an epoch, on the gradient of all
    its minibatches: the rule runs before that step, on the KL of the data the gradient
    came from, the minibatches' KLs weighted by their shares of the buffer."""
    from rlx.algorithms.kl_control import adapted_lr

    target, bounds = 0.002, (1e-4, 5e-2)
    algo = AlgorithmConfig(num_envs=32, horizon=32, device="cpu", seed=0, sgd_minibatch_size=128, num_sgd_iters=3,
                           accumulate_grads=True, optimizer_config={"lr": 2e-2}, kl_adaptive_lr=True,
                           target_kl_div=target, kl_adaptive_lr_bounds=bounds, kl_adaptive_lr_per_minibatch=True,
                           model_config={"hiddens": [32, 32]}).build(CartPole)
    moved = set()
    adapt = algo._adapt_lr_to_minibatch
    for _ in range(3):
        kls, judged, lrs = [], [], []
        losses = algo.loss_fn
        algo.loss_fn = lambda mb: (out := losses(mb), kls.append(float(out.kl)))[0]
        algo._adapt_lr_to_minibatch = lambda kl: (judged.append(float(kl)), adapt(kl))[1]
        hook = algo.optimizer.register_step_pre_hook(lambda opt, a, k: lrs.append(float(opt.param_groups[0]["lr"])))
        lr = algo.lr
        algo.collect()
        stats = algo.step()
        hook.remove()
        algo.loss_fn, algo._adapt_lr_to_minibatch = losses, adapt
        assert len(kls) == 3 * 8 and len(judged) == len(lrs) == 3  # 8 minibatches an epoch, one step each epoch
        expected = []
        for e in range(3):
            kl = sum(kls[8 * e : 8 * e + 8]) / 8  # equal shares of 1024 samples
            # The KL the rule judged is the epoch's: the device sums 8 float32 terms (exact
            # products by 1/8) of one sign, within 8·2^-24 of this sum (and not the last
            # minibatch's alone, which differs from it by far more; the first epoch's are 0:
            # it runs before the update's first step).
            assert judged[e] == pytest.approx(kl, rel=8 * 2**-24)
            assert (kl == 0.0) == (e == 0) and (e == 0 or abs(kls[8 * e + 7] - kl) > 1e-3 * kl)
            # No threshold of the rule lies within that rounding of it.
            assert all(abs(kl - t) > 1e-5 * t for t in (2 * target, 0.5 * target)), kl
            lr = adapted_lr(lr, kl, target, bounds) if (kl > 2 * target or 0.0 < kl < 0.5 * target) else lr
            expected.append(lr)
            moved.add(round(lr, 9))
        # The float32 LR tensor rounds once an adaptation: 3 a step() (see the test above).
        assert lrs == pytest.approx(expected, rel=4 * 2**-24)
        assert stats["monitors/lr"] == pytest.approx(expected[-1], rel=4 * 2**-24)
    assert len(moved) > 1  # the rule moved the LR


def test_the_per_minibatch_rule_needs_the_adaptive_lr() -> None:
    with pytest.raises(ConfigError, match="kl_adaptive_lr_per_minibatch: needs kl_adaptive_lr=True"):
        AlgorithmConfig(num_envs=8, horizon=8, device="cpu", kl_adaptive_lr_per_minibatch=True)
