"""How many kernels an iteration launches on CUDA, counted on a CPU with no GPU.

    pip install triton      # PyPI's wheel: generating Triton kernels needs no GPU
    python benchmarks/experiments/cuda_launches.py [--num-envs 4096] [--members S]
        [--mode compile|eager] [--per-gradient-norms] [--inductor JSON] [--top 12] [--out FILE]

vs_jax.py's CartPole PPO (T = 32, 64x64 tanh, 4 epochs x 4 minibatches; ``--members S``:
S members of ``--num-envs`` each), one ``collect()`` + ``step()`` after warm-up.

``--mode compile`` (``compile=True``): with inductor's ``cpu_backend="triton"`` a CPU
program is scheduled as a CUDA one is (the same fusion into the same Triton kernels).
Triton's compile is stubbed (there is no driver here): a kernel's ``run`` counts instead
of running, so the programs compute nothing; inductor's buffers come zeroed (and are not
reused), and the host's reads of the statistics are told that all is finite, so the
iteration runs through. Counted:

* **triton**: each generated kernel's launch;
* **gemm**: each extern GEMM (cuBLAS on CUDA; it runs here on the CPU). cuBLAS adds a
  split-K reduce or a bias copy to many shapes, which is not counted;
* **fallback**: each aten op a program calls (no inductor lowering: ``_foreach_norm``,
  ``uniform``, ...), once;
* **eager**: each aten op outside the programs that launches (not a view or an
  allocation; a composite op by the ops it calls; :data:`WHOLE` once).

What the CPU would do otherwise is set to what CUDA does: inductor's ``cat`` lowering
(always copy kernels on a CPU; fused into its consumer where its rules allow on CUDA),
rlx's CUDA options (:data:`rlx.core.compiling.CUDA_INDUCTOR_OPTIONS`, no C++ wrapper, no
narrow-products pass, the clip's ``_foreach_norm``, the envs' fused draws
(:data:`rlx.envs._episodic.FUSED_DRAWS`); eagerly, Adam's dense coefficients:
:data:`rlx.members.optim.DENSE_COEFFICIENTS`), no micro-batch cut, the minibatch
updates as programs of their own (on CUDA the step's graph holds the epochs; no scan),
value passes uncut.

``--mode eager`` (what ``cudagraphs`` alone captures, CUDA's default; no Triton needed):
every op that reaches a device backend (:class:`_EagerOps`), a multi-tensor op on torch's
slow path as a kernel per tensor.

Counts, not times: they depend only on torch's version and rlx's code. Checked against an
H100's profile in docs/benchmarks.md ("Kernel launches counted on a CPU");
``tests/benchmarks/test_cuda_launches.py`` holds the eager counts.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import inspect
import json
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: aten ops that launch no kernel on CUDA (views, allocations, host reads).
NO_KERNEL = {"aten::" + name for name in (
    "select", "slice", "view", "reshape", "as_strided", "expand", "t", "transpose", "unsqueeze", "squeeze",
    "detach", "alias", "empty", "empty_strided", "empty_like", "resolve_conj", "resolve_neg", "lift_fresh",
    "_reshape_alias", "permute", "unbind", "split", "narrow", "item", "_local_scalar_dense", "set_",
    "_unsafe_view", "as_strided_", "lift_fresh_copy")}
GEMMS = ("mm", "addmm", "bmm", "baddbmm")
#: Ops counted once outside the programs, whatever a CPU runs for them: multi-tensor ops
#: (one multi-tensor kernel on CUDA, a loop of per-tensor ops on a CPU) and ``randperm``.
WHOLE = ("aten::_foreach_", "aten::randperm")
#: Backend ops of an eager phase that launch nothing on CUDA (metadata, host scalars).
#: ``scalar_tensor``: a Python number made a tensor for an op (``torch.where(c, x, 0)``),
#: on the host.
HOST_ONLY = {"aten::" + name for name in ("sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_nonzero",
                                          "resize_", "equal", "is_same_size", "scalar_tensor")}
REGION, PROGRAM = "Torch-Compiled Region", "## Call CompiledFxGraph"
ALLOC = "cuda_launches: a zeroed buffer"  # the emulation's own ops, not counted

counts: collections.Counter[str] = collections.Counter()
counting = False


class _Kernel:
    """A generated Triton kernel that counts its launches instead of running."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, *args, **kwargs) -> None:
        if counting:
            counts["triton " + self.name] += 1


