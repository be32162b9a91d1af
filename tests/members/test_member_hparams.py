"""Members that differ in hyperparameters (issue #31): member i of a population updates
as a single run with member i's hyperparameters on the same data, and members share
nothing."""

from __future__ import annotations

import math

import pytest
import torch

from rlx import A2CConfig, AlgorithmConfig, ConfigError, NPGConfig, RecurrentAlgorithmConfig
from rlx.core.gae import generalized_advantage_estimate_
from rlx.core.normalization import RewardScaler
from rlx.envs import CartPole, CartPoleNoVelocity, Pendulum

B, T, S = 8, 16, 3
BUFFER_KEYS = ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated", "final_values", "hidden", "resets")


def _config(**kwargs) -> dict:
    # SGD: a step linear in the LR, so a member's LR factor is exact to rounding (Adam's is
    # tested below with a tolerance for its first steps' amplification).
    base = dict(num_envs=B, horizon=T, device="cpu", seed=0, optimizer_cls=torch.optim.SGD,
                optimizer_config={"lr": 0.05}, model_config={"hiddens": [16, 16], "activation_fn": "tanh"})
    return {**base, **kwargs}


def _single_config(extra: dict, hparams: dict, i: int) -> dict:
    """A single run's config with member i's hyperparameters."""
    config = _config(**extra)
    for name, values in hparams.items():
        if name == "lr":
            config["optimizer_config"] = {**config["optimizer_config"], "lr": values[i]}
        else:
            config[name] = values[i]
    return config


def _feed(multi, single, i: int) -> None:
    single.policy.model.load_state_dict(multi.policy.model.unstack(i).state_dict())
    rows = slice(i * B, (i + 1) * B)
    for key in BUFFER_KEYS:
        if key in multi.buffer.keys():
            single.buffer.get(key).copy_(multi.buffer.get(key)[rows])
    pairs = [(multi.reward_scaler.stats, single.reward_scaler.stats)]
    pairs += [(multi.policy.obs_normalizers[k], single.policy.obs_normalizers[k]) for k in single.policy.obs_normalizers]
    for many, one in pairs:
        one.mean.copy_(many.mean[i])
        one.var.copy_(many.var[i])
        one.count.copy_(many.count)


def _side_by_side(config_cls, env_cls, extra: dict, hparams: dict, steps: int = 1, rtol=1e-5, atol=1e-6,
                  float64: bool = False, algos: bool = False):
    """``steps`` updates of a population and of S single runs fed its members' data;
    checks parameters after each and returns the last statistics of both. ``float64``:
    every model computes in float64 (a reference run of the same code)."""
    multi = config_cls(**_config(num_seeds=S, member_hparams=hparams, **extra)).build(env_cls)
    singles = [config_cls(**_single_config(extra, hparams, i)).build(env_cls) for i in range(S)]
    if float64:
        for algo in (multi, *singles):
            algo.policy.double()
    for _ in range(steps):
        multi.collect()
        for i, single in enumerate(singles):
            single.collect()
            _feed(multi, single, i)
        out = multi.step()
        ones = [single.step() for single in singles]
        for i, single in enumerate(singles):
            for a, b in zip(multi.policy.model.unstack(i).parameters(), single.policy.model.parameters()):
                torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
    return (out, ones, multi, singles) if algos else (out, ones)


