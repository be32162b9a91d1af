"""The ``rlx`` command: train, eval, plot, export, bench, check-env, envs.

    rlx train CONFIG [--set key=value ...] [--run-dir DIR] [--resume] [--seeds S] [--rsl-rl-cfg FILE]
              [--pbt members=16,every=10,metric=M,hparams=lr+entropy_coeff] [--space KEY=DIST ...]
    rlx sweep CONFIG [--grid KEY=V1,V2 ...] [--random N --space KEY=DIST ...] [--seeds K] [--metric M]
    rlx eval RUN_DIR_OR_CHECKPOINT [--episodes N] [--num-envs B] [--member I | --best]
    rlx plot RUN_DIR [--out FILE.png]
    rlx export RUN_DIR [--out policy.pt] [--member I | --best]
    rlx bench [--quick] [--device cuda] [--num-envs 64 1024 ...] [...]
    rlx check-env MODULE:CLASS [--num-envs B] [--steps N]
    rlx envs

Errors a user can fix (a missing file, a bad key or value, an env that fails to import)
print one line, ``rlx: error: ...``, and exit with status 2; ``RLX_DEBUG=1`` shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _writable_dir(path: Path, what: str) -> None:
    """Create the directory ``path`` (and its parents) and prove it takes a file, before
    any work whose results would go there.

    Raises:
        ValueError: naming ``what`` (the option and its value), the directory and why it
            cannot be written.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".rlx-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        reason = e.strerror or type(e).__name__
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            reason = f"{blocker} is a file, not a directory"
        raise ValueError(f"{what}: cannot write in {path} ({reason}); choose another place") from e


