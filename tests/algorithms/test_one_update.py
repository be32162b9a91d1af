"""PPO's one minibatch update, as eager runs it and as ``compile=True`` compiles it.

The update's optimizer step is rlx's own Adam (:func:`rlx.members.optim.adam_step_`, on
the optimizer's state), which a compiled program traces where ``optimizer.step()``
would break it. Two comparisons hold the update:

* **The step against torch's.** The same update with the step taken by the optimizer
  itself (``optimizer.step()``: torch's fused Adam for one run, SeedAdam through
  ``masked_step_`` for members): every case below, eagerly.
* **Compiled against eager.** The same function, compiled whole (forward, losses,
  backward, clip, KL controls, step), on representative cases.

Both run on the same rollout from the same parameters and optimizer state, in float64
(``policy.double()``: the same code, rounding at 2^-53). Their gradients differ by
reassociation only; Adam divides each gradient entry by its running RMS plus
``eps = 1e-8``, so an entry whose gradient nearly cancels turns an absolute rounding δ
into a move of up to ``lr · δ / eps``. With δ <= n · 2^-53 · Σ|terms| (n <= 256 rows,
per-row gradients below 10 here: δ <= 6e-13), that is at most 6e-5 · lr a step, 1.5e-3 · lr
over the 24 steps of a ``step()`` if every one of them hit such an entry alike; the
parameters are held to ``atol = 1e-3 · lr`` and the moments to 1e-3 of their largest
entry. In float32 the same amplification reaches lr-sized moves (δ ~ 1e-7 · Σ|terms|):
two correct programs then differ by whatever the CPU's kernels round.

The bf16 autocast case cannot run in float64: its bound is bf16's own rounding (below).
"""

from __future__ import annotations

import pytest
import torch

from rlx import A2CConfig, AlgorithmConfig
from contextlib import contextmanager
from unittest import mock

from rlx.core.compiling import WarmProgram
from rlx.envs import CartPole, Pendulum
from rlx.examples.windy_reach import mirror as windy_mirror

BASE = dict(num_envs=32, horizon=16, device="cpu", seed=0, sgd_minibatch_size=128, num_sgd_iters=4,
            model_config={"hiddens": [32, 32]})