PPO_CASES = {
    "lr-entropy-clip": (CartPole, {"sgd_minibatch_size": 32, "shuffle_minibatches": False},
                        {"lr": [0.01, 0.05, 0.2], "entropy_coeff": [0.0, 0.01, 0.1], "clip_param": [0.05, 0.2, 0.5]}),
    "gamma-lambda": (Pendulum, {"sgd_minibatch_size": 64, "shuffle_minibatches": False},
                     {"gamma": [0.8, 0.95, 0.99], "gae_lambda": [0.5, 0.9, 1.0]}),
    "value-terms-grad-norm": (Pendulum, {"sgd_minibatch_size": 64, "shuffle_minibatches": False},
                              {"vf_clip_param": [0.1, 1.0, 10.0], "vf_coeff": [0.1, 0.5, 2.0],
                               "max_grad_norm": [0.05, 0.5, 50.0]}),
    "kl-early-stop-targets": (Pendulum, {"sgd_minibatch_size": 48, "shuffle_minibatches": False, "target_kl_div": 1e-4,
                                         "optimizer_config": {"lr": 0.02}},
                              {"target_kl_div": [1e-4, 1e-3, 1e-1]}),
    # One optimizer step per epoch on the gradient of every minibatch, judged by the KL
    # stop on the epoch's KL so far.
    "accumulate-grads": (Pendulum, {"sgd_minibatch_size": 32, "accumulate_grads": True, "target_kl_div": 1e-4,
                                    "num_sgd_iters": 4, "optimizer_config": {"lr": 0.5}},
                         {"target_kl_div": [1e-5, 1e-3, 1e-1], "max_grad_norm": [0.05, 0.5, 50.0]}),
    # rsl_rl's rule before every step, each member's LR on its own minibatch KL and target.
    "adaptive-lr-per-minibatch": (Pendulum, {"sgd_minibatch_size": 32, "shuffle_minibatches": False, "kl_adaptive_lr": True,
                                             "kl_adaptive_lr_per_minibatch": True, "target_kl_div": 1e-3,
                                             "kl_adaptive_lr_bounds": (1e-4, 0.1), "max_grad_norm": 0.5},
                                  {"target_kl_div": [1e-5, 1e-3, 1e-1], "lr": [0.01, 0.05, 0.1]}),
    # The same rule with accumulate_grads: before each epoch's one step, on the epoch's KL.
    "adaptive-lr-accumulated": (Pendulum, {"sgd_minibatch_size": 32, "accumulate_grads": True, "kl_adaptive_lr": True,
                                           "kl_adaptive_lr_per_minibatch": True, "target_kl_div": 1e-3,
                                           "kl_adaptive_lr_bounds": (1e-4, 0.5), "max_grad_norm": 0.5},
                                {"target_kl_div": [1e-5, 1e-3, 1e-1], "lr": [0.05, 0.2, 0.4]}),
}
#: A member's LR adapted on the device is its base LR times a float32 factor: 3 roundings
#: an adaptation (2^-24 each), 32 over two step()s, move its LR by <= 96 2^-24 = 5.7e-6 of
#: itself, and each of its 32 SGD steps of <= lr x max_grad_norm = 0.05 by that much more:
#: <= 32 x 0.05 x 5.7e-6 = 9.2e-6 (a single run's LR rounds once an adaptation). Accumulated:
#: 8 adaptations (one an epoch) move the LR by <= 24 2^-24 = 1.4e-6 of itself, and each of
#: 8 steps of <= 0.5 x 0.5 by that much more: <= 2.9e-6.
ATOL = {"adaptive-lr-per-minibatch": 1e-5, "adaptive-lr-accumulated": 1e-5}


@pytest.mark.parametrize("case", list(PPO_CASES))
def test_each_ppo_member_updates_as_a_single_run_with_its_hyperparameters(case: str) -> None:
    env_cls, extra, hparams = PPO_CASES[case]
    # In float64, so that the clip and the KL stop judge values a rounding cannot flip. SGD's
    # step is linear in the gradient: the float64 sums differ by n·2^-53·Σ|terms| ≈ 7e-14
    # a step; the members' float32 LR factors (0.01 = 0.2 x 0.05, 0.2 off by up to 2^-24)
    # move each step of <= 1e-2 by 6e-10 more, 2e-8 over two step()s of 16 steps: atol
    # 1e-6 (measured 2e-9).
    out, ones, multi, singles = _side_by_side(AlgorithmConfig, env_cls, extra, hparams, steps=2, rtol=1e-9,
                                              atol=ATOL.get(case, 1e-6), float64=True, algos=True)
    for i, one in enumerate(ones):
        for key in ("losses/policy", "losses/vf", "losses/entropy", "monitors/kl_div", "monitors/clip_fraction"):
            assert math.isclose(out[f"member{i}/{key}"], one[key], rel_tol=1e-4, abs_tol=1e-6), (key, i)
        for name, values in hparams.items():
            if not (name == "lr" and extra.get("kl_adaptive_lr")):  # an adapted LR moves
                assert out[f"member{i}/hparams/{name}"] == pytest.approx(values[i])
    if case in ("adaptive-lr-per-minibatch", "adaptive-lr-accumulated"):  # each member's LR moved by its own rule
        for i, (one, single) in enumerate(zip(ones, singles)):
            assert out[f"member{i}/monitors/lr"] == pytest.approx(one["monitors/lr"], rel=1e-6)
            assert multi.members.learning_rates(multi.lr)[i] == pytest.approx(single.lr, rel=1e-6)
        assert len({round(one["monitors/lr"], 9) for one in ones}) == S
    if case in ("kl-early-stop-targets", "accumulate-grads"):  # each member stopped at its own target
        steps = [one["monitors/optimizer_steps"] for one in ones]
        assert [out[f"member{i}/monitors/optimizer_steps"] for i in range(S)] == steps
        assert steps[0] < steps[-1], steps


