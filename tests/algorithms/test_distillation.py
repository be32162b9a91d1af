"""Teacher-student distillation (rsl_rl's Distillation): the student acts, regresses on the
teacher's mean actions, and learns what a privileged teacher knows; PPO fine-tunes it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlx import AlgorithmConfig, DistillationConfig
from rlx.config import ConfigError
from rlx.config.run import TrainerConfig
from rlx.envs import Pendulum, RslRlVecEnv
from rlx.examples.windy_reach import WindyReach, episode_return, pd_controller
from rlx.run.trainer import Trainer

PPO = dict(num_envs=256, horizon=24, num_sgd_iters=5, sgd_minibatch_size=256 * 24 // 4, vf_clip_param=0.2, vf_coeff=1.0,
           entropy_coeff=0.005, gamma=0.99, max_grad_norm=1.0, optimizer_config={"lr": 1e-3}, kl_adaptive_lr=True,
           target_kl_div=0.01, model_config={"hiddens": [64, 64], "activation_fn": "elu"}, normalize_rewards=False,
           device="cpu", seed=0)
STUDENT = dict(num_envs=256, horizon=24, num_sgd_iters=2, sgd_minibatch_size=1536, device="cpu", seed=1,
               obs_groups={"actor": ["policy"], "critic": ["policy", "critic"]},
               model_config={"hiddens": [64, 64], "activation_fn": "elu", "log_std_init": -2.3})


def _windy(seed: int):
    return RslRlVecEnv.factory(lambda n, d: WindyReach(n, d, seed=seed))


def _normalized(policy) -> float:
    """0: random actions, 1: the PD controller."""
    random = episode_return(lambda obs: torch.randn(obs.batch_size[0], 2), 512, "cpu")
    pd = episode_return(pd_controller, 512, "cpu")
    return (episode_return(lambda o: policy.act(o, deterministic=True).env_actions, 512, "cpu") - random) / (pd - random)


def _teacher(run_dir: Path, iterations: int, **kwargs) -> Trainer:
    """A PPO teacher whose actor sees the privileged group too (wind and mass)."""
    algo = AlgorithmConfig(**{**PPO, **kwargs}, obs_groups={"critic": ["policy", "critic"]}).build(_windy(0))
    trainer = Trainer(algo, TrainerConfig(max_iterations=iterations, progress=False, tensorboard=False, checkpoint_every=0),
                      run_dir=run_dir)
    trainer.run()
    return trainer


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("teacher")
    _teacher(run_dir, 30)
    return run_dir


def test_a_student_that_sees_less_learns_the_privileged_teachers_policy(teacher_dir: Path) -> None:
    """Measured: teacher 1.03 after 30 PPO iterations; the student 1.00 after 10 distillation
    iterations, where PPO on the student's observations reaches 0.38 in as many."""
    student = DistillationConfig(teacher=str(teacher_dir), **STUDENT).build(_windy(1))
    losses = []
    for _ in range(10):
        student.collect()
        losses.append(student.step()["losses/behavior"])
    scratch = AlgorithmConfig(**{**PPO, "seed": 1}, obs_groups=STUDENT["obs_groups"]).build(_windy(1))
    for _ in range(10):
        scratch.collect()
        scratch.step()
    distilled, teacher_score, from_scratch = _normalized(student.policy), _normalized(student.teacher), _normalized(scratch.policy)
    print(f"teacher {teacher_score:.3f}, student {distilled:.3f}, PPO on the student's observations {from_scratch:.3f}")
    assert losses[-1] < 0.2 * losses[0], losses
    assert distilled > 0.9 * teacher_score and distilled > from_scratch + 0.3, (distilled, teacher_score, from_scratch)
    assert student.policy.actor_obs_keys == ["policy"]  # it deploys without the privileged group


def test_the_teacher_stays_frozen_and_the_loss_is_the_mean_squared_action_gap(teacher_dir: Path) -> None:
    student = DistillationConfig(teacher=str(teacher_dir), **{**STUDENT, "num_envs": 32, "sgd_minibatch_size": None,
                                                              "num_sgd_iters": 1}
                                 ).build(_windy(1))
    before = [p.clone() for p in student.teacher.parameters()]
    student.collect()
    obs = student.buffer.get("obs")[:, :24].reshape(-1)
    with torch.no_grad():
        gap = (student.policy._actor_distribution(obs).mode() - student.teacher._actor_distribution(obs).mode()).square().mean()
    out = student.step()  # one epoch of one minibatch: its loss is the gap before the step
    assert out["losses/behavior"] == pytest.approx(gap.item(), rel=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(before, student.teacher.parameters()))