CASES = {
    "cartpole": (AlgorithmConfig, CartPole, {}),
    "pendulum_clips": (AlgorithmConfig, Pendulum, dict(vf_clip_param=0.5, dual_clip_param=3.0, entropy_coeff=0.01,
                                                       normalize_obs=True, normalize_rewards=True)),
    "no_grad_clip": (AlgorithmConfig, CartPole, dict(max_grad_norm=None)),
    "adamw_schedule": (AlgorithmConfig, Pendulum, dict(optimizer_cls=torch.optim.AdamW,
                                                       optimizer_config={"lr": 3e-4, "weight_decay": 0.01},
                                                       lr_schedule=[[0, 3e-4], [2000, 1e-4]])),
    "adaptive_lr": (AlgorithmConfig, Pendulum, dict(kl_adaptive_lr=True, target_kl_div=0.01)),
    "adaptive_lr_per_minibatch": (AlgorithmConfig, Pendulum, dict(kl_adaptive_lr=True, target_kl_div=0.002,
                                                                   kl_adaptive_lr_per_minibatch=True)),
    "whole_batch": (AlgorithmConfig, CartPole, dict(sgd_minibatch_size=None)),
    "a2c": (A2CConfig, CartPole, {}),
    "bf16_amp": (AlgorithmConfig, CartPole, dict(enable_amp=True)),
    # S members: stacked parameters and SeedAdam, each member clipped and stepped apart.
    # Observation groups (a TensorDict of groups, an asymmetric critic) through the program.
    "obs_groups": (AlgorithmConfig, "windy", dict(obs_groups={"actor": ["policy"], "critic": ["policy", "critic"]},
                                                  normalize_obs=True, clip_grad_per_network=True)),
    # The extensions: mirrored twins and the mirror loss in the program, RND's step after it.
    "symmetry": (AlgorithmConfig, "windy", dict(obs_groups={"actor": ["policy"], "critic": ["policy", "critic"]},
                                                symmetry_fn=windy_mirror, symmetry_augment=True,
                                                mirror_loss_coeff=0.5, entropy_coeff=0.01)),
    "rnd": (AlgorithmConfig, Pendulum, dict(rnd={"weight": 0.5, "predictor_hiddens": [16], "target_hiddens": [16],
                                                 "embedding_dim": 4, "normalize_state": True})),
    # Minibatches of 128 rows in micro-batches of 48, 48 and 32 (the last one steps).
    "micro_batches": (AlgorithmConfig, CartPole, dict(micro_batch_size=48)),
    "micro_batches_adaptive_lr_per_minibatch": (AlgorithmConfig, Pendulum, dict(
        micro_batch_size=48, kl_adaptive_lr=True, target_kl_div=0.002, kl_adaptive_lr_per_minibatch=True)),
    # rsl_rl's rule before each epoch's one step, on the epoch's share-weighted KL.
    "accumulated_adaptive_lr_per_minibatch": (AlgorithmConfig, Pendulum, dict(
        accumulate_grads=True, kl_adaptive_lr=True, target_kl_div=0.002, kl_adaptive_lr_per_minibatch=True)),
    "micro_batches_symmetry": (AlgorithmConfig, "windy", dict(
        obs_groups={"actor": ["policy"], "critic": ["policy", "critic"]}, symmetry_fn=windy_mirror,
        symmetry_augment=True, mirror_loss_coeff=0.5, micro_batch_size=48)),
    # The KL early stop judged inside the program: a single run's gated LR, members' gates.
    # (Small targets rather than large LRs trigger it: Adam's first step at lr 3e-3 moves
    # near-zero gradient entries by 3% of lr on rounding alone, with or without the stop.)
    "kl_early_stop": (AlgorithmConfig, CartPole, dict(target_kl_div=3e-4, num_sgd_iters=6)),
    "kl_early_stop_adamw_micro_batches": (AlgorithmConfig, Pendulum, dict(
        target_kl_div=1e-3, num_sgd_iters=6, micro_batch_size=48, optimizer_cls=torch.optim.AdamW,
        optimizer_config={"lr": 1e-3, "weight_decay": 0.01})),
    "seeds_kl_early_stop": (AlgorithmConfig, CartPole, dict(num_seeds=3, num_sgd_iters=6, target_kl_div=1e-3,
                                                            member_hparams={"target_kl_div": [1e-4, 3e-4, 1.0]})),
    "seeds": (AlgorithmConfig, CartPole, dict(num_seeds=3)),
    "seeds_hparams_per_network": (AlgorithmConfig, Pendulum, dict(
        num_seeds=3, clip_grad_per_network=True, normalize_obs=True, entropy_coeff=0.01,
        member_hparams={"lr": [1e-4, 3e-4, 1e-3], "clip_param": [0.1, 0.2, 0.3], "max_grad_norm": [0.1, 0.5, 5.0],
                        "entropy_coeff": [0.0, 0.01, 0.02], "vf_coeff": [0.5, 1.0, 2.0]})),
    "seeds_adamw_adaptive_lr": (AlgorithmConfig, Pendulum, dict(
        num_seeds=2, optimizer_cls=torch.optim.AdamW, optimizer_config={"lr": 3e-4, "weight_decay": 0.01},
        kl_adaptive_lr=True, target_kl_div=0.005)),
}


def _windy():
    from rlx.envs import RslRlVecEnv
    from rlx.examples.windy_reach import WindyReach

    return RslRlVecEnv.factory(lambda n, d: WindyReach(n, d, seed=0))


def _float64(*algos) -> None:
    """Each algorithm's model in float64, and its optimizer's moments (made at build for
    a compiled update) cast alike, in place: the update holds those very tensors."""
    for algo in algos:
        algo.policy.double()
        optimizers = [algo.optimizer]
        if getattr(algo, "rnd", None) is not None:
            algo.rnd.double()
            optimizers.append(algo.rnd.optimizer)
        for state in (s for optimizer in optimizers for s in optimizer.state.values()):
            for key, value in state.items():
                if key != "step" and value.is_floating_point():
                    value.data = value.data.double()


def _pair(name: str):
    cls, env, extra = CASES[name]
    env = _windy() if env == "windy" else env
    config = {**BASE, **extra}
    if cls is A2CConfig:
        config = {k: v for k, v in config.items() if k not in ("sgd_minibatch_size", "num_sgd_iters")}
    eager, reference = cls(**config).build(env), cls(**config).build(env)
    if not config.get("enable_amp"):
        _float64(eager, reference)
    return eager, reference


@contextmanager
def _optimizers_own_step():
    """The update with the step taken by ``optimizer.step()`` (torch's Adam kernel; for
    members SeedAdam through ``masked_step_``) rather than :func:`adam_step_`."""
    with mock.patch("rlx.members.axis.steps_functionally", lambda *args: False):
        yield


