"""``compile`` and ``cudagraphs`` default to ``"auto"``, resolved once at build
(:mod:`rlx.algorithms.modes`): what each resolves to, and why, for each config, device
and run length. The device is an argument of :func:`resolve_modes`, so CUDA's choices
are tested here on a CPU; ``tests/test_gpu.py`` runs the graphed default on CUDA."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from rlx import AlgorithmConfig, ConfigError, NPGConfig, RecurrentAlgorithmConfig
from rlx.algorithms.modes import COMPILE_PAYS_AFTER, resolve_modes, run_length
from rlx.envs import CartPole

CUDA, CPU = torch.device("cuda"), torch.device("cpu")
BASE = dict(num_envs=16, horizon=8, device="cpu", seed=0)


def test_the_defaults_are_auto_and_resolve_to_eager_on_a_cpu() -> None:
    config = AlgorithmConfig(**BASE)
    assert config.compile == "auto" and config.cudagraphs == "auto" and NPGConfig(**BASE).compile == "auto"
    algo = config.build(CartPole)
    assert not algo.compiles and not algo.uses_cuda_graphs
    assert algo.compile_fallback is None and algo.prepare == algo.prepared_batch  # nothing compiled
    assert algo.modes.notes["cudagraphs"] == "off (auto: needs a CUDA device, got cpu)"
    assert algo.modes.notes["compile"].startswith("off (auto: a run of unknown length")


def test_a_mode_is_true_false_or_auto() -> None:
    with pytest.raises(ConfigError, match="AlgorithmConfig.compile: must be true, false or 'auto', got 'yes'"):
        AlgorithmConfig(**BASE, compile="yes")
    with pytest.raises(ConfigError, match="NPGConfig.compile: must be true, false or 'auto'"):
        NPGConfig(**BASE, compile=1)
    algo = AlgorithmConfig(**BASE, compile=True).build(CartPole)
    assert algo.compiles and algo.modes.notes["compile"] == "on"


@pytest.mark.parametrize(
    "extra, why",
    [
        ({}, None),
        ({"enable_amp": True}, None),  # bf16 (this GPU computes it: the test below asks)
        # One step graph holds accumulated gradients and unequal minibatches as they are;
        # not run on a GPU yet: True opts in. A graph per minibatch update cannot.
        ({"accumulate_grads": True, "sgd_minibatch_size": 32}, "accumulate_grads is captured only with cudagraphs=True"),
        ({"accumulate_grads": True, "sgd_minibatch_size": 32, "cudagraphs_scope": "minibatch"},
         'cannot be combined with accumulate_grads with cudagraphs_scope="minibatch"'),
        ({"optimizer_cls": torch.optim.SGD}, "needs optimizer_cls torch.optim.Adam or AdamW"),
        ({"sgd_minibatch_size": 48}, "unequal minibatches is captured only with cudagraphs=True"),
        ({"sgd_minibatch_size": 48, "cudagraphs_scope": "minibatch"},
         'needs equal minibatches with cudagraphs_scope="minibatch" ("step" does not): sgd_minibatch_size=48 must divide'),
        ({"rnd": {}}, "rnd's predictor step is captured only with cudagraphs=True"),  # until a GPU has run it
    ],
    ids=["graphed", "amp", "accumulate", "accumulate_per_minibatch", "sgd", "unequal", "unequal_per_minibatch", "rnd"],
)
def test_auto_graphs_on_cuda_wherever_a_capture_is_correct(extra: dict, why: str | None, bf16_gpu) -> None:
    """On CUDA ``"auto"`` captures exactly the configs ``cudagraphs=True`` accepts, and names
    the field that rules the others out (what ``True`` would refuse them with)."""
    config = AlgorithmConfig(**BASE, **extra)
    modes = resolve_modes(config, CUDA, 1, False, captures=True)
    assert modes.cudagraphs == (why is None)
    if why is None:
        assert modes.notes["cudagraphs"] == "on (auto)"
        assert AlgorithmConfig(**BASE, **extra, cudagraphs=True).cudagraphs is True  # accepted
    else:
        assert why in modes.notes["cudagraphs"]
        if "captured only with cudagraphs=True" in why:  # not run on a GPU yet: True opts in
            assert resolve_modes(AlgorithmConfig(**BASE, **extra, cudagraphs=True), CUDA, 1, False, captures=True).cudagraphs
            return
        with pytest.raises(ConfigError, match="cudagraphs"):
            AlgorithmConfig(**BASE, **extra, cudagraphs=True)


@pytest.fixture
def bf16_gpu(monkeypatch):
    """Whether the (pretend) GPU autocasts to bf16: set ``.value``."""
    from rlx.members import axis

    class Answer:
        value = True

    monkeypatch.setattr(axis, "autocasts_bf16", lambda device: device.type != "cuda" or Answer.value)
    return Answer


def test_auto_graphs_bf16_amp_and_falls_back_by_name_where_the_gpu_autocasts_to_float16(bf16_gpu) -> None:
    """bf16 AMP needs no loss scale and reads nothing back, so its update is captured; a
    GPU before Ampere autocasts to float16 with a ``GradScaler``, whose scale the host
    reads: ``"auto"`` falls back there, naming why, and ``True`` is refused at build."""
    config = AlgorithmConfig(**BASE, enable_amp=True)
    assert resolve_modes(config, CUDA, 1, False, captures=True).cudagraphs
    bf16_gpu.value = False
    modes = resolve_modes(config, CUDA, 1, False, captures=True)
    assert not modes.cudagraphs and "needs bf16 for enable_amp" in modes.notes["cudagraphs"]
    with pytest.raises(ConfigError, match="AlgorithmConfig.cudagraphs: needs bf16 for enable_amp"):
        resolve_modes(AlgorithmConfig(**BASE, enable_amp=True, cudagraphs=True), CUDA, 1, False, captures=True)
    assert resolve_modes(AlgorithmConfig(**BASE), CUDA, 1, False, captures=True).cudagraphs  # no AMP: graphed


def test_auto_leaves_cuda_graphs_off_where_the_run_cannot_capture() -> None:
    config = AlgorithmConfig(**BASE)
    assert "torch.distributed" in resolve_modes(config, CUDA, 2, False, captures=True).notes["cudagraphs"]
    # A recurrent policy's capture, tested on a CPU only so far: "auto" leaves it off on
    # CUDA, naming why, and True opts in (on a CPU True is refused as for any policy).
    note = resolve_modes(config, CUDA, 1, True, captures=True).notes["cudagraphs"]
    assert not resolve_modes(config, CUDA, 1, True, captures=True).cudagraphs and "a recurrent policy" in note
    assert resolve_modes(RecurrentAlgorithmConfig(**BASE, cudagraphs=True), CUDA, 1, True, captures=True).cudagraphs
    recurrent = RecurrentAlgorithmConfig(**BASE).build(CartPole)
    assert not recurrent.uses_cuda_graphs and not recurrent.compiles
    with pytest.raises(ConfigError, match="RecurrentAlgorithmConfig.cudagraphs: needs a CUDA device"):
        RecurrentAlgorithmConfig(**BASE, cudagraphs=True).build(CartPole)
    npg = resolve_modes(NPGConfig(**BASE), CUDA, 1, False, captures=False)  # no captured update: no field
    assert not npg.cudagraphs and "cudagraphs" not in npg.notes


@pytest.mark.parametrize("device", [CPU, CUDA], ids=["cpu", "cuda"])
def test_auto_compiles_where_the_run_is_long_enough_to_pay_for_it(device: torch.device) -> None:
    config, pays = AlgorithmConfig(**BASE), COMPILE_PAYS_AFTER[device.type]
    for steps, expected in ((None, False), (pays - 1, False), (pays, True)):
        with run_length(steps):
            modes = resolve_modes(config, device, 1, False, captures=True)
        assert modes.compile == expected, (steps, modes.notes)
    assert not resolve_modes(config, device, 1, False, captures=True).compile  # the context ended
    assert resolve_modes(AlgorithmConfig(**BASE, compile=False), device, 1, False, captures=True).notes["compile"] == "off"
    with run_length(COMPILE_PAYS_AFTER["cpu"]):
        algo = AlgorithmConfig(**BASE).build(CartPole)
    assert algo.compiles and algo.prepare != algo.prepared_batch


def test_auto_compiles_recurrent_distributed_and_rnd_runs_on_a_cpu_and_on_cuda_only_when_asked() -> None:
    """A recurrent policy's, a torch.distributed run's and RND's programs compile and are
    tested on a CPU; on CUDA no GPU has run them yet, so ``"auto"`` leaves them off there,
    saying why, and ``compile=True`` opts in."""
    config, pays = AlgorithmConfig(**BASE), 10 * COMPILE_PAYS_AFTER["cuda"]
    with run_length(pays):
        for world_size, recurrent, extra, what in ((2, False, {}, "torch.distributed run"),
                                                   (1, True, {}, "recurrent policy"), (1, False, {"rnd": {}}, "rnd")):
            assert resolve_modes(AlgorithmConfig(**BASE, **extra), CPU, world_size, recurrent, captures=True).compile
            modes = resolve_modes(AlgorithmConfig(**BASE, **extra), CUDA, world_size, recurrent, captures=True)
            assert not modes.compile and what in modes.notes["compile"], modes.notes
            assert resolve_modes(AlgorithmConfig(**BASE, **extra, compile=True), CUDA, world_size, recurrent,
                                 captures=True).compile
        assert resolve_modes(config, CUDA, 1, False, captures=True).compile


@pytest.mark.parametrize("num_envs, micro, compiles", [(256, None, True), (512, None, False), (512, 4096, True),
                                                      (4096, 0, True)])
def test_auto_leaves_npg_eager_on_a_cpu_where_its_natural_step_would_unroll_many_passes(num_envs, micro,
                                                                                      compiles) -> None:
    """NPG's natural step unrolls its passes (64 at 131k rows did not compile in 20
    minutes): ``"auto"`` compiles it on a CPU up to 8 passes (256 envs x 64 steps = 16384
    rows: 8 of the 2048-row default; 32768 rows: 16; 32768 rows in passes of 4096: 8; no
    passes), naming the passes where it does not; on CUDA, where no passes are cut, it
    compiles."""
    config = NPGConfig(num_envs=num_envs, horizon=64, micro_batch_size=micro)
    with run_length(10 * COMPILE_PAYS_AFTER["cuda"]):
        cpu, cuda = (resolve_modes(config, device, 1, False, captures=True) for device in (CPU, CUDA))
    assert cpu.compile == compiles and cuda.compile
    if not compiles:
        assert "16 passes of 2048 rows" in cpu.notes["compile"], cpu.notes


def test_rlx_train_says_which_modes_it_chose(tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlx", "train", "configs/cartpole_ppo.yaml", "--run-dir", str(tmp_path / "run"),
         "--set", "trainer.max_env_steps=4096", "--set", "config.num_envs=8"],
        capture_output=True, text=True, check=True,
    ).stdout
    line = next(line for line in out.splitlines() if line.startswith("modes: "))
    assert "compile off (auto: a run of 4.1e+03 env steps; compiling pays past 3e+06 on cpu)" in line
    assert "cudagraphs off (auto: needs a CUDA device, got cpu)" in line


def test_a_students_step_compiles_and_captures_on_cuda_only_when_asked() -> None:
    """Distillation's compiled and captured step is tested on a CPU only so far: on CUDA
    ``"auto"`` leaves both off, naming it; ``True`` opts in; on a CPU ``"auto"`` compiles
    a run long enough to pay for it, as PPO's."""
    from rlx import DistillationConfig

    config = dict(teacher="runs/teacher", num_envs=16, horizon=16)
    with run_length(10 * COMPILE_PAYS_AFTER["cuda"]):
        assert resolve_modes(DistillationConfig(**config), CPU, 1, False, captures=True).compile
        modes = resolve_modes(DistillationConfig(**config), CUDA, 1, False, captures=True)
    assert not modes.compile and "distillation's step" in modes.notes["compile"]
    assert not modes.cudagraphs and "distillation's step is captured only with cudagraphs=True" in modes.notes["cudagraphs"]
    opted = resolve_modes(DistillationConfig(**config, compile=True, cudagraphs=True), CUDA, 1, False, captures=True)
    assert opted.compile and opted.cudagraphs
    with pytest.raises(ConfigError, match="DistillationConfig.cudagraphs: cannot be combined with enable_amp"):
        DistillationConfig(**config, cudagraphs=True, enable_amp=True)