def emulate_cuda(options: dict | None = None, per_gradient_norms: bool = False) -> None:
    """Inductor's CPU programs scheduled as CUDA ones, compiled but not run (module doc);
    ``options`` added to inductor's; ``per_gradient_norms``: the clip as compiled for a CPU."""
    import torch._inductor.codegen.triton as codegen_triton
    import torch.utils._triton as utils_triton
    from torch._inductor import async_compile, config, lowering
    from torch._inductor.select_algorithm import extern_kernels

    from rlx.core import compiling

    config.compile_threads = 1
    config.fx_graph_cache = False  # the patches below are not in its key
    utils_triton.triton_hash_with_backend = codegen_triton.triton_hash_with_backend = lambda: "no-driver"
    async_compile.AsyncCompile.triton = lambda self, name, source, device_str="cuda": _Kernel(name)
    def zeroed(size, stride, dtype):
        with torch.profiler.record_function(ALLOC):
            return torch.empty_strided(size, stride, dtype=dtype).zero_()

    torch._C._dynamo.guards._empty_strided_cpu = zeroed
    for name in GEMMS:
        gemm = getattr(extern_kernels, name)

        def counted(*args, _gemm=gemm, _name=name, **kwargs):
            if counting:
                counts["gemm " + _name] += 1
            return _gemm(*args, **kwargs)

        setattr(extern_kernels, name, counted)
    # cat: the CUDA rule (inductor always makes copy kernels for a CPU's cat).
    cat = lowering.cat
    while hasattr(cat, "__wrapped__"):
        cat = cat.__wrapped__
    source = textwrap.dedent(inspect.getsource(cat))
    source = source[source.index("def cat("):]
    cpu_rule = 'cpu_device = inputs[0].get_device().type == "cpu"'
    if cpu_rule not in source:
        raise RuntimeError("inductor's cat lowering changed: update emulate_cuda()")
    namespace: dict = {}
    exec(  # noqa: S102 (inductor's own source, one line changed)
        compile(source.replace(cpu_rule, "cpu_device = False"), lowering.__file__, "exec"), lowering.__dict__, namespace)
    cat.__code__ = namespace["cat"].__code__
    compiling.CPU_INDUCTOR_OPTIONS = {"cpu_backend": "triton", "allow_buffer_reuse": False,
                                      **getattr(compiling, "CUDA_INDUCTOR_OPTIONS", {}), **(options or {})}
    compiling.NARROW_PRODUCTS = False
    import rlx.members.ops as member_ops

    if not per_gradient_norms:  # CUDA's choice in the clip
        member_ops.PER_GRADIENT_NORMS = ()
    import rlx.envs._episodic as episodic

    episodic.FUSED_DRAWS = ("cpu",)  # CUDA's fresh states, drawn in the env step's kernel

    from rlx.core.stats import Stats

    to_host = Stats.to_host

    def all_finite(self, *args, **kwargs):  # the programs computed nothing: no host decision on it
        host = to_host(self, *args, **kwargs)
        for key in host:
            if "finite" in key:
                host[key] = 1.0
            elif "overflow" in key:
                host[key] = 0.0
        return host

    Stats.to_host = all_finite
    try:
        from rlx.algorithms.epochs import Epochs
    except ImportError:  # before the step's updates were scanned
        return
    if hasattr(Epochs, "scan_updates"):
        Epochs.scan_updates = lambda self: (None, "a CUDA device (emulated)")


def program_ops(prof) -> tuple[collections.Counter, collections.Counter]:
    """The aten ops that launch kernels: those a program calls itself (fallbacks; GEMMs
    are counted apart) and those outside every program (eager). Outside the programs an
    op counts where it launches: a composite op (``aten::linear``) by the ops it calls,
    those in :data:`WHOLE` once."""
    fallback: collections.Counter[str] = collections.Counter()
    eager: collections.Counter[str] = collections.Counter()
    for evt in prof.events():
        if not evt.name.startswith("aten::") or evt.name in NO_KERNEL:
            continue
        ancestors, parent = [], evt.cpu_parent
        while parent is not None:
            ancestors.append(parent.name)
            parent = parent.cpu_parent
        if ALLOC in ancestors:
            continue
        program = next((i for i, name in enumerate(ancestors) if name.startswith(PROGRAM)), None)
        if program is not None:  # inside a program: the ops it calls itself
            if not any(name.startswith("aten::") for name in ancestors[:program]) \
                    and evt.name.removeprefix("aten::") not in GEMMS:
                fallback[evt.name] += 1
            continue
        if any(name.startswith(WHOLE) for name in ancestors):
            continue  # inside an op counted once
        if evt.name.startswith(WHOLE) or not any(c.name.startswith("aten::") for c in evt.cpu_children):
            eager[evt.name] += 1
    return fallback, eager