def test_distillation_resumes_exactly_and_ppo_fine_tunes_the_student(tmp_path: Path, resumed_run) -> None:
    small = dict(num_envs=16, horizon=16, device="cpu", model_config={"hiddens": [16, 16]})
    teacher = AlgorithmConfig(**small, seed=0, sgd_minibatch_size=64).build(Pendulum)
    Trainer(teacher, TrainerConfig(max_iterations=2, progress=False, tensorboard=False), run_dir=tmp_path / "teacher").run()

    def run(resume_at: int | None):  # Pendulum restores its state: a resumed run continues exactly
        make = lambda: DistillationConfig(teacher=str(tmp_path / "teacher"), **small, seed=1,  # noqa: E731
                                          sgd_minibatch_size=64, num_sgd_iters=2).build(Pendulum)
        return resumed_run(make, resume_at)

    whole, resumed = run(None), run(2)
    for a, b in zip(whole.policy.parameters(), resumed.policy.parameters()):
        assert torch.equal(a, b)
    trainer = Trainer(whole, TrainerConfig(max_iterations=1, progress=False, tensorboard=False), run_dir=tmp_path / "student")
    trainer.save_checkpoint()
    from rlx.run.export import export_torchscript

    scripted = torch.jit.load(str(export_torchscript(tmp_path / "student", tmp_path / "student.pt")))
    obs = torch.randn(4, 3)
    torch.testing.assert_close(scripted(obs), whole.policy.act(obs, deterministic=True).env_actions)
    tuned = AlgorithmConfig(**small, seed=2, init_policy=str(tmp_path / "student")).build(Pendulum)
    for a, b in zip(tuned.policy.state_dict().values(), whole.policy.state_dict().values()):
        assert torch.equal(a, b)
    tuned.collect()
    tuned.step()  # PPO trains on from the distilled student


def test_several_students_of_one_teacher(teacher_dir: Path) -> None:
    students = DistillationConfig(teacher=str(teacher_dir), **{**STUDENT, "num_envs": 64, "num_seeds": 2,
                                                               "sgd_minibatch_size": 512}).build(_windy(1))
    first = None
    for _ in range(8):  # measured: 5.1 -> 0.43 (and one student alone 5.7 -> 0.41)
        students.collect()
        out = students.step()
        first = first or out
    for i in range(2):
        assert out[f"member{i}/losses/behavior"] < 0.3 * first[f"member{i}/losses/behavior"]


def test_bad_teachers_are_refused_by_name(teacher_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="DistillationConfig.teacher: must be the path"):
        DistillationConfig(num_envs=8)
    with pytest.raises(ConfigError, match="DistillationConfig.teacher: cannot read a checkpoint"):
        DistillationConfig(teacher=str(tmp_path / "nothing"), num_envs=8, device="cpu").build(_windy(0))
    with pytest.raises(ConfigError, match="does not fit this env"):
        DistillationConfig(teacher=str(teacher_dir), num_envs=8, device="cpu").build(Pendulum)
    two = tmp_path / "two"
    _teacher(two, 1, num_envs=16, sgd_minibatch_size=96, num_seeds=2)
    with pytest.raises(ConfigError, match="the teacher run trained 2 members; choose one with teacher_member"):
        DistillationConfig(teacher=str(two), num_envs=8, device="cpu").build(_windy(0))
    DistillationConfig(teacher=str(two), teacher_member=1, num_envs=8, device="cpu").build(_windy(0))
    with pytest.raises(ValueError, match="AlgorithmConfig.init_policy: cannot read a policy"):
        AlgorithmConfig(num_envs=8, device="cpu", init_policy=str(tmp_path / "nothing")).build(Pendulum)