def _close(eager, other, tol: float = 1e-3) -> None:
    lr = max(eager.lr, eager.config.optimizer_kwargs["lr"])  # an adapted LR may have fallen since the steps taken
    for (name, a), b in zip(eager.policy.model.named_parameters(), other.policy.model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=tol * lr, msg=lambda m, name=name: f"{name}: {m}")
    for a, b in zip(eager.policy.model.parameters(), other.policy.model.parameters()):
        sa, sb = eager.optimizer.state[a], other.optimizer.state[b]
        if "exp_avg" not in sa:  # not Adam (SGD): the parameters are the whole state compared
            continue
        assert torch.equal(sa["step"], sb["step"])
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(sb[key], sa[key], rtol=tol, atol=tol * float(sa[key].abs().max()))
    if getattr(eager, "rnd", None) is not None:  # the predictor's own Adam, at its own LR
        rnd_lr = eager.rnd.optimizer.param_groups[0]["lr"]
        for (name, a), b in zip(eager.rnd.predictor.named_parameters(), other.rnd.predictor.parameters()):
            torch.testing.assert_close(b, a, rtol=1e-9, atol=tol * rnd_lr, msg=lambda m, name=name: f"rnd {name}: {m}")


def _close_bf16(eager, other, before: list[torch.Tensor]) -> None:
    """bf16 autocast: the two Adam kernels round bf16-made gradients apart (unit
    roundoff 2^-9). Adam's per-entry normalization lets an
    entry near zero flip, so the bound is on the whole step, per parameter: the two steps
    differ by at most 2^-6 (eight bf16 roundings) of the eager step's norm."""
    for a, b, p0 in zip(eager.policy.model.parameters(), other.policy.model.parameters(), before):
        step = (a - p0).norm()
        assert (b - a).norm() <= 2**-6 * step, ((b - a).norm().item(), step.item())


def _run(algo, reference: bool, seed: int = 7) -> dict:
    torch.manual_seed(seed)  # one global RNG: the same draws for both collects
    algo.collect()
    if not reference:
        return algo.step()
    with _optimizers_own_step():
        return algo.step()


@pytest.mark.parametrize("name", list(CASES))
def test_the_update_steps_as_the_optimizers_own_step_on_the_same_data(name: str) -> None:
    eager, reference = _pair(name)
    # Each step() from the same state (clipped objectives amplify drift). A VecEnv's
    # simulator state is not the algorithm's: after a load its collect opens with a reset,
    # so the obs-groups case compares one step.
    for _ in range(1 if CASES[name][1] == "windy" else 3):
        reference.load_state_dict(eager.state_dict())
        before = [p.detach().clone() for p in eager.policy.model.parameters()]
        stats = [_run(eager, False), _run(reference, True)]
        if name == "bf16_amp":
            _close_bf16(eager, reference, before)
            tol = 5e-2  # the statistics: bf16's 2^-9 rounding through a few ops
        else:
            tol = 1e-3
            _close(eager, reference, tol)
        for key in ("losses/total", "losses/policy", "losses/vf", "monitors/kl_div", "losses/mirror", "losses/rnd"):
            if key not in stats[0]:
                continue
            assert stats[1][key] == pytest.approx(stats[0][key], rel=tol, abs=1e-6), key
        assert stats[1]["monitors/lr"] == stats[0]["monitors/lr"]
        for key in [k for k in stats[0] if k.endswith(("monitors/optimizer_steps", "monitors/sgd_epochs"))]:
            assert stats[1][key] == stats[0][key], key  # the early stop decided alike