class _EagerOps(TorchDispatchMode):
    """The aten ops an eager phase dispatches to a device backend, as CUDA would run them:
    composite ops (``linear``) as the ops they decompose into, each backend op once
    (``addmm``; a multi-tensor ``_foreach_*`` by :func:`_foreach_launches`), views and ops
    that only make or read metadata not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = "aten::" + func.overloadpacket.__name__
        if name.startswith("aten::_foreach_"):
            launches = _foreach_launches(args)
            self.counts[name if launches == 1 else name + " (a kernel per tensor)"] += launches
        elif not func.is_view and name not in NO_KERNEL and name not in HOST_ONLY:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def _foreach_launches(args) -> int:
    """A multi-tensor op's launches on CUDA: one multi-tensor kernel where its tensor
    lists pair tensors of one shape, stride and dtype (torch's fast path), else a kernel
    per tensor (its slow path: a list of broadcast views, say)."""
    lists = [a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
    first = lists[0]
    fast = all(len(other) == len(first) and all(
        x.shape == y.shape and x.stride() == y.stride() and x.dtype == y.dtype for x, y in zip(first, other))
        for other in lists[1:])
    return 1 if fast else len(first)


def count_iteration(num_envs: int, warmup: int = 2, compile: bool = True, members: int = 1) -> dict:
    """Launches of one collect() and one step() of vs_jax's PPO at ``num_envs`` (each
    member's, with ``members`` > 1), compiled or eager (what ``cudagraphs`` alone captures)."""
    from ppo_settings import PPOSettings

    config = PPOSettings(num_envs=num_envs, horizon=32, minibatches=4).rlx_config("cpu", compile=compile,
                                                                                  num_seeds=members)
    config = dataclasses.replace(config, micro_batch_size=0)  # CUDA: no cut
    from rlx.members import optim

    dense = optim.DENSE_COEFFICIENTS
    optim.DENSE_COEFFICIENTS = ("cpu",)  # CUDA's eager Adam (a compiled one ignores it)
    try:
        return _count(config, warmup, compile)
    finally:
        optim.DENSE_COEFFICIENTS = dense


def _count(config, warmup: int, compile: bool) -> dict:
    global counting
    from torch.profiler import ProfilerActivity, profile

    from rlx.envs import CartPole

    empty, empty_like = torch.empty, torch.empty_like
    torch.empty = lambda *a, **k: empty(*a, **k).zero_()  # the buffer: indices in range
    torch.empty_like = lambda *a, **k: empty_like(*a, **k).zero_()
    try:
        algo = config.build(CartPole)
    finally:
        torch.empty, torch.empty_like = empty, empty_like
    algo.policy.max_rows_per_pass = None  # CUDA: value passes uncut
    for _ in range(warmup):
        algo.collect()
        algo.step()
    phases = {}
    for phase in ("collect", "step"):
        counts.clear()
        counting = True
        if compile:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                getattr(algo, phase)()
            fallback, eager = program_ops(prof)
        else:
            fallback = collections.Counter()
            with _EagerOps() as ops:
                getattr(algo, phase)()
            eager = ops.counts
        counting = False
        kernels = collections.Counter(counts)
        kernels.update({"fallback " + k: v for k, v in fallback.items()})
        kernels.update({"eager " + k: v for k, v in eager.items()})
        by_kind = {kind: sum(v for k, v in kernels.items() if k.startswith(kind + " "))
                   for kind in ("triton", "gemm", "fallback", "eager")}
        phases[phase] = {"launches": sum(by_kind.values()), **by_kind, "kernels": kernels.most_common()}
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=4096, help="each member's, with --members")
    parser.add_argument("--members", type=int, default=1)
    parser.add_argument("--mode", choices=["compile", "eager"], default="compile",
                        help="eager: the ops that cudagraphs alone captures")
    parser.add_argument("--top", type=int, default=12, help="the most-launched kernels to print per phase")
    parser.add_argument("--out", default=None, help="append the counts as a JSON line")
    parser.add_argument("--inductor", default="{}", help="inductor options to add, as JSON (a value of "
                        "rlx's CUDA_INDUCTOR_OPTIONS replaced, e.g. '{\"max_pointwise_cat_inputs\": 8}')")
    parser.add_argument("--per-gradient-norms", action="store_true",
                        help="the clip's norms as compiled for a CPU (a reduction each), not _foreach_norm")
    args = parser.parse_args()
    torch.set_num_threads(1)
    options = json.loads(args.inductor)
    if args.mode == "compile":
        emulate_cuda(options, args.per_gradient_norms)
    phases = count_iteration(args.num_envs, compile=args.mode == "compile", members=args.members)
    for phase, row in phases.items():
        print(f"{phase}: {row['launches']} launches (triton {row['triton']}, gemm {row['gemm']}, "
              f"fallback {row['fallback']}, eager {row['eager']})")
        for name, n in row["kernels"][: args.top]:
            print(f"  {n:>5}  {name[:110]}")
    if args.out:
        from common import run_fields

        with open(args.out, "a") as f:
            f.write(json.dumps({"bench": "cuda_launches", "num_envs": args.num_envs, "members": args.members,
                                "mode": args.mode, "inductor": options,
                                "per_gradient_norms": args.per_gradient_norms, **run_fields(), **phases}) + "\n")


if __name__ == "__main__":
    main()