RSL_RL_TEACHER = {
    "num_steps_per_env": 24, "save_interval": 10**9, "obs_groups": {"actor": ["policy", "critic"], "critic": ["policy", "critic"]},
    "algorithm": {"class_name": "PPO", "num_learning_epochs": 5, "num_mini_batches": 4, "clip_param": 0.2, "gamma": 0.99,
                  "lam": 0.95, "value_loss_coef": 1.0, "entropy_coef": 0.005, "learning_rate": 1e-3, "max_grad_norm": 1.0,
                  "use_clipped_value_loss": True, "schedule": "adaptive", "desired_kl": 0.01},
    "actor": {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": False,
              "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
    "critic": {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": False},
}


def test_a_teacher_trained_by_rsl_rl_teaches_an_rlx_student(tmp_path: Path) -> None:
    """rsl_rl 5.x's own PPO trains the privileged teacher and saves it; rlx distils it."""
    import contextlib
    import io

    pytest.importorskip("rsl_rl")
    from rsl_rl.runners import OnPolicyRunner as RslRlRunner

    torch.manual_seed(0)
    with contextlib.redirect_stdout(io.StringIO()):
        runner = RslRlRunner(WindyReach(256, "cpu", seed=0), dict(RSL_RL_TEACHER), log_dir=None, device="cpu")
        runner.learn(30)
    runner.save(str(tmp_path / "model_30.pt"))
    policy = runner.get_inference_policy("cpu")
    student = DistillationConfig(teacher=str(tmp_path / "model_30.pt"), teacher_rsl_rl_cfg=RSL_RL_TEACHER, **STUDENT
                                 ).build(_windy(1))
    obs = student.env.reset()
    with torch.no_grad():
        torch.testing.assert_close(student.teacher_actions(obs), policy(obs))  # rsl_rl's own actions
    for _ in range(10):
        student.collect()
        student.step()
    random = episode_return(lambda o: torch.randn(o.batch_size[0], 2), 512, "cpu")
    pd = episode_return(pd_controller, 512, "cpu")
    teacher_score = (episode_return(lambda o: policy(o), 512, "cpu") - random) / (pd - random)
    distilled = _normalized(student.policy)
    print(f"rsl_rl teacher {teacher_score:.3f}, rlx student {distilled:.3f}")
    assert distilled > 0.9 * teacher_score, (distilled, teacher_score)
    with pytest.raises(ConfigError, match="does not fit teacher_rsl_rl_cfg"):
        bad = {**RSL_RL_TEACHER, "actor": {**RSL_RL_TEACHER["actor"], "hidden_dims": [32]}}
        DistillationConfig(teacher=str(tmp_path / "model_30.pt"), teacher_rsl_rl_cfg=bad, **STUDENT).build(_windy(1))


def test_a_student_of_discrete_actions_matches_the_teachers_distribution(tmp_path: Path) -> None:
    """Discrete actions: the student regresses KL(teacher || student), a mode having no
    gradient; on CartPole the student plays as the teacher does after a few iterations."""
    from rlx.collect.evaluation import evaluate_policy
    from rlx.config.run import load_run_config
    from rlx.envs import CartPole

    run = load_run_config(Path(__file__).resolve().parents[2] / "configs" / "cartpole_ppo.yaml", [])
    teacher = run.config.build(CartPole)
    Trainer(teacher, TrainerConfig(max_iterations=25, progress=False, tensorboard=False), run_dir=tmp_path / "t").run()
    student = DistillationConfig(teacher=str(tmp_path / "t"), num_envs=32, horizon=64, num_sgd_iters=4,
                                 sgd_minibatch_size=512, device="cpu", seed=3,
                                 model_config={"hiddens": [64, 64], "activation_fn": "tanh"}).build(CartPole)
    kls = []
    for _ in range(6):
        student.collect()
        kls.append(student.step()["losses/behavior"])
    length = {name: evaluate_policy(p, CartPole(16), episodes=16, max_steps=10_000)["eval/length_mean"]
              for name, p in (("teacher", teacher.policy), ("student", student.policy))}
    print(f"KL {kls[0]:.3f} -> {kls[-1]:.3f}; episode length {length}")
    assert kls[-1] < 0.4 * kls[0], kls  # measured: 0.457 -> 0.118, both 500-step episodes
    assert length["student"] >= 0.8 * length["teacher"], length


# -- one step function: eager, compiled, captured ---------------------------------------


def _small_teacher(run_dir: Path, env_cls) -> Path:
    if not run_dir.exists():
        teacher = AlgorithmConfig(num_envs=16, horizon=16, device="cpu", seed=0, sgd_minibatch_size=64,
                                  model_config={"hiddens": [16, 16]}).build(env_cls)
        Trainer(teacher, TrainerConfig(max_iterations=2, progress=False, tensorboard=False), run_dir=run_dir).run()
    return run_dir


@pytest.mark.parametrize("env_name, extra", [
    ("Pendulum", {"max_grad_norm": 0.5, "normalize_obs": True}),  # the mean-action gap, unequal minibatches
    ("CartPole", {"num_seeds": 2}),  # discrete: KL(teacher || student); two students
], ids=["continuous", "discrete_members"])
def test_a_compiled_students_step_equals_the_eager_one(tmp_path_factory, env_name: str, extra: dict) -> None:
    """``compile=True`` compiles each minibatch update whole (``Distillation.minibatch_update``,
    the function eager runs; a program per minibatch size: 96, 96 and 64 rows). In float64,
    from one state and rollout, three steps move the students as the eager steps do, to
    the float64 bound of test_one_update's ``_close``. The loss itself is float32 (the
    targets and the error are, as the rollout is): a mean of at most 96 x 2 terms each
    program may sum in its own order, so the reported losses agree to 192 x 2^-24 (the
    discrete teacher's float32 logits, computed inside the program, move each row's KL
    by a few 2^-24 of them times ``|p - q|``, well inside that)."""
    import rlx.envs
    from tests.algorithms.test_one_update import _close, _float64

    env_cls = getattr(rlx.envs, env_name)
    teacher = _small_teacher(tmp_path_factory.getbasetemp() / f"teacher_{env_name}", env_cls)
    config = dict(teacher=str(teacher), num_envs=16, horizon=16, device="cpu", seed=1, num_sgd_iters=2,
                  sgd_minibatch_size=96, model_config={"hiddens": [16, 16]}, **extra)
    eager = DistillationConfig(**config).build(env_cls)
    compiled = DistillationConfig(**config, compile=True).build(env_cls)
    assert compiled.compile_fallback is None and compiled.update is compiled.compiled_update
    assert eager.compiled_update is None and eager.update == eager.minibatch_update
    _float64(eager, compiled)
    compiled.load_state_dict(eager.state_dict())
    compiled.rollout.compiled_loop, compiled.rollout.act_fn = None, compiled.policy.act_step  # collect alike
    for i in range(3):
        out = []
        for algo in (eager, compiled):
            torch.manual_seed(3 + i)
            algo.collect()
            out.append(algo.step())
        assert out[1]["losses/behavior"] == pytest.approx(out[0]["losses/behavior"], rel=192 * 2**-24)
    _close(eager, compiled)
    assert compiled.compiled_update.layouts == 2


@pytest.mark.parametrize("extra", [{}, {"num_seeds": 2, "max_grad_norm": 0.5}], ids=["one", "members"])
def test_the_distillation_step_reads_nothing_back_and_the_same_tensors_every_step(tmp_path_factory, extra: dict) -> None:
    """``cudagraphs`` captures the student's whole step (``Distillation.update_phase``: the
    teacher's targets, every epoch's order, the minibatch updates, the statistics). No
    GPU is in reach here, so this checks on a CPU what a capture needs of it: no host
    read or upload inside it, and two steps reading the same storages from outside it."""
    from tests.algorithms.test_update_phase import steps_under_capture_check

    teacher = _small_teacher(tmp_path_factory.getbasetemp() / "teacher_Pendulum", Pendulum)
    algo = DistillationConfig(teacher=str(teacher), num_envs=16, horizon=16, device="cpu", seed=1, num_sgd_iters=2,
                              sgd_minibatch_size=96, model_config={"hiddens": [16, 16]}, **extra).build(Pendulum)
    assert algo.run_update_phase == algo.update_phase  # no CUDA: no graph
    reads, _, out = steps_under_capture_check(algo)
    assert reads[1] == reads[2], (len(reads[1] ^ reads[2]), len(reads[1]))
    assert out["losses/behavior"] > 0