@pytest.mark.parametrize("name", ["kl_early_stop", "kl_early_stop_adamw_micro_batches", "seeds_kl_early_stop"])
def test_the_kl_early_stop_stops_where_the_optimizers_own_step_does(name: str) -> None:
    """The update judges each step on its minibatch's KL: the stop triggers within the
    first step() (fewer optimizer steps than epochs x minibatches, fewer epochs), on the
    same step with either optimizer step, and a closed run's parameters stop moving.
    Members stop each on its own target; the one whose target is never reached runs
    every step."""
    eager, reference = _pair(name)
    reference.load_state_dict(eager.state_dict())
    stats = [_run(eager, False), _run(reference, True)]
    cfg = eager.config
    most = cfg.num_sgd_iters * (cfg.num_envs * cfg.horizon // cfg.sgd_minibatch_size)
    prefixes = [f"member{i}/" for i in range(cfg.num_seeds)] if cfg.num_seeds > 1 else [""]
    steps = [stats[1][f"{p}monitors/optimizer_steps"] for p in prefixes]
    assert steps == [stats[0][f"{p}monitors/optimizer_steps"] for p in prefixes]
    assert min(steps) < most
    if cfg.num_seeds > 1:
        assert steps[-1] == most and len(set(steps)) > 1
    else:
        assert stats[1]["monitors/sgd_epochs"] == stats[0]["monitors/sgd_epochs"] < cfg.num_sgd_iters
    _close(eager, reference)


def test_the_updates_optimizer_state_resumes_torchs_adam_and_back() -> None:
    """A checkpoint written by rlx's step resumes under torch's Adam kernel, and the two
    then take the same steps: the state keys, step counts and moments are torch's."""
    eager, reference = _pair("cartpole")
    _run(eager, False)
    reference.load_state_dict(eager.state_dict())
    assert reference.optimizer.state_dict()["state"].keys() == eager.optimizer.state_dict()["state"].keys()
    _run(eager, False, seed=3)
    _run(reference, True, seed=3)
    _close(eager, reference)
    eager.load_state_dict(reference.state_dict())  # and back: torch's state, rlx's step
    _run(eager, False, seed=4)
    _run(reference, True, seed=4)
    _close(eager, reference)


def test_compile_compiles_the_whole_update_where_it_can_and_says_why_not() -> None:
    from rlx.core.compiling import CompiledCall

    for extra in ({}, {"target_kl_div": 0.01}, {"num_seeds": 2, "target_kl_div": 0.01}, {"accumulate_grads": True},
                  {"optimizer_config": {"lr": 1e-3, "amsgrad": True}}):
        algo = AlgorithmConfig(**BASE, **extra, compile=True).build(CartPole)
        assert isinstance(algo.update, CompiledCall) and algo.compile_fallback is None, extra
        assert algo.loss_fn == algo.losses  # traced inside the update's program
    sgd = AlgorithmConfig(**BASE, compile=True, optimizer_cls=torch.optim.SGD, optimizer_config={"lr": 0.1}).build(CartPole)
    assert "SGD" in sgd.compile_fallback and sgd.update == sgd.minibatch_update and sgd.loss_fn != sgd.losses


GROUPS = {"obs_groups": {"actor": ["policy"], "critic": ["policy", "critic"]}, "normalize_obs": True}


# Each case compiles a step's programs (about a minute of a CI core), so the features
# share cases: each is in one, and a case whose program runs a KL stop shows it fired.
# (A single run's scanned step is held here by
# test_the_scanned_updates_follow_a_reload_a_new_lr_and_new_python_values, whose first
# step is this comparison.)
COMPILED = {
    "members": (CartPole, {"num_seeds": 3, "member_hparams": {"lr": [1e-4, 3e-4, 1e-3]}}),
    # Minibatches of 128 rows in micro-batches of 48, 48 and 32, AdamW, and the KL early
    # stop judged in the program: it cuts the second epoch after its first minibatch.
    "micro_batches_kl_early_stop": (Pendulum, {**CASES["kl_early_stop_adamw_micro_batches"][2],
                                               "target_kl_div": 3e-4}),
    # rsl_rl's rule before each step: the first minibatch's KL, 0 up to rounding, must
    # raise the LR in both (kl_terms is never negative).
    "adaptive_lr_per_minibatch": (Pendulum, CASES["adaptive_lr_per_minibatch"][2]),
    # Gradients accumulated over an epoch's calls: a program for the first minibatch (no
    # gradients yet) and one for the rest (the backward adds to them), for one run (with
    # rsl_rl's LR rule) and for members, whose KL targets stop two of them after 2 and 4 of
    # the 6 epochs.
    "accumulated_adaptive_lr": (Pendulum, CASES["accumulated_adaptive_lr_per_minibatch"][2]),
    "members_accumulated_kl_early_stop": (Pendulum, {
        "num_seeds": 3, "accumulate_grads": True, "num_sgd_iters": 6, "target_kl_div": 1e-3,
        "member_hparams": {"target_kl_div": [1e-4, 3e-4, 1.0]}}),
    # Observation groups (each normalized, an asymmetric critic), mirrored twins and the
    # mirror loss in the program.
    "symmetry_obs_groups": ("windy", {**CASES["symmetry"][2], "normalize_obs": True}),
    "rnd": (Pendulum, CASES["rnd"][2]),
}
# Where the KL stop must fire: (the stat, the steps it may not reach).
STOPPED = {"micro_batches_kl_early_stop": ("monitors/optimizer_steps", 24),
           "members_accumulated_kl_early_stop": ("member0/monitors/optimizer_steps", 6)}


@pytest.mark.parametrize("name", list(COMPILED))
def test_the_compiled_program_equals_the_uncompiled_one(name: str) -> None:
    from torch._dynamo.utils import counters

    env, extra = COMPILED[name]
    config = {**BASE, **extra}
    env = _windy() if env == "windy" else env
    counters.clear()
    eager = AlgorithmConfig(**config).build(env)
    compiled = AlgorithmConfig(**config, compile=True).build(env)
    assert compiled.compiled_update is not None and compiled.update is compiled.compiled_update
    _float64(eager, compiled)
    compiled.policy.load_state_dict(eager.policy.state_dict())
    # Collect eagerly in both (compile=True also compiles the T loop, with inductor's RNG).
    compiled.rollout.act_fn, compiled.rollout.value_fn = compiled.policy.act_step, compiled.policy.value_step
    compiled.rollout.compiled_loop = None
    stats = []
    for algo in (eager, compiled):
        torch.manual_seed(11)
        algo.collect()
        stats.append(algo.step())
    _close(eager, compiled)
    if name in STOPPED:  # the stop fired, after as many steps in both
        key, steps = STOPPED[name]
        assert stats[1][key] == stats[0][key] < steps, (stats[0][key], stats[1][key])
    # Equal minibatches and nothing decided between them: every update of the step ran in
    # one scanned program (rlx.core.scanned), not refused at its capture.
    assert (compiled.scanned_updates is not None) == (name in SCANNED), (name, compiled.scan_fallback)
    if name == "rnd":
        _rnd_compiles_whole_and_leaves_later_programs_alone(compiled)


SCANNED = ("members",)


def test_the_step_runs_its_updates_as_one_scanned_program_where_it_can_and_says_why_not() -> None:
    algo = AlgorithmConfig(**BASE, compile=True).build(CartPole)
    assert algo.scanned_updates is not None and algo.scan_fallback is None
    assert AlgorithmConfig(**BASE).build(CartPole).scanned_updates is None  # eager: the loop
    why = {"KL early stop": {"target_kl_div": 0.01}, "accumulate_grads": {"accumulate_grads": True},
           "unequal": {"sgd_minibatch_size": 192}, "kl_adaptive_lr_per_minibatch": CASES["adaptive_lr_per_minibatch"][2],
           "RND": CASES["rnd"][2], "several micro-batches": {"micro_batch_size": 48}}
    for reason, extra in why.items():
        algo = AlgorithmConfig(**{**BASE, **extra}, compile=True).build(Pendulum)
        assert algo.scanned_updates is None and reason in algo.scan_fallback, (reason, algo.scan_fallback)


def test_the_scanned_updates_follow_a_reload_a_new_lr_and_new_python_values() -> None:
    """The scanned program takes the tensors it carries from their owners at each step (a
    reload replaces the optimizer's) and checks the Python values its capture baked in
    once a step (a config field, Adam's ``eps``), capturing again where one changed: it
    stays with the eager loop over four steps, in float64."""
    plain, scanned = (AlgorithmConfig(**BASE, compile=flag).build(CartPole) for flag in (False, True))
    _float64(plain, scanned)
    for algo in (plain, scanned):  # collect eagerly in both (the compiled T loop draws other numbers)
        algo.rollout.act_fn, algo.rollout.value_fn = algo.policy.act_step, algo.policy.value_step
        algo.rollout.compiled_loop = None
    scanned.load_state_dict(plain.state_dict())
    _steps_across_a_reload_and_new_values(plain, scanned)
    assert scanned.scanned_updates is not None, scanned.scan_fallback


def _steps_across_a_reload_and_new_values(plain, other) -> None:
    """Four steps of each, held together (``_close``) after every one: before the third a
    reload (new optimizer state tensors) and a new LR, before the fourth Python values
    the programs baked in (the update's, GAE's: config fields, Adam's ``eps``)."""
    for i in range(4):
        if i == 2:
            other.load_state_dict(plain.state_dict())
            for algo in (plain, other):
                algo._set_lr(1e-3)
        if i == 3:
            for algo in (plain, other):
                algo.config.clip_param, algo.config.gamma = 0.02, 0.9
                algo.optimizer.param_groups[0]["eps"] = 1e-3
        for algo in (plain, other):
            torch.manual_seed(11 + i)
            algo.collect()
            algo.step()
        _close(plain, other)


def _rnd_compiles_whole_and_leaves_later_programs_alone(algo) -> None:
    """RND's intrinsic rewards run in the step's first phase program and its predictor's
    step in the update's, with no graph break; and a program compiled after them in the
    process is not handed RND's leftovers (torch 2.13's traced ``backward()`` marked every
    leaf of the program as written, and the next frame dynamo compiled replayed those
    marks: a T loop compiled next failed on ``'CompiledTLoop' object has no attribute
    'rnd'``; the step now takes ``torch.autograd.grad``)."""
    from torch._dynamo.utils import counters

    assert not counters["graph_break"], dict(counters["graph_break"])
    assert len(algo.phase_programs) == 3 and all(p.fallback is None for p in algo.phase_programs)
    AlgorithmConfig(**BASE, compile=True).build(CartPole).collect()  # compiles a T loop next


def test_the_loss_only_compile_takes_observation_groups_too() -> None:
    """Where the whole update does not compile (SGD, whose step is torch's), the compiled
    forward pass and losses read a TensorDict of groups as the eager ones do."""
    config = {**BASE, **GROUPS, "optimizer_cls": torch.optim.SGD, "optimizer_config": {"lr": 1e-2}}
    eager, compiled = (AlgorithmConfig(**config, compile=flag).build(_windy()) for flag in (False, True))
    assert compiled.compiled_update is None and "SGD" in compiled.compile_fallback
    _float64(eager, compiled)
    # Collect eagerly in both (the compiled act function samples with inductor's RNG).
    compiled.rollout.act_fn, compiled.rollout.value_fn = compiled.policy.act_step, compiled.policy.value_step
    stats = []
    for algo in (eager, compiled):
        torch.manual_seed(11)
        algo.collect()
        stats.append(algo.step())
    _close(eager, compiled)
    assert stats[1]["monitors/kl_div"] == pytest.approx(stats[0]["monitors/kl_div"], rel=1e-3)


def test_the_warm_program_follows_new_minibatch_sizes_and_a_reload() -> None:
    """Once a minibatch layout is compiled, its calls run the compiled code directly (no
    guards on tensors): a new layout (the smaller last minibatch) must still get its own
    program, and a reload (new optimizer state tensors), a changed LR and Python values
    set between steps (config fields the update and GAE read, Adam's ``eps``: checked
    once a step) must be seen, over several steps."""
    config = {**BASE, "sgd_minibatch_size": 192}  # 512 samples: minibatches of 192, 192 and 128
    plain, compiled = (AlgorithmConfig(**config, compile=flag).build(CartPole) for flag in (False, True))
    _float64(plain, compiled)
    for algo in (plain, compiled):  # collect eagerly in both (the compiled T loop draws other numbers)
        algo.rollout.act_fn, algo.rollout.value_fn = algo.policy.act_step, algo.policy.value_step
        algo.rollout.compiled_loop = None
    compiled.load_state_dict(plain.state_dict())
    _steps_across_a_reload_and_new_values(plain, compiled)
    assert compiled.compiled_update.layouts == 2 and compiled.compiled_update.program.fallback is None


class _SharedTrunk(torch.nn.Module):
    """A model whose one forward pass gives the distribution's parameters and the value:
    the T loop writes the values as it acts."""

    def __init__(self, observation_spec, action_spec, /, *, num_params):
        super().__init__()
        self.trunk = torch.nn.Linear(observation_spec.shape[-1], 16)
        self.pi, self.v = torch.nn.Linear(16, sum(num_params)), torch.nn.Linear(16, 1)

    def forward(self, obs):
        h = torch.tanh(self.trunk(obs))
        return self.pi(h), self.v(h)


@pytest.mark.parametrize("env_name, extra", [("CartPole", {}), ("Pendulum", {}),
                                             ("MountainCarContinuous", {"model_cls": _SharedTrunk, "model_config": None})],
                         ids=["CartPole", "Pendulum", "MountainCarContinuous_shared_trunk"])
def test_the_compiled_t_loop_writes_what_the_eager_one_writes(env_name: str, extra: dict) -> None:
    """compile=True runs a graph-safe env's T loop as compiled programs of several steps,
    the same program for each group (T = 12: three calls of one 4-step program, the later
    ones writing columns 4-11; with a shared trunk, the values too: a Gaussian's
    parameters and the value from one pass). Deterministic acting and
    envs whose resets draw no random numbers in this window (CartPole's episodes end in
    it, and start upright: :class:`_UprightResets`) make the two loops comparable: the
    same buffer up to float rounding."""
    import rlx.envs

    env_cls = _UprightResets if env_name == "CartPole" else getattr(rlx.envs, env_name)
    config = dict(num_envs=16, horizon=12, device="cpu", seed=0, normalize_obs=True, **extra)
    eager = AlgorithmConfig(**config).build(env_cls)
    compiled = AlgorithmConfig(**config, compile=True).build(env_cls)
    assert compiled.rollout.compiled_loop is not None and eager.rollout.compiled_loop is None
    assert compiled.rollout.compiled_loop.steps_per_program == 4 and len(compiled.rollout.compiled_loop.starts) == 3
    assert compiled.policy.values_while_acting == ("model_cls" in extra)
    compiled.load_state_dict(eager.state_dict())
    for algo in (eager, compiled):
        torch.manual_seed(5)
        algo.collect(deterministic=True)
    if env_name == "CartPole":
        assert eager.buffer.get("terminated").any(), "episodes must end (and reset) inside the window"
    for key in ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated"):
        a, b = eager.buffer.get(key), compiled.buffer.get(key)
        if a.dtype == torch.bool:
            assert torch.equal(a, b), key
        else:
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5, msg=lambda m, key=key: f"{key}: {m}")


