"""``rlx train CONFIG --seeds S`` end to end: per-seed stop, metrics, resume, eval, export, plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlx import AlgorithmConfig
from rlx.run.checkpoint import latest_checkpoint
from rlx.run.cli import main
from rlx.envs import CartPole
from rlx.run.export import load_policy, policy_from_checkpoint
from rlx.config.run import TrainerConfig
from rlx.run.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = str(ROOT / "configs" / "cartpole_ppo.yaml")


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_eight_seeds_of_the_shipped_cartpole_config_all_solve(tmp_path, capsys) -> None:
    """Every seed reaches the config's stop_at (mean episode length 475) within its
    300k-step budget; a seed that gets there stops updating, and the run stops when the
    last one does. Its agents evaluate, export and plot one by one."""
    run_dir = tmp_path / "run"
    assert main(["train", CARTPOLE, "--seeds", "8", "--run-dir", str(run_dir), "--threads", "1"]) == 0
    assert "stopped: every seed reached episodes/length_mean >= 475" in capsys.readouterr().out
    rows = _rows(run_dir)
    assert rows[-1]["env_steps"] < 300_000
    for i in range(8):
        lengths = [r[f"member{i}/episodes/length_mean"] for r in rows if r.get(f"member{i}/episodes/length_mean") is not None]
        assert max(lengths) >= 475, i
    # Seeds that got there first stopped updating while the others went on (the last
    # row's step ran before its seeds were judged done).
    assert rows[-1]["members/active"] < 8 or min(r["members/active"] for r in rows) < 8
    assert any(r["members/active"] < 8 for r in rows[:-1]) or len(rows) == 1
    state = torch.load(latest_checkpoint(run_dir), weights_only=True)
    assert state["algorithm"]["seeds"]["done"].all()

    assert main(["eval", str(run_dir), "--seed", "5", "--episodes", "4", "--num-envs", "4"]) == 0
    out = capsys.readouterr().out
    assert float(out.split("eval/return_mean:")[1].split()[0]) >= 400  # seed 5's agent on its own
    assert main(["eval", str(run_dir)]) == 2  # a multi-seed run needs --seed: a usage error
    assert "this run trained 8 members; pick one with --member i" in capsys.readouterr().err
    assert main(["export", str(run_dir), "--seed", "1", "--out", str(tmp_path / "p1.pt")]) == 0
    scripted = torch.jit.load(str(tmp_path / "p1.pt"))
    one = load_policy(run_dir, seed=1)
    obs = torch.randn(5, 4)
    assert torch.equal(scripted(obs), one(obs))

    pytest.importorskip("matplotlib")
    assert main(["plot", str(run_dir), "--metric", "episodes/length_mean"]) == 0
    out = capsys.readouterr().out
    assert "8 seeds, episodes/length_mean" in out and "reached by 8 of 8 seeds" in out
    assert (run_dir / "seeds.png").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("line_search", [False, True], ids=["npg", "trpo"])
def test_four_npg_seeds_of_the_shipped_cartpole_config_all_solve(tmp_path, capsys, line_search: bool) -> None:
    """NPG (and TRPO) with 4 seeds: one natural step per seed per collect; every seed
    reaches the stop_at within the config's budget, and one exports on its own."""
    run_dir = tmp_path / "run"
    args = ["train", str(ROOT / "configs" / "cartpole_npg.yaml"), "--seeds", "4", "--run-dir", str(run_dir),
            "--threads", "1", "--set", f"config.line_search={str(line_search).lower()}"]
    assert main(args) == 0
    assert "stopped: every seed reached episodes/length_mean >= 475" in capsys.readouterr().out
    rows = _rows(run_dir)
    assert rows[-1]["env_steps"] < 300_000
    assert all(f"member{i}/npg/step_size" in rows[0] for i in range(4))
    assert main(["eval", str(run_dir), "--seed", "2", "--episodes", "4", "--num-envs", "4"]) == 0
    # The seed comes back as a trained agent (a random policy returns about 22). Where the
    # run stops (its stochastic policy at a mean length of 475), the deterministic one's
    # return depends on the rounding that shaped the run: 369.75 under MKL_CBWR=COMPATIBLE.
    assert float(capsys.readouterr().out.split("eval/return_mean:")[1].split()[0]) >= 200


