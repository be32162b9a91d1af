"""Checkpoint files: atomic writes, safe loads, the newest of a run, and the resume check.

A checkpoint is one ``torch.save`` file, ``checkpoints/ckpt_<iteration>.pt`` in a run
directory, holding plain data and tensors only (it loads with ``weights_only=True``)::

    format        CHECKPOINT_FORMAT
    rlx_version   the version that wrote it
    algorithm     Algorithm.state_dict()
    trainer       Trainer.state_dict()
    config        the resolved run config (RunConfig.to_dict())
"""

from __future__ import annotations

import os
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "CHECKPOINT_FORMAT",
    "RESUME_MUST_MATCH",
    "checkpoint_path",
    "config_differences",
    "latest_checkpoint",
    "load_checkpoint",
    "load_policy_state",
    "load_resumable",
    "newest_readable_checkpoint",
    "read_checkpoint",
    "save_checkpoint_atomic",
]

#: Version of the checkpoint layout; checkpoints of every rlx release so far are format 1.
CHECKPOINT_FORMAT = 1


def save_checkpoint_atomic(payload: dict[str, Any], path: str | Path) -> Path:
    """Write ``payload`` with ``torch.save`` so that ``path`` is never seen half-written.

    The bytes go to a temporary file in the same directory, which is flushed and
    fsync-ed, then renamed over ``path`` (atomic on POSIX), and the directory is
    fsync-ed so the rename survives a crash.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint safely (``weights_only=True``: tensors and plain data only).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is empty, truncated or not a torch file (names it).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises OSError, EOFError, RuntimeError, pickle errors...
        raise ValueError(f"checkpoint {path} is unreadable: {_why_unreadable(path, e)}") from e
    return state


def _why_unreadable(path: Path, error: Exception) -> str:
    """One line for a checkpoint ``torch.load`` refused (torch's own text runs to
    paragraphs of advice that do not apply to a damaged file)."""
    if not zipfile.is_zipfile(path):
        size = path.stat().st_size
        return f"truncated or not a torch file ({size} bytes; {type(error).__name__})"
    if "Weights only load failed" in str(error):
        return "it holds objects other than tensors and plain data, so weights_only=True refuses it"
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first.split('. ')[0][:160]}"


def newest_readable_checkpoint(run_dir: str | Path, load: Any = None) -> tuple[Path, dict[str, Any]]:
    """The newest checkpoint of a run directory that loads, and its contents.

    An unreadable newest file (a damaged disk, a copy cut short, a process killed
    mid-write by something other than rlx) is skipped with a one-line warning for the one
    before it.

    Args:
        load: How to load a file (default :func:`load_checkpoint`); a ``ValueError`` it
            raises marks the file unreadable.

    Raises:
        FileNotFoundError: the run directory has no checkpoint.
        ValueError: none of its checkpoints loads (naming each and why).
    """
    load = load or load_checkpoint
    candidates = sorted(Path(run_dir, "checkpoints").glob("ckpt_*.pt"), reverse=True)
    if not candidates:
        raise FileNotFoundError(f"no checkpoint in {Path(run_dir, 'checkpoints')}")
    errors = []
    for candidate in candidates:
        try:
            return candidate, load(candidate)
        except ValueError as e:
            errors.append(str(e))
            if candidate is not candidates[-1]:
                warnings.warn(f"{e}; trying the checkpoint before it", stacklevel=2)
    raise ValueError(f"no readable checkpoint in {Path(run_dir, 'checkpoints')}: {'; '.join(errors)}")


def load_resumable(path: Path | str) -> dict[str, Any]:
    """:func:`load_checkpoint` for a resume: a Trainer checkpoint of a format this rlx reads.

    Raises:
        ValueError: not a Trainer checkpoint, or another format (naming both and the
            version that wrote it).
    """
    state = load_checkpoint(path)
    if not isinstance(state, dict) or not {"algorithm", "trainer"} <= state.keys():
        raise ValueError(f"checkpoint {path} is not a Trainer checkpoint (no 'algorithm' and 'trainer' entries)")
    fmt = state.get("format", CHECKPOINT_FORMAT)
    if fmt != CHECKPOINT_FORMAT:
        raise ValueError(
            f"checkpoint {path} has format {fmt!r} (written by rlx {state.get('rlx_version', '?')}); "
            f"this rlx reads format {CHECKPOINT_FORMAT}"
        )
    return state


#: Config fields a resumed run must share with its checkpoint: they fix the shapes of the
#: saved tensors (policy, optimizer, normalizers, per-env state) or what they mean.
RESUME_MUST_MATCH = (
    "env", "env_kwargs", "algorithm", "config.num_envs", "config.model_config", "config.normalize_obs", "config.obs_groups"
)


def config_differences(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{"config.field": (saved, current)}`` for the env, algorithm and algorithm fields
    that differ. The trainer section may change freely on resume, and so may ``seed``: it
    seeds a fresh run only, as a resume restores the RNG states."""
    out: dict[str, tuple[Any, Any]] = {}
    for key in ("env", "env_kwargs", "algorithm"):
        if saved.get(key) != current.get(key):
            out[key] = (saved.get(key), current.get(key))
    saved_cfg, current_cfg = saved.get("config") or {}, current.get("config") or {}
    for key in sorted((saved_cfg.keys() | current_cfg.keys()) - {"seed"}):
        if saved_cfg.get(key) != current_cfg.get(key):
            out[f"config.{key}"] = (saved_cfg.get(key), current_cfg.get(key))
    return out


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest ``checkpoints/ckpt_*.pt`` of a run directory, or ``None``."""
    files = sorted(Path(run_dir, "checkpoints").glob("ckpt_*.pt"))
    return files[-1] if files else None


def checkpoint_path(path: str | Path) -> Path:
    """The checkpoint file a path names: the newest one of a run directory, or the file.

    Raises:
        FileNotFoundError: nothing at ``path``, or a run directory with no checkpoint.
    """
    path = Path(path)
    if path.is_dir():
        found = latest_checkpoint(path)
        if found is None:
            raise FileNotFoundError(f"no checkpoint in {path / 'checkpoints'}")
        return found
    if not path.exists():
        raise FileNotFoundError(f"no run directory or checkpoint at {path}")
    return path


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint file's contents, or a run directory's newest readable checkpoint's."""
    return newest_readable_checkpoint(path)[1] if Path(path).is_dir() else load_checkpoint(checkpoint_path(path))


def load_policy_state(path: str | Path, *, where: str) -> dict[str, Any]:
    """The policy state (weights and normalizers) of a checkpoint or run directory.

    Raises:
        ValueError: naming ``where``, when none can be read there.
    """
    try:
        return read_checkpoint(path)["algorithm"]["policy"]
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"{where}: cannot read a policy from {path} ({e})") from e