class _UprightResets(CartPole):
    """CartPole whose resets inside the T loop start upright, and whose first reset,
    outside it, starts far enough from upright that episodes end within a few steps: a
    compiled loop draws its random numbers with inductor's generator, so only resets
    that draw nothing compare with an eager loop's."""

    reset_bound = 0.0

    def reset(self, *, config=None):
        self.reset_bound = 0.15
        try:
            return super().reset(config=config)
        finally:
            self.reset_bound = 0.0


def test_a_recurrent_policys_compiled_t_loop_writes_what_the_eager_one_writes() -> None:
    """compile=True runs a recurrent policy's T loop as compiled programs too
    (:func:`recurrent_t_loop_compiled_equals_eager`; on CUDA: tests/test_gpu.py)."""
    recurrent_t_loop_compiled_equals_eager("cpu")


def recurrent_t_loop_compiled_equals_eager(device: str) -> None:
    """compile=True runs a recurrent policy's T loop as compiled programs too: each step
    reads its state and reset flag by index and writes the next ones (the state that
    continues the episode, and whether the next step begins one). Two collects of 12
    steps (the second starting from the state the first carried over), deterministic
    acting, episodes ending inside both. The model in float64: both loops compute each
    stored value to about 1e-15 before rounding it to the float32 buffer, so the buffers
    are equal or one float32 rounding (2^-24 relative) apart where a value sits on a
    rounding boundary, and such a flip in a stored state moves the later steps' outputs
    by about as much (the cell's gates are contractions): 2^-20 bounds a few of them."""
    from rlx import RecurrentAlgorithmConfig

    config = dict(num_envs=16, horizon=12, seq_len=4, device=device, seed=0, normalize_obs=True,
                  model_config={"hiddens": [32], "hidden_size": 16, "cell": "lstm"})
    eager = RecurrentAlgorithmConfig(**config).build(_UprightResets)
    compiled = RecurrentAlgorithmConfig(**config, compile=True).build(_UprightResets)
    loop = compiled.rollout.compiled_loop
    assert loop is not None and eager.rollout.compiled_loop is None and loop.steps_per_program == 4
    _float64(eager, compiled)
    compiled.load_state_dict(eager.state_dict())
    for collect in range(2):
        for algo in (eager, compiled):
            torch.manual_seed(5 + collect)
            algo.collect(deterministic=True)
        resets = eager.buffer.get("resets")[:, 1:]
        assert resets.any() and not resets.all(), f"collect {collect}: episodes must end inside the window"
        for key in ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated", "hidden", "resets"):
            a, b = eager.buffer.get(key), compiled.buffer.get(key)
            if a.dtype == torch.bool or not a.is_floating_point():
                assert torch.equal(a, b), key
            else:
                bound = 2**-20 * float(a.abs().max())
                torch.testing.assert_close(b, a, rtol=2**-20, atol=bound, msg=lambda m, key=key: f"{key}: {m}")


