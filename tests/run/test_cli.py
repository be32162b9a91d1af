"""The rlx command end to end: train, eval, plot, export, envs, resume after SIGKILL."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from rlx.run.cli import build_parser, main
from rlx.run.checkpoint import latest_checkpoint, load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = str(ROOT / "configs" / "cartpole_ppo.yaml")
QUICK = ["--set", "trainer.max_env_steps=4096", "--set", "trainer.stop_at=null", "--set", "trainer.checkpoint_every=1"]


def _rlx(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "rlx", *args], capture_output=True, text=True, timeout=timeout, env=env, **kwargs)


def test_train_eval_plot_export_end_to_end(tmp_path, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main(["train", CARTPOLE, "--run-dir", str(run_dir), *QUICK]) == 0
    out = capsys.readouterr().out
    assert "stopped: reached 4096 env steps" in out and str(run_dir / "checkpoints") in out
    assert (run_dir / "config.yaml").is_file() and (run_dir / "metrics.jsonl").is_file()
    assert latest_checkpoint(run_dir).name == "ckpt_00000002.pt"

    assert main(["eval", str(run_dir), "--episodes", "4", "--num-envs", "4"]) == 0
    assert "eval/return_mean:" in capsys.readouterr().out

    assert main(["export", str(run_dir), "--out", str(tmp_path / "policy.pt")]) == 0
    scripted = torch.jit.load(str(tmp_path / "policy.pt"))
    import rlx

    eager = rlx.load_policy(run_dir)
    obs = torch.randn(5, 4)
    assert torch.equal(scripted(obs), eager(obs))

    pytest.importorskip("matplotlib")
    assert main(["plot", str(run_dir), "--out", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_recurrent_ppo_trains_resumes_evaluates_and_exports_from_the_cli(tmp_path, capsys) -> None:
    config = str(ROOT / "configs" / "cartpole_no_velocity_recurrent_ppo.yaml")
    run_dir = tmp_path / "run"
    assert main(["train", config, "--run-dir", str(run_dir), *QUICK]) == 0
    assert "stopped: reached 4096 env steps" in capsys.readouterr().out
    state = load_checkpoint(latest_checkpoint(run_dir))
    assert state["config"]["algorithm"] == "recurrent_ppo" and "recurrent" in state["algorithm"]
    more = ["--set", "trainer.max_env_steps=8192", "--set", "trainer.stop_at=null"]
    assert main(["train", config, "--run-dir", str(run_dir), "--resume", *more]) == 0
    assert latest_checkpoint(run_dir).name == "ckpt_00000004.pt"

    assert main(["eval", str(run_dir), "--episodes", "4", "--num-envs", "4"]) == 0
    assert "eval/return_mean:" in capsys.readouterr().out

    import rlx
    from rlx.run.export import DeployedRecurrentPolicy

    eager = rlx.load_policy(run_dir)
    assert isinstance(eager, DeployedRecurrentPolicy)
    assert main(["export", str(run_dir), "--out", str(tmp_path / "policy.pt")]) == 0
    scripted = torch.jit.load(str(tmp_path / "policy.pt"))
    obs, resets = torch.randn(5, 2), torch.tensor([True, False, True, False, False])
    state = torch.randn_like(eager.initial_state(5))
    for _ in range(3):  # the scripted and eager policies carry the same states
        actions, next_state = eager(obs, state, resets)
        scripted_actions, scripted_state = scripted(obs, state, resets)
        assert torch.equal(actions, scripted_actions) and torch.equal(next_state, scripted_state)
        state, resets = next_state, torch.zeros(5, dtype=torch.bool)


def test_a2c_trains_resumes_evaluates_and_exports_from_the_cli(tmp_path, capsys) -> None:
    config = str(ROOT / "configs" / "cartpole_a2c.yaml")
    run_dir = tmp_path / "run"
    assert main(["train", config, "--run-dir", str(run_dir), *QUICK]) == 0
    assert load_checkpoint(latest_checkpoint(run_dir))["config"]["algorithm"] == "a2c"
    assert main(["train", config, "--run-dir", str(run_dir), "--resume", "--set", "trainer.max_env_steps=8192",
                 "--set", "trainer.stop_at=null"]) == 0
    assert main(["eval", str(run_dir), "--episodes", "4", "--num-envs", "4"]) == 0
    assert "eval/return_mean:" in capsys.readouterr().out
    assert main(["export", str(run_dir), "--out", str(tmp_path / "policy.pt")]) == 0
    import rlx

    obs = torch.randn(5, 4)
    assert torch.equal(torch.jit.load(str(tmp_path / "policy.pt"))(obs), rlx.load_policy(run_dir)(obs))
    args = ["bench", "--num-envs", "8", "--horizon", "4", "--envs", "CartPole", "--algos", "a2c", "--iters", "1",
            "--warmup", "0", "--out-dir", str(tmp_path / "bench")]
    assert main(args) == 0
    assert "a2c" in (tmp_path / "bench" / "throughput_cpu.md").read_text()


def test_loaded_policy_carries_the_observation_normalizer(tmp_path) -> None:
    run_dir = tmp_path / "run"
    assert main(["train", CARTPOLE, "--run-dir", str(run_dir), *QUICK, "--set", "config.normalize_obs=true"]) == 0
    state = load_checkpoint(latest_checkpoint(run_dir))
    assert any("obs_normalizers" in k for k in state["algorithm"]["policy"])
    import rlx

    policy = rlx.load_policy(run_dir)
    obs = torch.randn(64, 4) * 3
    normalizer = policy.policy.obs_normalizers["obs"]
    assert normalizer.count > 0
    params, _ = policy.policy.model(normalizer.normalize(obs))
    assert torch.equal(policy(obs), params.argmax(-1))


def test_user_env_from_a_module_path(tmp_path, monkeypatch, capsys) -> None:
    package = tmp_path / "my_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "my_envs.py").write_text(textwrap.dedent('''
        import torch
        from tensordict import TensorDict
        from torchrl.data import Categorical, Unbounded

        class Bandit:
            """Two arms; arm 1 pays 1, arm 0 pays 0. Every episode lasts one step."""

            def __init__(self, num_envs, /, horizon=None, *, device="cpu"):
                self.num_envs, self.device = num_envs, device
                self.observation_spec = Unbounded(shape=(1,), device=device)
                self.action_spec = Categorical(2, device=device)

            def reset(self, *, config=None):
                return torch.zeros(self.num_envs, 1, device=self.device)

            def step(self, actions):
                return TensorDict(
                    {"obs": torch.zeros(self.num_envs, 1), "rewards": actions.float().unsqueeze(-1),
                     "terminated": torch.ones(self.num_envs, 1, dtype=torch.bool)},
                    batch_size=[self.num_envs],
                )
    '''))
    config = tmp_path / "bandit.yaml"
    config.write_text(textwrap.dedent('''
        env: my_pkg.my_envs:Bandit
        algorithm: ppo
        config: {num_envs: 16, horizon: 8, device: cpu, seed: 0, gamma: 0.0, optimizer_config: {lr: 0.01},
                 model_config: {hiddens: [16]}}
        trainer: {max_env_steps: 20000, stop_at: {episodes/return_mean: 0.95}, progress: false}
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["train", str(config), "--run-dir", str(tmp_path / "run")]) == 0
    assert "episodes/return_mean = " in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "no/such.yaml"], "no config file at no/such.yaml"),
        (["train", CARTPOLE, "--set", "config.num_env=3"], "cartpole_ppo.yaml.config.num_env: unknown key"),
        (["train", CARTPOLE, "--set", "config.gamma=high"], "cartpole_ppo.yaml.config.gamma: must be a number, got 'high'"),
        (["train", CARTPOLE, "--set", "config.gamma=2.0"], "AlgorithmConfig.gamma: must be <= 1.0, got 2.0"),
        (["train", CARTPOLE, "--set", "env=nowhere.mod:Env"], "env: cannot import module 'nowhere.mod'"),
        (["train", CARTPOLE, "--resume"], "--resume needs --run-dir"),
        (["eval", "no/such/run"], "no run directory or checkpoint at no/such/run"),
        (["plot", "no/such/run"], "no/such/run"),
    ],
)
def test_user_errors_print_one_line_and_exit_2(args, message, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rlx: error: ") and message in err


def test_every_flag_is_documented_in_help() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in subparsers.items():
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"rlx {name} {action.option_strings} has no help"
    result = _rlx("train", "--help")
    assert result.returncode == 0
    for flag in ("--set", "--run-dir", "--resume", "--threads"):
        assert flag in result.stdout


@pytest.mark.slow
def test_sigkill_during_training_leaves_a_loadable_checkpoint_and_resume_continues(tmp_path) -> None:
    run_dir = tmp_path / "run"
    args = ["train", CARTPOLE, "--run-dir", str(run_dir), "--set", "trainer.stop_at=null",
            "--set", "trainer.max_env_steps=100000000", "--set", "trainer.checkpoint_every=1",
            "--set", "trainer.progress=false", "--set", "config.compile=false"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "rlx", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            ckpt = latest_checkpoint(run_dir) if run_dir.exists() else None
            if ckpt is not None and int(ckpt.stem.split("_")[1]) >= 4:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"no checkpoints appeared: {proc.stderr.read() if proc.poll() is not None else ''}")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    latest = latest_checkpoint(run_dir)
    state = load_checkpoint(latest)
    killed_at = state["trainer"]["iteration"]
    assert killed_at >= 4 and not list((run_dir / "checkpoints").glob(".*tmp*"))
    # Eager as before the kill (the long max_env_steps would have "auto" compile, a minute here).
    result = _rlx(*args, "--set", f"trainer.max_iterations={killed_at + 2}", "--resume")
    assert result.returncode == 0, result.stderr
    assert f"resumed {run_dir} from {latest.name} (iteration {killed_at}" in result.stdout
    import json

    iterations = [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert iterations == list(range(1, killed_at + 3))


def test_bench_runs_a_tiny_grid_and_writes_its_results(tmp_path, capsys) -> None:
    out = tmp_path / "results"
    args = ["bench", "--num-envs", "8", "--horizon", "4", "--envs", "CartPole", "--algos", "ppo", "recurrent_ppo",
            "--iters", "1", "--warmup", "0", "--threads", "1", "--out-dir", str(out), "--tag", "test"]
    assert main(args) == 0
    assert "CartPole" in capsys.readouterr().out
    import json

    rows = [json.loads(line) for line in (out / "throughput_cpu_test.jsonl").read_text().splitlines()]
    assert [r["algo"] for r in rows] == ["ppo", "recurrent_ppo"]
    assert all(r["collect_steps_per_s"] > 0 and r["update_samples_per_s"] > 0 for r in rows)
    table = (out / "throughput_cpu_test.md").read_text()
    assert "`rlx bench --device cpu --num-envs 8 --horizon 4" in table
    assert all(r["iters"] == 1 and r["warmup"] == 0 for r in rows)


def test_bench_quick_honours_its_flags_and_records_what_ran(tmp_path, monkeypatch, capsys) -> None:
    import json
    import subprocess

    monkeypatch.chdir(tmp_path)  # the commit comes from rlx's checkout, not from where the command runs
    out = tmp_path / "results"
    args = ["bench", "--quick", "--num-envs", "8", "--horizon", "4", "--envs", "Pendulum", "--algos", "ppo",
            "--threads", "1", "--out-dir", str(out), "--tag", "quick"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "throughput_cpu_quick.jsonl").read_text().splitlines()]
    assert [(r["env"], r["iters"], r["warmup"]) for r in rows] == [("Pendulum", 5, 2)]  # --quick: same counts
    table = (out / "throughput_cpu_quick.md").read_text()
    assert "--envs Pendulum" in table and "medians of 5 iterations after 2 warm-up iterations" in table
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2]).stdout.strip()
    if head:  # a git checkout
        assert rows[0]["commit"] == head
    if Path("/proc/cpuinfo").exists():
        assert rows[0]["device_name"] not in ("x86_64", "aarch64", "")


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="per-point peak RSS needs Linux's clear_refs")
def test_bench_reports_each_grid_points_own_peak_rss() -> None:
    from rlx.run.bench import _peak_memory_mb, bench_one

    blob = torch.ones(512 * 2**20 // 4)  # 512 MiB, touched: the process peak now includes it
    peak_with_blob = _peak_memory_mb(torch.device("cpu"))
    del blob
    row = bench_one("CartPole", "ppo", 8, 4, "cpu", [8], False, iters=1, warmup=0)
    assert row["peak_memory_mb"] < peak_with_blob - 256, (row["peak_memory_mb"], peak_with_blob)


def test_import_paths_resolve_from_the_current_directory_as_under_python_m(tmp_path, monkeypatch, capsys) -> None:
    # The `rlx` console script does not put the current directory on sys.path by itself.
    (tmp_path / "corridor_here.py").write_text("from rlx.envs import CartPole\n\nclass Corridor(CartPole):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert main(["check-env", "corridor_here:Corridor", "--steps", "20"]) == 0
    assert "Corridor: passes" in capsys.readouterr().out


def _train_until_checkpoint(run_dir, extra=()) -> tuple[subprocess.Popen, list[str]]:
    """Start ``rlx train`` on CartPole with no stop in sight; return once it wrote 2 iterations."""
    args = ["train", CARTPOLE, "--run-dir", str(run_dir), "--set", "trainer.stop_at=null",
            "--set", "trainer.max_env_steps=100000000", "--set", "trainer.checkpoint_every=1000",
            "--set", "config.compile=false",  # a long budget would compile ("auto"): not what this tests
            "--set", "trainer.progress=false", *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "rlx", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
            return proc, args
        if proc.poll() is not None:
            pytest.fail(f"training ended early: {proc.stderr.read()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("no metrics appeared")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_finishes_the_iteration_checkpoints_and_exits_128_plus_it(tmp_path, signum) -> None:
    import json

    run_dir = tmp_path / "run"
    proc, args = _train_until_checkpoint(run_dir)  # checkpoint_every=1000: none is due
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # never leave a training process behind for the rest of the suite
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 128 + signum, err
    name = signal.Signals(signum).name
    assert f"stopped: received {name}" in out and "resume with: rlx train" in out
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    state = load_checkpoint(latest_checkpoint(run_dir))  # written at the stop, atomically
    assert state["trainer"]["iteration"] == lines[-1]["iteration"] == len(lines)
    assert not list((run_dir / "checkpoints").glob(".*tmp*"))
    stopped_at = len(lines)
    result = _rlx(*args, "--set", f"trainer.max_iterations={stopped_at + 2}", "--resume")
    assert result.returncode == 0, result.stderr
    assert f"(iteration {stopped_at}," in result.stdout
    iterations = [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert iterations == list(range(1, stopped_at + 3))



def _read_only_dir(tmp_path: Path) -> Path:
    """A directory no one may write in: chmod 555 for a normal user; for root, whom file
    modes do not stop, sysfs (which refuses new files to everyone)."""
    if os.geteuid() != 0:
        path = tmp_path / "read-only"
        path.mkdir()
        path.chmod(0o555)
        return path
    if not Path("/sys/kernel").is_dir():
        pytest.skip("running as root without sysfs: no read-only directory to test with")
    return Path("/sys/kernel")


def _trained(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    assert main(["train", CARTPOLE, "--run-dir", str(run_dir), *QUICK, "--set", "trainer.progress=false"]) == 0
    return run_dir


def test_places_that_cannot_be_written_are_one_line_errors_before_any_work(tmp_path, capsys) -> None:
    (tmp_path / "a_file").write_text("not a directory")
    read_only = _read_only_dir(tmp_path)
    cases = [
        (["train", CARTPOLE, "--run-dir", str(tmp_path / "a_file" / "run")], f"{tmp_path / 'a_file'} is a file, not a directory"),
        (["train", CARTPOLE, "--run-dir", str(read_only / "run")], f"--run-dir {read_only / 'run'}: cannot write in"),
    ]
    for args, message in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("rlx: error: ") and message in err, err
    run_dir = _trained(tmp_path)
    capsys.readouterr()
    cases = [
        (["export", str(run_dir), "--out", str(tmp_path / "a_file" / "policy.pt")], "a_file is a file, not a directory"),
        (["export", str(run_dir), "--out", str(read_only / "policy.pt")], f"--out {read_only / 'policy.pt'}: cannot write in {read_only}"),
    ]
    if importlib.util.find_spec("matplotlib") is not None:
        cases.append((["plot", str(run_dir), "--out", str(read_only / "curves.png")], f"cannot write in {read_only}"))
    for args, message in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("rlx: error: ") and message in err, err


@pytest.mark.skipif(torch.version.cuda is not None, reason="needs a CPU-only torch")
def test_a_cuda_device_on_cpu_only_torch_is_a_one_line_error_naming_the_field(tmp_path, capsys) -> None:
    assert main(["train", CARTPOLE, "--run-dir", str(tmp_path / "run"), "--set", "config.device=cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "rlx: error: AlgorithmConfig.device: 'cuda', but this torch" in err and "CPU-only build" in err
    assert main(["eval", str(tmp_path / "run"), "--device", "cuda"]) == 2
    assert "rlx: error: --device: 'cuda', but this torch" in capsys.readouterr().err


@pytest.mark.parametrize(
    "missing, args, message",
    [
        (["onnxscript"], ["export", "{run}", "--format", "onnx"], "ONNX export needs onnxscript: pip install 'rlx[onnx]'"),
        (["gymnasium"], ["train", str(ROOT / "configs" / "mujoco" / "halfcheetah_ppo.yaml")],
         "GymnasiumEnv needs gymnasium (import of gymnasium halted; None in sys.modules): pip install 'rlx[mujoco]'"),
        (["mujoco"], ["train", str(ROOT / "configs" / "mujoco" / "halfcheetah_ppo.yaml")],
         "MuJoCo is not installed"),
    ],
)
def test_a_missing_extra_is_a_one_line_error_naming_the_extra(missing, args, message, tmp_path) -> None:
    """In a fresh process where the packages cannot be imported (``sys.modules[name] = None``
    makes Python refuse them, as when they are not installed)."""
    if "mujoco" in missing:
        pytest.importorskip("gymnasium")
        message += ", run `pip install \"gymnasium[mujoco]\"`; pip install 'rlx[mujoco]'"
    run_dir = _trained(tmp_path) if "{run}" in args else tmp_path / "run"
    args = [a.replace("{run}", str(run_dir)) for a in args]
    if args[0] == "train":
        args += ["--run-dir", str(run_dir)]
    code = (f"import sys\nfor m in {missing!r}: sys.modules[m] = None\n"
            f"from rlx.run.cli import main\nraise SystemExit(main({args!r}))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("rlx: error: ") and message in out.stderr, out.stderr


def test_an_env_module_that_cannot_be_imported_says_how_to_make_it_importable(tmp_path, capsys) -> None:
    run_dir = _trained(tmp_path)
    state = load_checkpoint(latest_checkpoint(run_dir))
    state["config"]["env"] = "my_envs.walker:Walker"
    torch.save(state, tmp_path / "moved.pt")
    assert main(["eval", str(tmp_path / "moved.pt")]) == 2
    err = capsys.readouterr().err
    assert "cannot import module 'my_envs.walker' (ModuleNotFoundError: No module named 'my_envs')" in err
    assert "run rlx from the directory that holds 'my_envs', add that directory to PYTHONPATH" in err


def test_eval_and_export_fall_back_from_a_truncated_newest_checkpoint_as_resume_does(tmp_path, capsys) -> None:
    run_dir = _trained(tmp_path)
    newest = latest_checkpoint(run_dir)
    newest.write_bytes(newest.read_bytes()[:100])
    with pytest.warns(UserWarning, match=r"ckpt_00000002\.pt is unreadable: truncated or not a torch file \(100 bytes"):
        assert main(["eval", str(run_dir), "--episodes", "2", "--num-envs", "2"]) == 0
    with pytest.warns(UserWarning, match="trying the checkpoint before it"):
        assert main(["export", str(run_dir), "--out", str(tmp_path / "p.pt")]) == 0
    assert (tmp_path / "p.pt").is_file()


def test_resuming_a_run_that_met_its_goal_stops_at_once_and_says_how_to_go_on(tmp_path, capsys) -> None:
    run_dir = tmp_path / "run"
    goal = ["--set", "trainer.stop_at={episodes/length_mean: 10}", "--set", "trainer.progress=false"]
    assert main(["train", CARTPOLE, "--run-dir", str(run_dir), *goal]) == 0
    first = load_checkpoint(latest_checkpoint(run_dir))["trainer"]["iteration"]
    capsys.readouterr()
    assert main(["train", CARTPOLE, "--run-dir", str(run_dir), "--resume", *goal]) == 0
    out = capsys.readouterr().out
    assert f"met before this resume (iteration {first})" in out
    assert "to train on, raise the goal or drop it: --set trainer.stop_at=null" in out
    assert load_checkpoint(latest_checkpoint(run_dir))["trainer"]["iteration"] == first  # no iteration trained