def test_each_members_kl_adaptive_lr_follows_its_own_target() -> None:
    extra = {"target_kl_div": 1e-3, "kl_adaptive_lr": True, "kl_adaptive_lr_bounds": (1e-4, 1.0),
             "sgd_minibatch_size": 32, "shuffle_minibatches": False}
    hparams = {"target_kl_div": [1e-5, 1e-3, 1.0], "lr": [0.01, 0.05, 0.05]}
    multi = AlgorithmConfig(**_config(num_seeds=S, member_hparams=hparams, **extra)).build(Pendulum)
    singles = [AlgorithmConfig(**_single_config(extra, hparams, i)).build(Pendulum) for i in range(S)]
    for _ in range(3):
        multi.collect()
        for i, single in enumerate(singles):
            single.collect()
            _feed(multi, single, i)
        multi.step()
        for i, single in enumerate(singles):
            single.step()
            assert multi.member_values("lr")[i] == pytest.approx(single.lr, rel=1e-9)
            for a, b in zip(multi.policy.model.unstack(i).parameters(), single.policy.model.parameters()):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    lrs = multi.member_values("lr")
    assert lrs[0] < 0.01 and lrs[2] > 0.05  # a tiny target lowered its LR, a huge one raised it


def test_adam_members_with_differing_lrs_track_their_single_runs() -> None:
    """Adam's own kernel per single run against SeedAdam's per-member LR (``lr * factor``),
    in float64: Adam divides a gradient entry by its RMS + eps (1e-8), so the sums'
    rounding δ <= 64 · 2^-53 · 10 ≈ 7e-14 moves an entry by at most lr·δ/eps = 7e-6·lr a
    step, 32 steps x 7e-6 x 3e-3 ≈ 7e-7 in all (in float32 that amplification reaches
    lr-sized moves)."""
    extra = {"optimizer_cls": torch.optim.Adam, "sgd_minibatch_size": 64, "shuffle_minibatches": False}
    hparams = {"lr": [1e-4, 1e-3, 3e-3]}
    _side_by_side(AlgorithmConfig, Pendulum, extra, hparams, steps=2, rtol=1e-9, atol=1e-6, float64=True)


def test_each_a2c_member_updates_as_a_single_run_with_its_hyperparameters() -> None:
    hparams = {"lr": [0.01, 0.05, 0.1], "entropy_coeff": [0.0, 0.01, 0.1], "vf_coeff": [0.25, 0.5, 1.0],
               "gamma": [0.9, 0.95, 0.99]}
    out, ones = _side_by_side(A2CConfig, Pendulum, {"sgd_minibatch_size": 64, "shuffle_minibatches": False}, hparams)
    for i, one in enumerate(ones):
        for key in ("losses/policy", "losses/vf", "losses/entropy"):
            assert math.isclose(out[f"member{i}/{key}"], one[key], rel_tol=1e-4, abs_tol=1e-6), key


def test_each_recurrent_member_updates_as_a_single_run_with_its_hyperparameters() -> None:
    hparams = {"lr": [0.01, 0.05, 0.1], "clip_param": [0.1, 0.2, 0.3], "gae_lambda": [0.8, 0.9, 1.0]}
    extra = {"seq_len": 4, "sgd_minibatch_size": 32, "shuffle_minibatches": False,
             "model_config": {"hiddens": [16], "hidden_size": 8}}
    out, ones = _side_by_side(RecurrentAlgorithmConfig, CartPoleNoVelocity, extra, hparams)
    for i, one in enumerate(ones):
        for key in ("losses/policy", "losses/vf", "monitors/kl_div"):
            assert math.isclose(out[f"member{i}/{key}"], one[key], rel_tol=1e-4, abs_tol=1e-6), key