def test_the_compiled_gae_and_batch_program_equals_the_eager_one() -> None:
    """``compile=True`` runs GAE, the reward scaling and the advantage normalization as
    one program (``algo.prepare``). On the same buffer it gives the eager batch up to
    float32 reassociation: GAE's recursion ``A_t = delta_t + c_t A_{t+1}`` rounds at most
    twice a step where eager does and the program may fuse (2^-24 of ``|c A|`` each), so
    over T steps the advantages move by at most ``2T 2^-24 max|A|``; the normalization's
    mean and std, reduced in another order, add at most ``N 2^-24`` relative (N samples)."""
    config = dict(num_envs=16, horizon=12, device="cpu", seed=0, normalize_rewards=True)
    eager = AlgorithmConfig(**config).build(Pendulum)
    compiled = AlgorithmConfig(**config, compile=True).build(Pendulum)
    assert isinstance(compiled.prepare.func, WarmProgram) and not isinstance(getattr(eager.prepare, "func", None), WarmProgram)
    for _ in range(2):  # a second collect: the reward scaler has statistics to scale by
        eager.collect()
        eager.step()
    compiled.load_state_dict(eager.state_dict())
    eager.collect()
    compiled.buffer.update(eager.buffer)
    compiled.reward_scaler.load_state_dict(eager.reward_scaler.state_dict())
    want, got = eager.prepared_batch(), compiled.prepare()
    again = compiled.prepare()  # the program called directly, on the same buffer: the same batch
    for key in got:
        assert torch.equal(again[key], got[key]), key
    T, N = config["horizon"], config["num_envs"] * config["horizon"]
    for key in want:
        scale = float(want[key].abs().max())
        bound = (2 * T + N) * 2**-24 * scale if key in ("advantages", "returns") else 0.0
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=bound, msg=lambda m, key=key: f"{key}: {m}")


