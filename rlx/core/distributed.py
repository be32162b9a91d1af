"""Data-parallel training over torch.distributed (launched with ``torchrun``).

Each rank owns ``num_envs`` envs on its own device and a copy of the policy. Everything
that PPO and NPG compute from the whole batch is reduced across ranks, so N ranks with B
envs each take the same step as one process with N·B envs and N times the minibatch size
(minibatch sizes are per rank; with whole-buffer minibatches the steps are the same):
gradients are averaged in one flat all-reduce, advantage normalization, KL early stopping, the KL-adaptive LR, the
normalizer statistics and NPG's gradient, Fisher-vector products and line search use
global values. A single process without torchrun's variables runs exactly as before:
every helper here is a no-op when there is no process group.

Timeouts: the process group is created with ``RLX_DIST_TIMEOUT_S`` (default 300 s), so
a collective with a dead peer raises instead of hanging; torchrun also stops the other
workers when one fails.
"""

from __future__ import annotations

import atexit
import datetime as dt
import hashlib
import json
import os
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = [
    "all_reduce_",
    "all_reduce_grads_",
    "all_reduce_mean_",
    "broadcast_module_",
    "check_same_on_all_ranks",
    "init_from_env",
    "is_distributed",
    "local_rank",
    "rank",
    "world_size",
]


def is_distributed() -> bool:
    """Whether a process group with more than one rank is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's global rank (0 without a process group)."""
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """Number of ranks (1 without a process group)."""
    return dist.get_world_size() if is_distributed() else 1


def local_rank() -> int:
    """This process's rank on its node (torchrun's ``LOCAL_RANK``; 0 without one)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def init_from_env(*, device_type: str | None = None) -> bool:
    """Join the process group described by torchrun's environment variables.

    Uses NCCL when the training device is CUDA and gloo otherwise, with the
    ``RLX_DIST_TIMEOUT_S`` timeout. Does nothing (and returns ``False``) outside torchrun
    or with ``WORLD_SIZE=1``.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not dist.is_available():
        return False
    if dist.is_initialized():
        return True
    if device_type is None:
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    backend = "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank())
    timeout = dt.timedelta(seconds=float(os.environ.get("RLX_DIST_TIMEOUT_S", "300")))
    dist.init_process_group(backend=backend, timeout=timeout)
    # A script that never destroys the group (Isaac Lab's train.py shape does not) can
    # abort at exit while gloo's threads are still joinable ("terminate called without an
    # active exception", seen once under load in tests/runners/test_rsl_rl_scripts.py).
    atexit.register(_destroy_at_exit)
    return True


def _destroy_at_exit() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_(tensor: Tensor, op: str = "mean") -> Tensor:
    """Reduce ``tensor`` in place across ranks (``"mean"``, ``"sum"``, ``"max"``, ``"min"``)."""
    if not is_distributed():
        return tensor
    reduce_op = {"mean": dist.ReduceOp.SUM, "sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op]
    dist.all_reduce(tensor, op=reduce_op)
    if op == "mean":
        tensor.div_(dist.get_world_size())
    return tensor


def all_reduce_grads_(params: Iterable[torch.nn.Parameter]) -> None:
    """Average the gradients of ``params`` across ranks in ONE flat all-reduce."""
    if is_distributed():
        all_reduce_mean_([p.grad for p in params if p.grad is not None])


def all_reduce_mean_(tensors: list[Tensor]) -> None:
    """Average ``tensors`` across ranks, in place, in ONE flat all-reduce."""
    if not is_distributed() or not tensors:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    all_reduce_(flat, "mean")
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


def broadcast_(tensor: Tensor, src: int = 0) -> Tensor:
    """Give every rank rank ``src``'s ``tensor``, in place."""
    if is_distributed():
        dist.broadcast(tensor, src=src)
    return tensor


def broadcast_module_(module: torch.nn.Module, src: int = 0) -> None:
    """Give every rank rank ``src``'s parameters and buffers (one flat broadcast per dtype)."""
    if not is_distributed():
        return
    tensors = [t for t in module.state_dict().values() if isinstance(t, Tensor)]
    # Sorted: a set's order can differ between processes, and collectives must match.
    for dtype in sorted({t.dtype for t in tensors}, key=str):
        group = [t for t in tensors if t.dtype == dtype]
        flat = torch.cat([t.detach().reshape(-1) for t in group])
        dist.broadcast(flat, src=src)
        offset = 0
        with torch.no_grad():
            for t in group:
                t.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()


def check_same_on_all_ranks(description: dict[str, Any], what: str) -> None:
    """Raise on EVERY rank if ``description`` differs between ranks, naming the keys.

    Raises:
        ValueError: ``"{what} differs across ranks: ..."`` with the differing keys and
            their values per rank.
    """
    if not is_distributed():
        return
    text = json.dumps(description, sort_keys=True, default=repr)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, text)
    if len(set(gathered)) == 1:
        return
    per_rank = [json.loads(g) for g in gathered]
    keys = sorted({k for d in per_rank for k in d if len({json.dumps(d.get(k), sort_keys=True) for d in per_rank}) > 1})
    details = "; ".join(f"{k}: " + ", ".join(f"rank {r}={d.get(k)!r}" for r, d in enumerate(per_rank)) for k in keys)
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    raise ValueError(f"{what} differs across ranks (this rank's digest {digest}): {details}")