def _threads_arg(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int or 'auto', got {value!r}")
    return threads


def _cpu_threads(threads: int | str | None) -> Any:
    """Apply ``--threads``: a count is set once; ``auto`` (the default, unless
    ``OMP_NUM_THREADS`` fixes it) returns the :class:`~rlx.run.threads.AutoThreads` that keeps
    torch off the cores other processes use."""
    import torch

    from rlx.run.threads import AutoThreads, threads_are_set_by_user

    if isinstance(threads, int):
        torch.set_num_threads(threads)
        return None
    if threads is None and threads_are_set_by_user():
        return None
    auto = AutoThreads()
    auto.update()
    return auto


def _cmd_train(args: argparse.Namespace) -> int:
    import torch

    from rlx.core import distributed as rdist
    from rlx.env import resolve_device
    from rlx.config.run import load_run_config

    overrides = list(args.set or [])
    if args.seeds is not None:
        overrides.append(f"config.num_seeds={args.seeds}")
    run = load_run_config(args.config, overrides)
    if args.rsl_rl_cfg is not None:
        from rlx.runners.rsl_rl_cfg import run_config_from_rsl_rl

        run = run_config_from_rsl_rl(run, args.rsl_rl_cfg)
    if args.resume and _population_run(args):  # PBT's drawn population is the run directory's
        run = _saved_run(args, run)
    elif args.pbt is not None:
        from rlx.run.sweep import parse_pbt, parse_spaces, pbt_run_config

        if args.seeds is not None:
            raise ValueError("--pbt members=N sets the population's size: drop --seeds")
        run = pbt_run_config(run, parse_pbt(args.pbt, parse_spaces(args.space or [])))
    elif args.space:
        raise ValueError("--space is for --pbt (train) and --random (sweep)")
    # Under torchrun: join the process group (NCCL for CUDA training, else gloo).
    distributed = rdist.init_from_env(device_type=resolve_device(run.config.device).type)
    try:
        return _train(args, run)
    finally:
        if distributed:
            torch.distributed.destroy_process_group()


def _population_run(args: argparse.Namespace) -> bool:
    """Whether ``--run-dir`` holds a PBT run (its config.yaml has ``trainer.pbt``)."""
    from rlx.core.yaml_types import load_yaml

    saved = Path(args.run_dir or "") / "config.yaml"
    if args.run_dir is None or not saved.is_file():
        return False
    data = load_yaml(saved.read_text())
    return isinstance(data, dict) and bool((data.get("trainer") or {}).get("pbt"))


def _saved_run(args: argparse.Namespace, run: Any) -> Any:
    """The run config a population's run directory recorded (its drawn hyperparameters),
    with this command's ``--set`` overrides (a new budget, say)."""
    from rlx.config.run import load_run_config

    saved = Path(args.run_dir or "") / "config.yaml"
    if args.run_dir is None or not saved.is_file():
        return run
    return load_run_config(saved, list(args.set or []))


def _cmd_sweep(args: argparse.Namespace) -> int:
    from rlx.config.run import load_run_config
    from rlx.run.sweep import format_table, parse_grid, parse_spaces, sweep_points, sweep_run_config, sweep_table, write_sweep

    run = load_run_config(args.config, list(args.set or []))
    if args.resume:
        run = _saved_run(args, run)
        points = None
    else:
        points = sweep_points(parse_grid(args.grid or []), args.random, parse_spaces(args.space or []), seed=args.sweep_seed)
        run = sweep_run_config(run, points, args.seeds)
    if args.run_dir is None:
        args.run_dir = str(Path("runs") / f"{Path(args.config).stem}-sweep-{dt.datetime.now():%Y%m%d-%H%M%S}")
    if points is not None:
        print(f"sweep: {len(points)} point(s) x {args.seeds} seed(s) = {run.config.num_seeds} members in one process")
        _writable_dir(Path(args.run_dir), f"--run-dir {args.run_dir}")
        from rlx.run.checkpoint import latest_checkpoint

        if latest_checkpoint(Path(args.run_dir)) is None:
            write_sweep(Path(args.run_dir), points, args.seeds, args.metric)
    status = _train(args, run)
    metric, rows = sweep_table(args.run_dir, args.metric if args.resume else None)
    table = format_table(metric, rows)
    (Path(args.run_dir) / "sweep.md").write_text(table + "\n")
    print(f"\nranked by {metric} (mean of each member's last reports; IQM over seeds, 95% bootstrap CI):")
    print(table)
    print(f"plots: rlx plot {args.run_dir}   best policy: rlx export {args.run_dir} --best")
    return status


def _member_arg(args: argparse.Namespace) -> int | None:
    """``--member I`` (alias ``--seed``), or the best member with ``--best``."""
    if not getattr(args, "best", False):
        return args.seed
    if args.seed is not None:
        raise ValueError("--best and --member choose the member both: give one")
    from rlx.run.sweep import best_member

    run_dir = Path(args.path) if Path(args.path).is_dir() else Path(args.path).parent.parent
    member, value, metric = best_member(run_dir)
    print(f"best member: {member} ({metric} {value:.2f}, the mean of its last reports)")
    return member


def _train(args: argparse.Namespace, run: Any) -> int:
    from rlx.core import distributed as rdist
    from rlx.run.checkpoint import latest_checkpoint
    from rlx.algorithms.modes import run_length
    from rlx.run.trainer import Trainer

    say = print if rdist.rank() == 0 else (lambda *a, **k: None)
    if args.run_dir is not None:
        run_dir = Path(args.run_dir)
    elif args.resume:
        raise ValueError("--resume needs --run-dir: the run directory to continue")
    else:
        run_dir = Path("runs") / f"{Path(args.config).stem}-{dt.datetime.now():%Y%m%d-%H%M%S}"
    if rdist.world_size() > 1 and args.run_dir is None and not args.resume:
        raise ValueError("under torchrun, pass --run-dir: every rank must agree on the run directory")
    if args.resume and latest_checkpoint(run_dir) is None:
        raise FileNotFoundError(f"--resume: no checkpoint in {run_dir / 'checkpoints'}")
    if not args.resume and latest_checkpoint(run_dir) is not None:
        raise ValueError(f"{run_dir} already holds a run; pass --resume to continue it, or another --run-dir")
    if rdist.rank() == 0:
        _writable_dir(run_dir, f"--run-dir {run_dir}")
    with run_length(run.trainer.max_env_steps):  # compile="auto" compiles where it pays within the run
        algo = run.config.build(run.env_cls)
    trainer = Trainer(algo, run.trainer, run_dir=run_dir, run_config=run, cpu_threads=_cpu_threads(args.threads))
    if args.resume:
        path = trainer.resume()
        say(f"resumed {run_dir} from {path.name} (iteration {trainer.iteration}, {algo.env_steps} env steps)")
    ranks = f" on each of {algo.world_size} ranks" if algo.world_size > 1 else ""
    say(f"training {run.algorithm} on {run.env} with {algo.num_envs} envs x {algo.horizon} steps{ranks} on {algo.device}")
    metrics = trainer.run()
    ckpt = latest_checkpoint(run_dir)
    say(f"stopped: {trainer.stop_reason} after {algo.env_steps} env steps in {trainer.wall_s:.1f} s of training")
    if trainer.stop_hint:
        say(f"  {trainer.stop_hint}")
    say(f"run directory: {run_dir}")
    say(f"  metrics:    {run_dir / 'metrics.jsonl'}   (curves: rlx plot {run_dir})")
    say(f"  checkpoint: {ckpt}")
    if trainer.interrupted_by is not None:  # preempted: resumable, and not a finished run
        say(f"  resume with: rlx {getattr(args, 'command', 'train')} {args.config} --run-dir {run_dir} --resume")
        return 128 + trainer.interrupted_by
    return 0 if metrics else 1


def _cmd_eval(args: argparse.Namespace) -> int:
    from rlx.env import check_device_available
    from rlx.collect.evaluation import evaluate_policy
    from rlx.run.export import policy_from_checkpoint
    from rlx.config.run import env_factory

    check_device_available(args.device, where="--device")
    policy, run = policy_from_checkpoint(args.path, device=args.device, seed=_member_arg(args))
    env = env_factory(run["env"], run.get("env_kwargs"))(args.num_envs, None, device=args.device)
    stats = evaluate_policy(policy, env, episodes=args.episodes, max_steps=args.max_steps, deterministic=not args.stochastic)
    for key, value in stats.items():
        print(f"{key}: {value:.4f}" if isinstance(value, float) and not math.isnan(value) else f"{key}: {value}")
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from rlx.run.plotting import is_multi_seed_run, plot_run, plot_seeds

    if args.out:
        _writable_dir(Path(args.out).parent, f"--out {args.out}")
    one = len(args.run_dir) == 1
    if one:
        from rlx.run.sweep_plots import is_pbt_run, is_sweep_run, plot_pbt, plot_sweep

        if is_sweep_run(args.run_dir[0]):
            out, rows = plot_sweep(args.run_dir[0], args.out, args.metric)
            print(f"wrote {out} ({len(rows)} points; best: "
                  + ", ".join(f"{k}={v:.4g}" for k, v in rows[0]["hparams"].items()) + f", IQM {rows[0]['iqm']:.2f})")
            return 0
        if is_pbt_run(args.run_dir[0]):
            print(f"wrote {plot_pbt(args.run_dir[0], args.out, args.metric)}")
            return 0
    if one and not is_multi_seed_run(args.run_dir[0]):
        out = plot_run(args.run_dir[0], args.out)
        print(f"wrote {out}")
        return 0
    # Several runs, or one run of num_seeds > 1 (its seeds drawn as separate runs).
    first = Path(args.run_dir[0]).resolve()
    out_path = args.out or (first / "seeds.png" if one else first.parent / "seeds.png")
    out, s = plot_seeds(args.run_dir, out_path, args.metric, args.threshold)
    print(f"{s['seeds']} seeds, {s['metric']} (IQM [95% bootstrap CI]" + (", n/a for 1 seed" if s["seeds"] < 2 else "")
          + "):")
    print(f"  final: {s['final_iqm']:.2f} [{s['final_ci'][0]:.2f}, {s['final_ci'][1]:.2f}]   per seed: "
          + ", ".join(f"{v:.1f}" for v in s["final"]))
    print(f"  best:  {s['best_iqm']:.2f} [{s['best_ci'][0]:.2f}, {s['best_ci'][1]:.2f}]   per seed: "
          + ", ".join(f"{v:.1f}" for v in s["best"]))
    if "threshold" in s:
        reached = sum(math.isfinite(v) for v in s["steps_to_threshold"])
        print(f"  env steps to {s['threshold']:g}: {s['steps_iqm']:,.0f} [{s['steps_ci'][0]:,.0f}, "
              f"{s['steps_ci'][1]:,.0f}]   reached by {reached} of {s['seeds']} seeds")
    print(f"wrote {out}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from rlx.run.export import export_onnx, export_torchscript

    run_dir = Path(args.path) if Path(args.path).is_dir() else Path(args.path).parent
    out = Path(args.out) if args.out else run_dir / ("policy.onnx" if args.format == "onnx" else "policy.pt")
    _writable_dir(out.parent, f"--out {out}")
    member = _member_arg(args)
    if args.format == "onnx":
        export_onnx(args.path, out, seed=member)
        print(f"wrote {out} (ONNX, one self-contained file: raw observations in, env actions out; run with onnxruntime)")
        return 0
    export_torchscript(args.path, out, seed=member)
    print(f"wrote {out} (TorchScript; load with torch.jit.load or rlx.load_policy)")
    return 0


def _cmd_envs(args: argparse.Namespace) -> int:
    import rlx.envs

    for name in rlx.envs.__all__:
        if name in rlx.envs.TOOLS:
            continue
        env_cls = getattr(rlx.envs, name)
        env = env_cls(1)
        obs, act = env.observation_spec, env.action_spec
        summary = (env_cls.__doc__ or "").strip().splitlines()[0]
        print(f"rlx.envs:{name}")
        print(f"  {summary}")
        print(f"  observation: {type(obs).__name__}{list(obs.shape)} {obs.dtype}")
        bounds = ""
        if hasattr(act.space, "low"):
            bounds = f" in [{act.space.low.min().item():g}, {act.space.high.max().item():g}]"  # SYNC: listing
        elif hasattr(act.space, "n"):
            bounds = f" with {act.space.n} choices"
        print(f"  action:      {type(act).__name__}{list(act.shape)} {act.dtype}{bounds}")
    return 0


def _cmd_check_env(args: argparse.Namespace) -> int:
    from rlx.core.yaml_types import import_object
    from rlx.envs import check_env

    env_cls = import_object(args.env, where="env")
    problems = check_env(env_cls, args.num_envs, steps=args.steps, device=args.device)
    return 1 if problems else 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from rlx.run.bench import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``rlx`` command."""
    parser = argparse.ArgumentParser(prog="rlx", description="Train and use PPO / NPG policies on batched torch envs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = sub.add_parser(
        "train", help="train from a YAML run config",
        description="Train from a YAML run config. SIGTERM or Ctrl-C (SIGINT) finishes the iteration in progress, "
        "writes a checkpoint and exits with status 128 + the signal (143, 130); --resume continues from it. "
        "Exit status 0: a stop condition held; 2: a usage or config error.",
    )
    train.add_argument("config", help="YAML run config (env, algorithm, config, trainer); see configs/")
    train.add_argument(
        "--set", action="append", metavar="KEY=VALUE",
        help="override a config value by its dotted path, parsed as YAML, e.g. --set config.num_envs=64 (repeatable)",
    )
    train.add_argument("--run-dir", help="run directory (default: runs/<config name>-<timestamp>)")
    train.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its newest checkpoint")
    train.add_argument("--threads", type=_threads_arg, metavar="N|auto",
                       help="torch CPU threads (default auto: the cores other processes leave free, looked at again "
                       "every 5 s; OMP_NUM_THREADS, when set, is kept)")
    train.add_argument("--rsl-rl-cfg", metavar="FILE",
                       help="train PPO (or a Distillation) from rsl_rl's train_cfg (YAML or JSON; rsl_rl 3.x to "
                            "5.x layouts, Isaac Lab's agent config as a dict) instead of the run config's algorithm; "
                            "the run config still gives the env, num_envs, the device, the trainer and, to distil, "
                            "config.teacher")
    train.add_argument("--seeds", type=int, metavar="S",
                       help="train S independent agents at once (seeds seed..seed+S-1; config.num_seeds); every algorithm")
    train.add_argument("--pbt", metavar="members=N,every=K,...",
                       help="population-based training of N members in one process: every K iterations the bottom "
                            "quarter by metric= (default episodes/return_mean) copies a top-quarter member and perturbs "
                            "hparams= (default: the --space keys, else lr; join with +); also fraction=, resample=, "
                            "perturb=0.8+1.25, seed=")
    train.add_argument("--space", action="append", metavar="KEY=DIST",
                       help="--pbt: draw the initial KEY of each member from DIST (loguniform(a,b), uniform(a,b), "
                            "choice(v1,...)), and resample from it (repeatable)")
    train.set_defaults(func=_cmd_train)

    sweep = sub.add_parser(
        "sweep", help="train a hyperparameter sweep as one population in one process",
        description="Train every point of a grid (--grid, the cross product) or of a random search (--random N "
        "--space ...) with --seeds K seeds each, all as members of one batch in one process; then rank the points "
        "by the IQM over their seeds of --metric with a 95%% bootstrap interval (sweep.md), and draw them with "
        "rlx plot RUN_DIR.",
    )
    sweep.add_argument("config", help="YAML run config (as rlx train)")
    sweep.add_argument("--grid", action="append", metavar="KEY=V1,V2",
                       help="values of one hyperparameter, e.g. config.optimizer_config.lr=1e-4,3e-4,1e-3 (repeatable: "
                            "the cross product)")
    sweep.add_argument("--random", type=int, metavar="N", help="draw N points from the --space distributions")
    sweep.add_argument("--space", action="append", metavar="KEY=DIST",
                       help="a distribution to draw from: loguniform(a,b), uniform(a,b), choice(v1,...) (repeatable)")
    sweep.add_argument("--seeds", type=int, default=1, metavar="K", help="seeds per point (default 1)")
    sweep.add_argument("--metric", default="episodes/return_mean",
                       help="the metric to rank by, higher is better (default episodes/return_mean)")
    sweep.add_argument("--sweep-seed", type=int, default=0, help="seed of the random search's draws (default 0)")
    sweep.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value (as rlx train)")
    sweep.add_argument("--run-dir", help="run directory (default: runs/<config name>-sweep-<timestamp>)")
    sweep.add_argument("--resume", action="store_true", help="continue the sweep in --run-dir")
    sweep.add_argument("--threads", type=_threads_arg, metavar="N|auto", help="torch CPU threads (as rlx train)")
    sweep.set_defaults(func=_cmd_sweep)

    ev = sub.add_parser("eval", help="evaluate a trained policy", description="Evaluate a trained policy deterministically.")
    ev.add_argument("path", metavar="RUN_DIR_OR_CHECKPOINT", help="a run directory (newest checkpoint) or a checkpoint file")
    ev.add_argument("--episodes", type=int, default=32, help="complete episodes to average over (default 32)")
    ev.add_argument("--num-envs", type=int, default=32, help="parallel sub-envs (default 32)")
    ev.add_argument("--max-steps", type=int, default=10_000, help="give up after this many env steps (default 10000)")
    ev.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the mode")
    ev.add_argument("--device", default="cpu", help="device for the policy and env (default cpu)")
    ev.add_argument("--member", "--seed", dest="seed", type=int,
                    help="which member of a multi-seed run, sweep or PBT population (0 <= i < num_seeds)")
    ev.add_argument("--best", action="store_true", help="the member with the best final metric (a sweep's, else the return)")
    ev.set_defaults(func=_cmd_eval)

    plot = sub.add_parser(
        "plot", help="draw learning curves (needs matplotlib)",
        description="Draw a run's learning curves; with several run directories (seeds of one setup), each seed "
        "thinly and their interquartile mean with a 95%% bootstrap band, and print the IQM and interval of the "
        "final and best values and of the env steps to reach the threshold.",
    )
    plot.add_argument("run_dir", metavar="RUN_DIR", nargs="+", help="run directories with metrics.jsonl")
    plot.add_argument("--out", help="PNG file to write (default RUN_DIR/curves.png; seeds: the first RUN_DIR's "
                      "parent/seeds.png)")
    plot.add_argument("--metric", help="seeds: the metric to aggregate (default eval/return_mean when every run "
                      "evaluated, else episodes/return_mean)")
    plot.add_argument("--threshold", type=float, help="seeds: the value whose first crossing is timed (default "
                      "the runs' trainer.stop_at for the metric)")
    plot.set_defaults(func=_cmd_plot)

    export = sub.add_parser("export", help="export the policy as TorchScript or ONNX",
                            description="Export the deterministic policy as TorchScript (default) or ONNX.")
    export.add_argument("path", metavar="RUN_DIR", help="a run directory (newest checkpoint) or a checkpoint file")
    export.add_argument("--format", choices=["torchscript", "onnx"], default="torchscript",
                        help="torchscript (runs with torch alone) or onnx (pip install 'rlx[onnx]')")
    export.add_argument("--out", help="output file (default RUN_DIR/policy.pt, or policy.onnx)")
    export.add_argument("--member", "--seed", dest="seed", type=int,
                        help="which member of a multi-seed run, sweep or PBT population (0 <= i < num_seeds)")
    export.add_argument("--best", action="store_true",
                        help="the member with the best final metric (a sweep's, else the return)")
    export.set_defaults(func=_cmd_export)

    bench = sub.add_parser(
        "bench", help="throughput benchmark: collect, update and end-to-end speed over a grid",
        description="Time collect() and step() over a grid of batch sizes, envs and algorithms "
        "(medians after warm-up, CUDA synchronised); results go to --out-dir as JSON lines and markdown.",
    )
    from rlx.run.bench import add_arguments

    add_arguments(bench)
    bench.set_defaults(func=_cmd_bench)

    check = sub.add_parser(
        "check-env", help="check an env class against rlx's protocol",
        description="Check an env class: specs, shapes, dtypes, devices, auto-reset, final_obs.",
    )
    check.add_argument("env", metavar="MODULE:CLASS", help="import path of the env class, e.g. my_pkg.envs:MyEnv")
    check.add_argument("--num-envs", type=int, default=4, help="sub-envs to build (default 4)")
    check.add_argument("--steps", type=int, default=300, help="random-action steps to take (default 300)")
    check.add_argument("--device", default="cpu", help="device to build the env on (default cpu)")
    check.set_defaults(func=_cmd_check_env)

    envs = sub.add_parser("envs", help="list the built-in envs", description="List the built-in envs and their spaces.")
    envs.set_defaults(func=_cmd_envs)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``rlx`` command; returns the exit status."""
    args = build_parser().parse_args(argv)
    # Env and model import paths resolve from the current directory too, as under
    # ``python -m`` (appended: an installed package of the same name still wins).
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("rlx: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, ImportError, TypeError, FloatingPointError) as e:
        if os.environ.get("RLX_DEBUG"):
            raise
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"rlx: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