def test_a_recurrent_policys_compiled_update_equals_the_uncompiled_one() -> None:
    """A recurrent policy's update compiles whole too (sequences with burn-in, the LSTM
    cells unrolled over ``seq_len``, the KL early stop), and so do the phases around it
    (the sequences' batch and gathers, the statistics): from the same rollout, the eager
    run's steps to the float64 bound of :func:`_close` (on CUDA: tests/test_gpu.py)."""
    recurrent_compiled_equals_eager("cpu")


def recurrent_compiled_equals_eager(device: str) -> None:
    from rlx import RecurrentAlgorithmConfig

    config = dict(num_envs=16, horizon=8, seq_len=4, burn_in=2, device=device, seed=0, sgd_minibatch_size=32,
                  num_sgd_iters=3, normalize_obs=True, target_kl_div=0.01,
                  model_config={"hiddens": [32], "hidden_size": 16, "cell": "lstm"})
    eager = RecurrentAlgorithmConfig(**config).build(CartPole)
    compiled = RecurrentAlgorithmConfig(**config, compile=True).build(CartPole)
    assert compiled.compile_fallback is None and compiled.update is compiled.compiled_update
    assert len(compiled.phase_programs) == 3
    _float64(eager, compiled)
    compiled.policy.load_state_dict(eager.policy.state_dict())
    compiled.rollout.act_fn, compiled.rollout.value_fn = compiled.policy.act_step, compiled.policy.value_step
    compiled.rollout.compiled_loop = None  # collect eagerly in both (the compiled T loop draws other numbers)
    for i in range(2):
        stats = []
        for algo in (eager, compiled):
            torch.manual_seed(11 + i)
            algo.collect()
            stats.append(algo.step())
        assert stats[1]["monitors/optimizer_steps"] == stats[0]["monitors/optimizer_steps"]  # the stop alike
        # The rollout stays float32 (GAE, the advantages normalized over 128 samples, each
        # program summing in its own order: n · 2^-24 ≈ 7.6e-6 of a sum), so the statistics
        # agree to float32's rounding of those sums, not float64's.
        for key in ("losses/total", "monitors/kl_div"):
            assert stats[1][key] == pytest.approx(stats[0][key], rel=1e-4, abs=1e-9), key
    _close(eager, compiled)


