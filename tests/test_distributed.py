"""torch.distributed (gloo, 2 CPU processes): one big batch semantics, errors, dead ranks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
WORKER = str(ROOT / "tests" / "dist_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env["RLX_DIST_TIMEOUT_S"] = "30"
    return env


def _torchrun(*args: str, timeout: float = 180, dist_timeout_s: int | None = None) -> subprocess.CompletedProcess:
    """``args`` under torchrun on 2 ranks; ``dist_timeout_s`` replaces :func:`_env`'s process-group timeout."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(_free_port()), *args]
    env = _env() if dist_timeout_s is None else {**_env(), "RLX_DIST_TIMEOUT_S": str(dist_timeout_s)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _config_mismatch_messages(tmp_path: Path, mode: str) -> list[str]:
    """Run the worker's ``mode`` on two ranks whose configs differ: it fails, and every
    rank's error says so. Returns the two ranks' messages."""
    out = tmp_path / "err"
    result = _torchrun(WORKER, mode, "8", str(out), timeout=120)
    assert result.returncode != 0
    messages = [Path(f"{out}.rank{rank}").read_text() for rank in (0, 1)]
    assert all("the algorithm config differs across ranks" in message for message in messages)
    return messages


#: The modes whose two-rank run equals the one-rank run, each run by one process (and one
#: torchrun) after the other: a launch per mode would cost nine times the start-up.
EQUAL_MODES = ("ppo", "npg", "recurrent_ppo", "rsl_rl_groups", "ppo_seeds", "npg_seeds", "ppo_sweep", "ppo_rnd",
               "ppo_symmetry")


def _assert_ranks_equal_one_rank(mode: str, a: dict, b: dict) -> None:
    assert a["env_steps"] == b["env_steps"] == 2 * 8 * 8
    # NPG runs in float64 (tests/dist_worker.py): the converged solve is conditioned as
    # F + λI (κ <= 5 / 0.1 = 50), so the ranks' reordered sums move it by about
    # κ·n·2^-53 ≈ 1e-12 of the step, and the critic's Adam by lr·δ/eps <= 1e-5·lr a step.
    # npg_seeds scales its rewards by float32 statistics summed across the ranks: rewards
    # off by 2^-24 relative move the solve by κ·2^-24 ≈ 3e-6 of a step of <= 0.3.
    tol = {"npg": {"atol": 1e-9, "rtol": 1e-9}, "npg_seeds": {"atol": 1e-6, "rtol": 1e-9}}.get(
        mode, {"atol": 1e-5, "rtol": 1e-5})
    for x, y in zip(a["params"], b["params"]):
        torch.testing.assert_close(x, y, **tol)
    keys = ["losses/policy", "losses/vf", "monitors/kl_div", "episodes/return_mean"]
    if mode.endswith(("_seeds", "_sweep")):  # seeds replicated per rank: each seed data-parallel over the ranks
        keys += [f"member{i}/{k}" for i in range(2) for k in keys]
    if mode == "rsl_rl_groups":  # the env's log extras are reduced across ranks like rlx's own stats
        keys.append("env/position")
    if mode == "ppo_symmetry":
        keys.append("losses/mirror")
    for key in keys:
        assert a["stats"][key] == pytest.approx(b["stats"][key], rel=1e-4, abs=1e-6), key


@pytest.mark.slow
def test_two_ranks_with_half_the_envs_equal_one_rank_with_all(tmp_path) -> None:
    """Each of :data:`EQUAL_MODES` (PPO, NPG, recurrent PPO, the rsl_rl adapter with groups,
    seeds, a sweep, RND, symmetry) on 2 ranks x 4 envs equals 1 rank x 8 envs."""
    modes = ",".join(EQUAL_MODES)
    single = subprocess.run([sys.executable, WORKER, modes, "8", str(tmp_path / "single")], capture_output=True,
                            text=True, timeout=300, env=_env())
    assert single.returncode == 0, single.stderr[-3000:]
    result = _torchrun(WORKER, modes, "8", str(tmp_path / "dist"), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    failed = {}
    for mode in EQUAL_MODES:
        try:
            _assert_ranks_equal_one_rank(mode, torch.load(tmp_path / f"single.{mode}"), torch.load(tmp_path / f"dist.{mode}"))
        except AssertionError as e:
            failed[mode] = str(e)
    assert not failed, failed


@pytest.mark.slow
def test_the_kl_early_stop_decides_alike_on_every_rank_and_as_one_rank_would(tmp_path) -> None:
    single = subprocess.run([sys.executable, WORKER, "ppo_kl_stop", "8", str(tmp_path / "single.pt")],
                            capture_output=True, text=True, timeout=120, env=_env())
    assert single.returncode == 0, single.stderr
    result = _torchrun(WORKER, "ppo_kl_stop", "8", str(tmp_path / "dist.pt"))
    assert result.returncode == 0, result.stderr[-3000:]
    one = torch.load(tmp_path / "single.pt.rank0")
    ranks = [torch.load(tmp_path / f"dist.pt.rank{r}") for r in (0, 1)]
    steps = one["stats"]["monitors/optimizer_steps"]
    assert 0 < steps < 8  # the stop came mid-update: the test can fail
    for rank in ranks:
        assert rank["stats"]["monitors/optimizer_steps"] == steps
        assert rank["stats"]["monitors/sgd_epochs"] == one["stats"]["monitors/sgd_epochs"]
    for x, y, z in zip(one["params"], ranks[0]["params"], ranks[1]["params"]):
        assert torch.equal(y, z)  # the ranks never diverge
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_compiled_programs_on_two_ranks_take_the_eager_steps(tmp_path) -> None:
    """Under torch.distributed ``compile`` compiles what it compiles on one process, the
    all-reduces inside the programs: PPO's whole minibatch update (the gradient, the KL
    the ranks judge alike, RND's step) and the phases around it (the advantages
    normalized over every rank's samples, the KL pass); NPG's natural step (its gradient,
    Fisher-vector products and line search reduced over the ranks) and critic
    minibatches. In float64 each rank's compiled run takes the eager run's steps to the
    bound of tests/algorithms/test_one_update.py (1e-3 * lr: Adam's eps amplifying
    reassociation; NPG's CG converges, tests/algorithms/test_npg.py), and the ranks stay
    bit-identical."""
    # The ranks compile in turn (tests/dist_worker.py): rank 0 waits in a collective while
    # rank 1 traces what rank 0 compiled, up to a minute on a busy CPU.
    result = _torchrun(WORKER, "ppo_compiled,npg_compiled", "8", str(tmp_path / "dist.pt"), timeout=600,
                       dist_timeout_s=300)
    assert result.returncode == 0, result.stderr[-3000:]
    for mode, programs in (("ppo_compiled", 3), ("npg_compiled", 2)):
        ranks = [torch.load(tmp_path / f"dist.pt.{mode}.rank{r}") for r in (0, 1)]
        for runs in ranks:
            eager, compiled = runs[False], runs[True]
            assert compiled["fallback"] is None and compiled["programs"] == programs, mode  # nothing falls back
            if mode == "ppo_compiled":
                assert 0 < compiled["stats"]["monitors/optimizer_steps"] < 6  # the KL stop cut the update: it can fail
                for key in ("monitors/optimizer_steps", "monitors/sgd_epochs"):
                    assert compiled["stats"][key] == eager["stats"][key], key
            for key in ("losses/total", "monitors/kl_div", "losses/rnd", "episodes/return_mean"):
                if key in eager["stats"]:
                    assert compiled["stats"][key] == pytest.approx(eager["stats"][key], rel=1e-4, abs=1e-6), (mode, key)
            for x, y in zip(eager["params"], compiled["params"]):
                torch.testing.assert_close(y, x, rtol=1e-9, atol=1e-3 * eager["lr"], msg=lambda m: f"{mode}: {m}")
        for x, y in zip(ranks[0][True]["params"], ranks[1][True]["params"]):
            assert torch.equal(x, y), mode  # the ranks never diverge


@pytest.mark.slow
def test_a_seed_done_on_rank_zero_stops_updating_on_every_rank(tmp_path) -> None:
    """Per-seed stop conditions can hold on one rank only (rank 0 alone evaluates): the
    trainer merges the done seeds across ranks each iteration, so the replicas agree."""
    out = tmp_path / "done"
    result = _torchrun(WORKER, "seeds_done", "8", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    r0, r1 = torch.load(f"{out}.rank0"), torch.load(f"{out}.rank1")
    assert r0["done"] == r1["done"] == [False, True]
    assert r0["iteration"] == r1["iteration"] == 5
    for a, b in zip(r0["params"], r1["params"]):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_mismatched_configs_fail_on_every_rank_with_a_clear_error(tmp_path) -> None:
    for message in _config_mismatch_messages(tmp_path, "mismatch"):
        assert "num_envs: rank 0=4, rank 1=5" in message


@pytest.mark.slow
def test_ranks_binding_other_env_kwargs_fail_with_a_clear_error(tmp_path) -> None:
    for message in _config_mismatch_messages(tmp_path, "mismatch_env_kwargs"):
        assert "'env_kwargs': {'delay': 4}" in message and "'env_kwargs': {'delay': 8}" in message


@pytest.mark.slow
def test_running_stats_merge_ranks_only_when_asked(tmp_path) -> None:
    out = tmp_path / "rms"
    result = _torchrun(WORKER, "running_stats", "2", str(out), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    states = [torch.load(f"{out}.rank{r}") for r in (0, 1)]
    everything = torch.cat([torch.arange(20.0).view(-1, 2), torch.arange(6.0).view(-1, 2) + 100]).double()
    for state in states:  # the policy's normalizers and the reward scaler: every rank's samples
        assert state["synced"]["count"].item() == 13
        torch.testing.assert_close(state["synced"]["mean"], everything.mean(0))
        torch.testing.assert_close(state["synced"]["var"], everything.var(0, correction=0))
    assert [s["local"]["count"].item() for s in states] == [10, 3]  # a user's own instance: its own


@pytest.mark.slow
def test_a_dead_rank_makes_the_others_exit_instead_of_hanging(tmp_path) -> None:
    start = time.monotonic()
    result = _torchrun(WORKER, "die", "8", str(tmp_path / "x"), timeout=150)
    assert result.returncode != 0
    assert time.monotonic() - start < 120


@pytest.mark.slow
def test_two_process_cartpole_run_solves_and_only_rank_zero_writes(tmp_path) -> None:
    run_dir = tmp_path / "run"
    result = _torchrun("-m", "rlx", "train", str(ROOT / "configs" / "cartpole_ppo.yaml"), "--run-dir", str(run_dir),
                       "--set", "trainer.progress=false", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "episodes/length_mean" in result.stdout and ">= 475" in result.stdout
    assert result.stdout.count("stopped:") == 1  # rank 0 alone prints
    import json

    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == list(range(1, len(lines) + 1))
    assert json.loads(lines[0])["env/steps"] == 2 * 32 * 64


@pytest.mark.slow
def test_resume_works_with_a_different_number_of_ranks(tmp_path) -> None:
    import json

    run_dir = tmp_path / "run"
    common = ["--set", "trainer.progress=false", "--set", "trainer.stop_at=null", "--set", "trainer.checkpoint_every=1"]
    first = _torchrun("-m", "rlx", "train", str(ROOT / "configs" / "cartpole_ppo.yaml"), "--run-dir", str(run_dir),
                      *common, "--set", "trainer.max_iterations=3")
    assert first.returncode == 0, first.stderr[-3000:]
    # Continue the 2-rank run in one process: the shared state (policy, optimizer,
    # normalizers, counters) carries over; envs restart from fresh resets.
    second = subprocess.run(
        [sys.executable, "-m", "rlx", "train", str(ROOT / "configs" / "cartpole_ppo.yaml"), "--run-dir", str(run_dir),
         *common, "--set", "trainer.max_iterations=5", "--resume"],
        capture_output=True, text=True, timeout=120, env=_env(),
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert "(iteration 3, 12288 env steps)" in second.stdout
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in lines] == [1, 2, 3, 4, 5]
    assert [m["env_steps"] for m in lines] == [4096, 8192, 12288, 14336, 16384]


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_signal_under_torchrun_stops_every_rank_at_one_iteration_and_rank_zero_writes(tmp_path, signame: str) -> None:
    """SIGTERM (a cluster's preemption) or SIGINT (Ctrl-C in a terminal) to the whole job."""
    import json
    import signal

    from rlx.run.checkpoint import latest_checkpoint, load_checkpoint

    run_dir = tmp_path / "run"
    config = str(ROOT / "configs" / "cartpole_ppo.yaml")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(_free_port()), "-m", "rlx", "train", config, "--run-dir", str(run_dir),
           "--set", "trainer.stop_at=null", "--set", "trainer.max_env_steps=100000000",
           "--set", "trainer.checkpoint_every=1000", "--set", "trainer.progress=false", "--threads", "1",
           "--set", "config.compile=false"]  # the long budget would compile ("auto")
    # Its own process group: a cluster's preemption signals the whole job, agent and ranks.
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    metrics = run_dir / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 120
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "timeout"
            time.sleep(0.05)
        os.killpg(proc.pid, getattr(signal, signame))
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert f"stopped: received {signame}" in out or f"stopped: another rank received {signame}" in out, out + err[-3000:]
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    state = load_checkpoint(latest_checkpoint(run_dir))  # rank 0's, at the iteration every rank stopped
    assert state["trainer"]["iteration"] == lines[-1]["iteration"] == len(lines)
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == [f"ckpt_{len(lines):08d}.pt"]


@pytest.mark.slow
def test_pbt_copies_and_perturbs_alike_on_every_rank(tmp_path) -> None:
    """Ranked on an evaluation only rank 0 runs: rank 0's scores are broadcast, so the ranks
    make the same copies and perturbations and keep identical members (without the
    broadcast they part at the first ranking)."""
    result = _torchrun(WORKER, "pbt", "8", str(tmp_path / "dist"))
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"dist.rank{r}") for r in (0, 1)]
    assert len(ranks[0]["lineage"]) >= 2
    assert ranks[0]["lineage"] == ranks[1]["lineage"] and ranks[0]["lrs"] == ranks[1]["lrs"]
    for x, y in zip(ranks[0]["params"], ranks[1]["params"]):
        assert torch.equal(x, y)


@pytest.mark.slow
def test_distillation_on_two_ranks_equals_one_rank(tmp_path, monkeypatch) -> None:
    made = subprocess.run([sys.executable, WORKER, "make_teacher", "8", str(tmp_path / "teacher")], capture_output=True,
                          text=True, timeout=120, env=_env())
    assert made.returncode == 0, made.stderr
    monkeypatch.setenv("RLX_TEACHER", str(tmp_path / "teacher"))
    single = subprocess.run([sys.executable, WORKER, "distill", "8", str(tmp_path / "single.pt")], capture_output=True,
                            text=True, timeout=120, env=_env())
    assert single.returncode == 0, single.stderr
    result = _torchrun(WORKER, "distill", "8", str(tmp_path / "dist.pt"))
    assert result.returncode == 0, result.stderr[-3000:]
    a, b = torch.load(tmp_path / "single.pt"), torch.load(tmp_path / "dist.pt")
    for x, y in zip(a["params"], b["params"]):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
    assert a["stats"]["losses/behavior"] == pytest.approx(b["stats"]["losses/behavior"], rel=1e-4)
