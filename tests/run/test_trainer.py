"""Trainer: the loop, exact resume, metrics, TensorBoard and progress."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from rlx import AlgorithmConfig, NPGConfig, Trainer, TrainerConfig
from rlx.run.checkpoint import latest_checkpoint
from rlx.envs import CartPole

SMALL = dict(num_envs=8, horizon=16, device="cpu", seed=0, model_config={"hiddens": [16]}, gamma=0.99)


def _no_timing(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith("profiling/") and k != "wall_s"}


def _training_only(metrics: dict) -> dict:
    # The first half of a split run also evaluates when it stops (iteration 3); the
    # evaluation forks the RNG, so training is unaffected, but that line has extra keys.
    return {k: v for k, v in _no_timing(metrics).items() if not k.startswith("eval/")}


def _lines(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("config_cls", "extra"),
    [
        (AlgorithmConfig, {"normalize_obs": True}),
        # State that lives outside the optimizer and the modules: the entropy schedule's
        # value, the KL-adapted LR (host mirror), and an LR schedule.
        (AlgorithmConfig, {"entropy_coeff_schedule": [(0, 0.05), (256, 0.02), (512, 0.0)],
                           "kl_adaptive_lr": True, "target_kl_div": 1e-4}),
        (AlgorithmConfig, {"lr_schedule": [(0, 1e-3), (640, 1e-5)], "lr_schedule_kind": "interp"}),
        (NPGConfig, {"line_search": True}),
    ],
    ids=["ppo", "ppo-entropy-schedule-kl-adaptive-lr", "ppo-lr-schedule", "npg"],
)
def test_resumed_run_equals_the_uninterrupted_run(tmp_path, config_cls, extra) -> None:
    full = Trainer(
        config_cls(**SMALL, **extra).build(CartPole),
        TrainerConfig(max_iterations=6, checkpoint_every=3, eval_every=2, eval_num_envs=4, eval_episodes=4, progress=False),
        run_dir=tmp_path / "full",
    )
    full.run()
    params_full = [p.detach().clone() for p in full.algorithm.policy.parameters()]

    first = Trainer(
        config_cls(**SMALL, **extra).build(CartPole),
        TrainerConfig(max_iterations=3, checkpoint_every=3, eval_every=2, eval_num_envs=4, eval_episodes=4, progress=False),
        run_dir=tmp_path / "split",
    )
    first.run()
    del first  # the process that trained the first half is gone
    second = Trainer(
        config_cls(**SMALL, **extra).build(CartPole),
        TrainerConfig(max_iterations=6, checkpoint_every=3, eval_every=2, eval_num_envs=4, eval_episodes=4, progress=False),
        run_dir=tmp_path / "split",
    )
    second.resume()
    assert second.iteration == 3
    second.run()
    split, whole = _lines(tmp_path / "split"), _lines(tmp_path / "full")
    assert [_training_only(m) for m in split] == [_training_only(m) for m in whole]
    assert [_no_timing(m) for i, m in enumerate(split) if i != 2] == [_no_timing(m) for i, m in enumerate(whole) if i != 2]
    assert "eval/return_mean" in whole[1] and "eval/return_mean" in whole[3]
    for a, b in zip(second.algorithm.policy.parameters(), params_full):
        assert torch.equal(a, b)


def test_metrics_lines_hold_every_stat_and_the_counters(tmp_path) -> None:
    trainer = Trainer(AlgorithmConfig(**SMALL).build(CartPole), TrainerConfig(max_iterations=3, progress=False), run_dir=tmp_path)
    trainer.run()
    lines = _lines(tmp_path)
    assert [m["iteration"] for m in lines] == [1, 2, 3]
    assert [m["env_steps"] for m in lines] == [128, 256, 384]
    assert all(m["wall_s"] > 0 for m in lines)
    for key in ("losses/policy", "monitors/kl_div", "rewards/mean", "episodes/count", "profiling/step_ms"):
        assert key in lines[0]
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["env"] == "rlx.envs.cartpole:CartPole" and saved["config"]["num_envs"] == 8


def test_stop_conditions_compose_and_report_their_reason(tmp_path) -> None:
    trainer = Trainer(
        AlgorithmConfig(**SMALL).build(CartPole),
        TrainerConfig(max_env_steps=10_000, stop_below={"env/steps": 200}, progress=False),
    )
    trainer.run()
    assert trainer.iteration == 1 and trainer.stop_reason == "env/steps = 128 <= 200"
    trainer = Trainer(AlgorithmConfig(**SMALL).build(CartPole), TrainerConfig(max_env_steps=300, progress=False))
    trainer.run()
    assert trainer.algorithm.env_steps == 384 and "300 env steps" in trainer.stop_reason


def test_run_without_a_stop_condition_is_refused() -> None:
    with pytest.raises(ValueError, match="no stop condition"):
        Trainer(AlgorithmConfig(**SMALL).build(CartPole), TrainerConfig()).run()


def test_tensorboard_events_are_written_when_available(tmp_path) -> None:
    pytest.importorskip("tensorboard")
    trainer = Trainer(AlgorithmConfig(**SMALL).build(CartPole), TrainerConfig(max_iterations=2, progress=False), run_dir=tmp_path)
    trainer.run()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    quiet = Trainer(
        AlgorithmConfig(**SMALL).build(CartPole), TrainerConfig(max_iterations=1, progress=False, tensorboard=False),
        run_dir=tmp_path / "quiet",
    )
    quiet.run()
    assert not (tmp_path / "quiet" / "tensorboard").exists()


def _trainer(tmp_path, iterations: int, **config) -> Trainer:
    return Trainer(
        AlgorithmConfig(**{**SMALL, **config}).build(CartPole),
        TrainerConfig(max_iterations=iterations, checkpoint_every=1, progress=False),
        run_dir=tmp_path,
    )


def test_resuming_a_finished_run_trains_no_further_iteration(tmp_path) -> None:
    done = _trainer(tmp_path, 3)
    last = done.run()
    again = _trainer(tmp_path, 3)
    again.resume()
    assert again.run() == last  # the last metrics come back from the checkpoint
    assert again.iteration == 3 and again.stop_reason == "reached 3 iterations"
    assert len(_lines(tmp_path)) == 3 and latest_checkpoint(tmp_path).name == "ckpt_00000003.pt"
    more = _trainer(tmp_path, 4)  # a larger budget continues
    more.resume()
    more.run()
    assert more.iteration == 4 and [m["iteration"] for m in _lines(tmp_path)] == [1, 2, 3, 4]


def test_resume_skips_an_unreadable_newest_checkpoint_with_a_warning(tmp_path) -> None:
    _trainer(tmp_path, 3).run()
    newest = latest_checkpoint(tmp_path)
    newest.write_bytes(newest.read_bytes()[:100])  # truncated, as by a bad copy
    (tmp_path / "checkpoints" / ".ckpt_00000004.pt.tmp-99999").write_bytes(b"left by a killed writer")
    trainer = _trainer(tmp_path, 3)
    with pytest.warns(UserWarning, match=r"ckpt_00000003\.pt is unreadable.*trying the checkpoint before it"):
        assert trainer.resume().name == "ckpt_00000002.pt"
    assert trainer.iteration == 2 and [m["iteration"] for m in _lines(tmp_path)] == [1, 2]
    assert not list((tmp_path / "checkpoints").glob(".ckpt_*"))
    with pytest.raises(ValueError, match=r"checkpoint .*ckpt_00000003\.pt is unreadable"):
        _trainer(tmp_path, 3).resume(newest)
    for path in (tmp_path / "checkpoints").glob("ckpt_*.pt"):
        path.write_bytes(b"")
    with pytest.raises(ValueError, match="no readable checkpoint in"), pytest.warns(UserWarning):
        _trainer(tmp_path, 3).resume()


def test_resume_refuses_a_changed_shape_and_warns_about_other_changes(tmp_path) -> None:
    _trainer(tmp_path, 2).run()
    with pytest.raises(ValueError, match=r"config changed \(config\.num_envs: saved 8, now 4\)"):
        _trainer(tmp_path, 3, num_envs=4).resume()
    with pytest.raises(ValueError, match=r"config\.model_config: saved \{'hiddens': \[16\]\}, now \{'hiddens': \[32\]\}"):
        _trainer(tmp_path, 3, model_config={"hiddens": [32]}).resume()
    trainer = _trainer(tmp_path, 3, gamma=0.95, seed=7)  # a seed seeds fresh runs only: not listed
    with pytest.warns(UserWarning, match=r"changed settings \(config\.gamma: 0\.99 -> 0\.95\)"):
        trainer.resume()
    trainer.run()
    assert trainer.iteration == 3


def test_tensorboard_keeps_the_scalars_logged_before_a_resume(tmp_path) -> None:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    _trainer(tmp_path, 2).run()
    trainer = _trainer(tmp_path, 4)
    trainer.resume()
    trainer.run()
    events = event_accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("returns/mean")] == [128, 256, 384, 512]


def test_progress_counts_toward_max_iterations_too(capsys) -> None:
    trainer = Trainer(AlgorithmConfig(**SMALL).build(CartPole), TrainerConfig(max_iterations=2, progress=True, log_every=1))
    trainer.run()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("iter")]
    assert " 50% of budget, ETA" in lines[0] and "100% of budget, ETA 0 s" in lines[-1]


def _progress_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("iter")]


def test_progress_keeps_the_last_episodes_instead_of_nan_and_bounds_the_time_left_under_a_goal(capsys) -> None:
    # Pendulum episodes last 200 steps: the first iterations of 16 steps end none.
    from rlx.envs import Pendulum

    config = TrainerConfig(max_iterations=16, stop_at={"episodes/return_mean": 1e9}, progress=True, log_every=1)
    Trainer(AlgorithmConfig(**{**SMALL, "num_envs": 4}).build(Pendulum), config).run()
    lines = _progress_lines(capsys)
    assert "nan" not in " ".join(lines)
    assert "return        - | length       -" in lines[0]  # no episode has ended yet
    ended = next(i for i, line in enumerate(lines) if "return        -" not in line)
    assert all("return        -" not in line for line in lines[ended:])  # once one ended, its value stays
    # A goal may end the run before its budget: the time left is an upper bound, not an ETA.
    assert "% of budget, <= " in lines[0] and "ETA" not in " ".join(lines)


def test_progress_after_a_resume_measures_this_process_only(tmp_path, capsys) -> None:
    config = TrainerConfig(max_iterations=2, progress=True, log_every=1, tensorboard=False)
    first = Trainer(AlgorithmConfig(**SMALL).build(CartPole), config, run_dir=tmp_path)
    first.run()
    capsys.readouterr()
    resumed = Trainer(AlgorithmConfig(**SMALL).build(CartPole), TrainerConfig(max_iterations=4, progress=True,
                                                                             log_every=1, tensorboard=False), run_dir=tmp_path)
    resumed.resume()
    resumed.wall_s += 1000.0  # as if the first run had been slow: its time must not count
    resumed.run()
    lines = _progress_lines(capsys)
    rate = float(lines[-1].split("|")[2].split()[0].replace(",", ""))
    assert rate > 10 * resumed.algorithm.env_steps / resumed.wall_s  # not all steps over all time, 1000 s included
    assert " 75% of budget, ETA " in lines[0] and float(lines[0].split("ETA")[1].split()[0]) < 100