@pytest.mark.parametrize("kind", ["a2c", "recurrent"])
def test_a2c_and_a_recurrent_policy_scan_their_updates_as_eager_runs_them(kind: str) -> None:
    """A2C's one whole-rollout update (a scan of one) and a recurrent policy's updates
    over sequences run scanned with ``compile`` and stay with eager in float64 (the bound
    of the module docstring) over two steps."""
    from rlx import RecurrentAlgorithmConfig

    if kind == "a2c":
        cls, config = A2CConfig, dict(num_envs=32, horizon=16, device="cpu", seed=0, model_config={"hiddens": [32, 32]})
    else:
        cls, config = RecurrentAlgorithmConfig, dict(
            num_envs=16, horizon=8, seq_len=4, burn_in=2, device="cpu", seed=0, sgd_minibatch_size=32, num_sgd_iters=3,
            normalize_obs=True, model_config={"hiddens": [32], "hidden_size": 16, "cell": "lstm"})
    eager, scanned = cls(**config).build(CartPole), cls(**config, compile=True).build(CartPole)
    _float64(eager, scanned)
    scanned.policy.load_state_dict(eager.policy.state_dict())
    scanned.rollout.act_fn, scanned.rollout.value_fn = scanned.policy.act_step, scanned.policy.value_step
    scanned.rollout.compiled_loop = None  # collect eagerly in both (the compiled T loop draws other numbers)
    for i in range(2):
        for algo in (eager, scanned):
            torch.manual_seed(11 + i)
            algo.collect()
            algo.step()
        _close(eager, scanned)
    assert scanned.scanned_updates is not None, scanned.scan_fallback