@pytest.mark.slow
def test_two_recurrent_seeds_solve_cartpole_without_velocities_and_export_one(tmp_path, capsys) -> None:
    """Recurrent PPO with 2 seeds (LSTM): both reach the config's stop_at, and seed 1
    comes back as a single recurrent policy that acts from its own state."""
    run_dir = tmp_path / "run"
    args = ["train", str(ROOT / "configs" / "cartpole_no_velocity_recurrent_ppo.yaml"), "--seeds", "2",
            "--run-dir", str(run_dir), "--threads", "1"]
    assert main(args) == 0
    assert "stopped: every seed reached episodes/length_mean >= 400" in capsys.readouterr().out
    assert _rows(run_dir)[-1]["env_steps"] < 1_000_000
    assert main(["eval", str(run_dir), "--seed", "1", "--episodes", "4", "--num-envs", "4"]) == 0
    assert float(capsys.readouterr().out.split("eval/return_mean:")[1].split()[0]) >= 300


def test_seed_i_of_a_checkpoint_is_seed_i_of_the_stack(tmp_path) -> None:
    algo = AlgorithmConfig(num_envs=8, horizon=8, num_seeds=3, device="cpu", seed=0, normalize_obs=True,
                           model_config={"hiddens": [16]}).build(CartPole)
    trainer = Trainer(algo, TrainerConfig(max_iterations=2), run_dir=tmp_path / "run")
    trainer.run()
    obs = torch.randn(3 * 4, 4) * 2  # 4 rows per seed
    stacked = algo.policy.model(algo.policy.normalize(obs))[0]
    for i in range(3):  # the same agent, its own normalizer statistics included
        policy, _ = policy_from_checkpoint(tmp_path / "run", seed=i)
        rows = obs[4 * i : 4 * (i + 1)]
        torch.testing.assert_close(policy.model(policy.normalize(rows))[0], stacked[4 * i : 4 * (i + 1)])
    with pytest.raises(ValueError, match=r"seed 3 is not in \[0, 3\)"):
        policy_from_checkpoint(tmp_path / "run", seed=3)


def test_done_seeds_stay_done_across_a_resume(tmp_path) -> None:
    def build():
        return AlgorithmConfig(num_envs=8, horizon=8, num_seeds=2, device="cpu", seed=0).build(CartPole)

    algo = build()
    algo.members.mark_done([1])
    algo.collect()
    frozen = [p.detach()[1].clone() for p in algo.policy.model.parameters()]
    stats = algo.step()
    assert stats["member1/active"] == 0.0 and stats["member0/active"] == 1.0
    for p, f in zip(algo.policy.model.parameters(), frozen):
        assert torch.equal(p.detach()[1], f)
    resumed = build()
    resumed.load_state_dict(algo.state_dict())
    assert resumed.members.all_done() is False and resumed.members.done.tolist() == [False, True]


def test_evaluation_reports_each_seed_on_its_own_sub_envs() -> None:
    """Seed 1 always pushes the cart left (its episodes end within ~10 steps), seed 0
    acts at random (~22): each seed's statistics come from its own sub-envs, with its
    own quota of episodes."""
    from rlx.collect.evaluation import evaluate_policy
    from rlx.members import StackedLinear

    algo = AlgorithmConfig(num_envs=8, horizon=8, num_seeds=2, device="cpu", seed=0).build(CartPole)
    with torch.no_grad():
        head = [m for m in algo.policy.model.actor if isinstance(m, StackedLinear)][-1]
        head.weight[:].zero_()
        head.bias[1, 0] = torch.tensor([10.0, -10.0])
    env = CartPole(2 * 16, None, device="cpu")
    stats = evaluate_policy(algo.policy, env, episodes=64, max_steps=2000, deterministic=False, groups=2)
    assert stats["member0/eval/episodes"] == 64 == stats["member1/eval/episodes"] and stats["eval/episodes"] == 128
    assert stats["member1/eval/length_mean"] < 12 < 16 < stats["member0/eval/length_mean"]
    assert stats["eval/length_mean"] == pytest.approx((stats["member0/eval/length_mean"] + stats["member1/eval/length_mean"]) / 2)


def test_a_multi_seed_run_evaluates_every_seed_and_stops_each_on_its_eval() -> None:
    algo = AlgorithmConfig(num_envs=8, horizon=8, num_seeds=2, device="cpu", seed=0).build(CartPole)
    trainer = Trainer(algo, TrainerConfig(max_iterations=3, eval_every=1, eval_episodes=4, eval_num_envs=4,
                                          stop_at={"eval/return_mean": 1.0}))
    metrics = trainer.run()
    assert {"member0/eval/return_mean", "member1/eval/return_mean"} <= metrics.keys()
    assert trainer.stop_reason == "every seed reached eval/return_mean >= 1" and trainer.iteration == 1