# The natural step compared in float64, with conjugate gradient run to convergence. Ten
# float32 iterations cannot be compared across two computations: on Pendulum the
# Fisher has 34 eigenvalues above the damping's cluster of 320, and by the ninth
# iteration CG's search direction has shrunk 1e5-fold (pᵀAp 1e-4 -> 1e-9), so each
# iterate amplifies rounding ~100x: a 1e-15 relative change of g moves the tenth float64
# iterate by 5e-5 (benchmarks/experiments/cg_sensitivity.py, member 0's dense
# F + λI). The member and the single run
# then differed by 4e-4 in float32 on an Intel Xeon and by 6e-4 in float64 here, with g
# and Fg equal to 1e-16. Converged, the solve is as well conditioned as F + λI:
# κ = (λmax(F) + λ) / λ <= 5 / 0.01 = 500, so the two float64 solves agree to about
# κ·n·u = 500 · 128 · 2^-53 ≈ 7e-12 of the step (tolerances below: 1e-9 relative).
# The LR factors 0.25, 1 and 2 (lr 0.0125 / 0.05 / 0.1 against the base 0.05) are exact in
# float32, so a member's scaled critic step rounds as the single run's does.
NPG_FLOAT64 = {"cg_iters": 40, "cg_residual_tol": 0.0}


@pytest.mark.parametrize("line_search", [False, True], ids=["npg", "trpo"])
def test_each_npg_member_updates_as_a_single_run_with_its_hyperparameters(line_search: bool) -> None:
    hparams = {"max_kl": [0.001, 0.01, 0.05], "damping": [0.01, 0.1, 0.5], "lr": [0.0125, 0.05, 0.1],
               "gae_lambda": [0.8, 0.9, 0.97]}
    extra = {"fvp_subsample": 1.0, "optim_critic_iters": 2, "line_search": line_search, **NPG_FLOAT64}
    out, ones = _side_by_side(NPGConfig, Pendulum, extra, hparams, rtol=1e-9, atol=1e-11, float64=True)
    for i, one in enumerate(ones):
        for key in ("losses/policy", "losses/vf", "monitors/kl_div", "npg/step_size"):
            # the statistics leave the device as float32: equal float64 values round alike
            # but for one float32 ulp (2^-23 relative) where they straddle a rounding edge;
            # the critic's loss is a float32 mean of 128 rows (n·2^-24 ≈ 7.6e-6 apart at most)
            assert math.isclose(out[f"member{i}/{key}"], one[key], rel_tol=1e-5 if key == "losses/vf" else 2**-22), key
    if line_search:  # each member within its own trust region
        for i in range(S):
            assert out[f"member{i}/monitors/kl_div"] <= hparams["max_kl"][i] * 1.5


def test_an_entropy_schedule_scales_each_members_coefficient() -> None:
    hparams = {"entropy_coeff": [0.01, 0.02, 0.04]}
    extra = {"entropy_coeff_schedule": [[0, 0.01], [2 * B * T, 0.002]], "entropy_coeff_schedule_kind": "interp"}
    algo = AlgorithmConfig(**_config(num_seeds=S, member_hparams=hparams, **extra)).build(CartPole)
    torch.testing.assert_close(algo.entropy_coeff, torch.tensor([0.01, 0.02, 0.04]))
    algo.collect()
    algo.step()  # B * T env steps: halfway down the schedule (0.01 -> 0.006)
    torch.testing.assert_close(algo.entropy_coeff, torch.tensor([0.006, 0.012, 0.024]))


def test_gae_with_each_envs_gamma_and_lambda_is_each_envs_own_gae() -> None:
    g = torch.Generator().manual_seed(3)
    n, horizon = 6, 9
    rewards = torch.randn(n, horizon, 1, generator=g)
    values = torch.randn(n, horizon + 1, 1, generator=g)
    terminated = torch.rand(n, horizon, 1, generator=g) < 0.15
    truncated = torch.rand(n, horizon, 1, generator=g) < 0.15
    final_values = torch.randn(n, horizon, 1, generator=g)
    gammas, lambdas = [0.5, 0.9, 0.99, 1.0, 0.0, 0.95], [0.0, 0.5, 0.95, 1.0, 0.7, 0.9]
    adv, ret = torch.empty(n, horizon, 1), torch.empty(n, horizon, 1)
    generalized_advantage_estimate_(rewards, values, terminated, truncated, final_values,
                                    gamma=torch.tensor(gammas, dtype=torch.float64).view(-1, 1, 1),
                                    gae_lambda=torch.tensor(lambdas, dtype=torch.float64).view(-1, 1, 1),
                                    advantages=adv, returns=ret)
    for i in range(n):
        a, r = torch.empty(1, horizon, 1), torch.empty(1, horizon, 1)
        rows = slice(i, i + 1)
        generalized_advantage_estimate_(rewards[rows], values[rows], terminated[rows], truncated[rows],
                                        final_values[rows], gamma=gammas[i], gae_lambda=lambdas[i], advantages=a, returns=r)
        assert torch.equal(adv[rows], a) and torch.equal(ret[rows], r)


