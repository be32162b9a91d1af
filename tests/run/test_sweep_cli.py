"""``rlx sweep`` and ``rlx train --pbt`` end to end (issue #31): one process trains every
member, the run directory says which member is which, the end ranks the points, and
plot, eval and export pick members."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlx.run.cli import main
from rlx.run.export import load_policy

CONFIG = """\
env: rlx.envs:CartPole
algorithm: ppo
config: {num_envs: 8, horizon: 16, sgd_minibatch_size: 64, num_sgd_iters: 2, device: cpu, seed: 0,
         model_config: {hiddens: [16, 16], activation_fn: tanh}}
trainer: {max_iterations: 4, checkpoint_every: 2, tensorboard: false}
"""


def _config(tmp_path: Path) -> str:
    path = tmp_path / "cartpole.yaml"
    path.write_text(CONFIG)
    return str(path)


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_a_grid_sweep_trains_every_point_and_seed_in_one_process_and_ranks_them(tmp_path, capsys) -> None:
    run_dir = tmp_path / "sweep"
    args = ["sweep", _config(tmp_path), "--grid", "config.optimizer_config.lr=1e-3,1e-2", "--grid",
            "config.entropy_coeff=0,0.05", "--seeds", "2", "--run-dir", str(run_dir), "--threads", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "sweep: 4 point(s) x 2 seed(s) = 8 members in one process" in out
    sweep = json.loads((run_dir / "sweep.json").read_text())
    assert sweep["keys"] == ["lr", "entropy_coeff"] and len(sweep["members"]) == 8
    assert sweep["members"][5] == {"member": 5, "point": 2, "seed": 1, "lr": 0.01, "entropy_coeff": 0.0}
    last = _rows(run_dir)[-1]
    for m in sweep["members"]:  # each member trained with its point's values
        assert last[f"member{m['member']}/hparams/lr"] == pytest.approx(m["lr"])
        assert last[f"member{m['member']}/hparams/entropy_coeff"] == pytest.approx(m["entropy_coeff"])
    table = (run_dir / "sweep.md").read_text().splitlines()
    assert table[0].startswith("| rank | lr | entropy_coeff | episodes/return_mean IQM [95% CI] over 2 seed(s)")
    assert len(table) == 2 + 4 and table[2].startswith("| 1 |")
    iqms = [float(line.split("|")[4].split("[")[0]) for line in table[2:]]
    assert iqms == sorted(iqms, reverse=True)
    assert "ranked by episodes/return_mean" in out

    assert main(["export", str(run_dir), "--best", "--out", str(tmp_path / "best.pt")]) == 0
    best = int(capsys.readouterr().out.split("best member: ")[1].split()[0])
    obs = torch.randn(3, 4)
    assert torch.equal(torch.jit.load(str(tmp_path / "best.pt"))(obs), load_policy(run_dir, seed=best)(obs))
    assert main(["eval", str(run_dir), "--member", "3", "--episodes", "2", "--num-envs", "2"]) == 0
    assert main(["export", str(run_dir), "--best", "--member", "1"]) == 2
    assert "--best and --member choose the member both" in capsys.readouterr().err
    pytest.importorskip("matplotlib")
    assert main(["plot", str(run_dir)]) == 0
    assert "wrote" in capsys.readouterr().out and (run_dir / "sweep.png").stat().st_size > 10_000


def test_a_random_search_draws_its_points_from_the_spaces(tmp_path, capsys) -> None:
    run_dir = tmp_path / "random"
    assert main(["sweep", _config(tmp_path), "--random", "3", "--space", "config.optimizer_config.lr=loguniform(1e-4,1e-2)",
                 "--space", "clip_param=uniform(0.1,0.3)", "--run-dir", str(run_dir), "--set", "trainer.max_iterations=2",
                 "--threads", "1"]) == 0
    points = json.loads((run_dir / "sweep.json").read_text())["points"]
    assert len(points) == 3 and len({p["lr"] for p in points}) == 3
    assert all(1e-4 <= p["lr"] <= 1e-2 and 0.1 <= p["clip_param"] <= 0.3 for p in points)


@pytest.mark.parametrize("args,message", [
    (["--grid", "config.num_envs=8,16"], "'num_envs' cannot differ between members (it sets the env's and the buffer's shapes)"),
    (["--space", "lr=loguniform(1e-4,1e-2)"], "--space needs --random N"),
    (["--random", "2", "--space", "lr=normal(0,1)"], "is not loguniform(a,b), uniform(a,b) or choice(v1,v2,...)"),
    ([], "nothing to sweep"),
])
def test_bad_sweeps_are_refused_by_name(tmp_path, capsys, args: list[str], message: str) -> None:
    assert main(["sweep", _config(tmp_path), "--run-dir", str(tmp_path / "bad"), *args]) == 2
    assert message in capsys.readouterr().err


def test_pbt_from_the_command_line_logs_its_lineage_and_resumes(tmp_path, capsys) -> None:
    run_dir = tmp_path / "pbt"
    config = _config(tmp_path)
    args = ["train", config, "--run-dir", str(run_dir), "--threads", "1",
            "--pbt", "members=4,every=2,hparams=lr+clip_param,resample=0.5", "--space", "lr=loguniform(1e-4,1e-2)",
            "--space", "clip_param=uniform(0.1,0.3)"]
    assert main(args) == 0
    lineage = [json.loads(x) for x in (run_dir / "lineage.jsonl").read_text().splitlines()]
    assert lineage and {"iteration", "env_steps", "member", "source", "score", "source_score", "hparams"} <= lineage[0].keys()
    assert set(lineage[0]["hparams"]) == {"lr", "clip_param"}
    assert main(["train", config, "--run-dir", str(run_dir), "--resume", "--set", "trainer.max_iterations=6",
                 "--threads", "1"]) == 0
    rows = _rows(run_dir)
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4, 5, 6] and "pbt/copies" in rows[5]
    pytest.importorskip("matplotlib")
    capsys.readouterr()
    assert main(["plot", str(run_dir)]) == 0
    assert (run_dir / "pbt.png").is_file()