def test_a_reward_scaler_with_each_envs_gamma_is_each_members_own() -> None:
    g = torch.Generator().manual_seed(0)
    members, per = 3, 4
    gammas = [0.5, 0.9, 0.99]
    many = RewardScaler(members * per, 0.9, num_seeds=members)
    many.set_gamma(torch.tensor(gammas, dtype=torch.float64).repeat_interleave(per))
    ones = [RewardScaler(per, gamma) for gamma in gammas]
    for _ in range(3):
        rewards = torch.randn(members * per, 5, 1, generator=g)
        dones = torch.rand(members * per, 5, 1, generator=g) < 0.2
        many.update(rewards, dones)
        for i, one in enumerate(ones):
            one.update(rewards[i * per : (i + 1) * per], dones[i * per : (i + 1) * per])
    for i, one in enumerate(ones):
        torch.testing.assert_close(many.returns[i * per : (i + 1) * per], one.returns, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(many.stats.var[i : i + 1], one.stats.var, rtol=1e-6, atol=1e-7)


def test_member_hyperparameters_resume_exactly_and_move_in_place(resumed_run) -> None:
    hparams = {"lr": [0.01, 0.05, 0.1], "entropy_coeff": [0.0, 0.01, 0.1], "gamma": [0.9, 0.95, 0.99],
               "target_kl_div": [0.01, 0.02, 0.05], "clip_param": [0.1, 0.2, 0.3]}
    extra = {"sgd_minibatch_size": 64, "target_kl_div": 0.01}

    def run(resume_at: int | None) -> list[torch.Tensor]:
        def change(algo, k: int) -> None:
            if k == 1:  # a PBT-style change mid-run
                algo.set_member_values("entropy_coeff", [0.05, 0.0, 0.02])
                algo.set_member_values("lr", [0.02, 0.02, 0.2])
                algo.set_member_values("gamma", [0.99, 0.9, 0.95])
                algo.set_member_values("target_kl_div", [0.05, 0.01, 0.02])

        make = lambda: AlgorithmConfig(**_config(num_seeds=S, member_hparams=hparams, **extra)).build(Pendulum)  # noqa: E731
        algo = resumed_run(make, resume_at, before=change)
        assert algo.member_values("entropy_coeff") == [0.05, 0.0, 0.02]
        assert algo.member_values("lr") == pytest.approx([0.02, 0.02, 0.2])
        torch.testing.assert_close(algo.kl_stop.limit, 1.5 * torch.tensor([0.05, 0.01, 0.02]))
        torch.testing.assert_close(algo.reward_scaler.gamma_rows.view(-1)[::B].float(), torch.tensor([0.99, 0.9, 0.95]))
        return [p.detach().clone() for p in algo.policy.model.parameters()]

    for a, b in zip(run(None), run(2)):
        assert torch.equal(a, b)


def test_what_cannot_differ_between_members_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="'num_envs' cannot differ between members .it sets the env's"):
        AlgorithmConfig(num_seeds=2, member_hparams={"num_envs": [8, 16]})
    with pytest.raises(ConfigError, match="'model_config' cannot differ between members .network widths"):
        AlgorithmConfig(num_seeds=2, member_hparams={"model_config": [{}, {}]})
    with pytest.raises(ConfigError, match="'max_kl' cannot differ between members of a AlgorithmConfig"):
        AlgorithmConfig(num_seeds=2, member_hparams={"max_kl": [0.01, 0.02]})
    with pytest.raises(ConfigError, match=r"member_hparams\['lr'\]: needs one value per member, num_seeds=3, got 2"):
        AlgorithmConfig(num_seeds=3, member_hparams={"lr": [1e-3, 1e-4]})
    with pytest.raises(ConfigError, match=r"member_hparams\['gamma'\]\[1\]: gamma must be in \[0, 1\], got 1.5"):
        AlgorithmConfig(num_seeds=2, member_hparams={"gamma": [0.9, 1.5]})
    with pytest.raises(ConfigError, match=r"member_hparams\['target_kl_div'\]: target_kl_div is None in the config"):
        AlgorithmConfig(num_seeds=2, member_hparams={"target_kl_div": [0.01, 0.02]})
    with pytest.raises(ConfigError, match="member_hparams: needs num_seeds > 1"):
        AlgorithmConfig(member_hparams={"lr": [1e-3]})
