"""Trained policies for deployment: load from a run, call on observations, export.

``rlx.load_policy(path)`` returns a :class:`DeployedPolicy`: a plain ``nn.Module`` that
maps a batch of raw observations to env actions (the distribution's mode by default),
with the observation normalizer inside. ``rlx export RUN_DIR --out policy.pt`` writes
it as TorchScript, which ``torch.jit.load`` runs with no rlx installed.

A recurrent policy (``algorithm: recurrent_ppo``) loads as a
:class:`DeployedRecurrentPolicy`, which carries the state explicitly:
``actions, state = policy(obs, state, resets)``, starting from
``policy.initial_state(B)`` with ``resets`` True at each sub-env's first step. Its
TorchScript export has the same ``forward``; as a step with ``resets`` True ignores the
state it is given, any tensor of the state's shape (zeros) starts an episode there.

``rlx export RUN_DIR --format onnx`` (:func:`export_onnx`) writes the same deterministic
policy as an ONNX graph for robots and inference runtimes: raw observations in (one
named input per entry of a Composite observation), env actions out, normalizer inside.
"""

from __future__ import annotations

import copy
import importlib
import zipfile
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor, nn
from torchrl.data import Composite

from rlx.run.checkpoint import checkpoint_path, load_checkpoint, newest_readable_checkpoint
from rlx.policy import PolicyBase, RecurrentPolicy
from rlx.config.run import ALGORITHMS, env_factory
from rlx.core.yaml_types import config_from_dict

__all__ = [
    "DeployedPolicy",
    "DeployedRecurrentPolicy",
    "export_onnx",
    "export_torchscript",
    "load_policy",
    "policy_from_checkpoint",
]


class DeployedPolicy(nn.Module):
    """Observations to env actions, with the observation normalizer inside.

    Args:
        policy: The trained policy (copied; later training does not change this one).
        deterministic: Act with the distribution's mode; ``False`` samples.
    """

    def __init__(self, policy: PolicyBase, *, deterministic: bool = True) -> None:
        super().__init__()
        self.policy = copy.deepcopy(policy).eval()
        for p in self.policy.parameters():
            p.requires_grad_(False)
        self.deterministic = deterministic

    @torch.no_grad()
    def forward(self, obs: Any) -> Tensor:
        """``[N, *obs]`` raw observations to ``[N, *action]`` env actions (the actor alone)."""
        return self.policy.sample_actions(obs, deterministic=self.deterministic).env_actions


class DeployedRecurrentPolicy(DeployedPolicy):
    """Observations and a carried state to env actions and the next state.

    Args:
        policy: The trained recurrent policy (copied).
        deterministic: Act with the distribution's mode; ``False`` samples.
    """

    policy: RecurrentPolicy

    @torch.no_grad()
    def initial_state(self, batch_size: int) -> Tensor:
        """The state of ``batch_size`` sub-envs at the start of an episode, ``[B, *state]``."""
        return self.policy.initial_state(batch_size)

    @torch.no_grad()
    def forward(self, obs: Any, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """One step: ``[N, *obs]`` raw observations, ``[N, *state]`` states and ``[N]`` bool
        resets (True at an episode's first step) to ``[N, *action]`` env actions and the
        next states."""
        step = self.policy.act_step(obs, state, resets, deterministic=self.deterministic)
        return step.env_actions, step.state


def policy_from_checkpoint(
    path: str | Path, *, device: str | torch.device = "cpu", seed: int | None = None
) -> tuple[PolicyBase, dict[str, Any]]:
    """Rebuild the trained :class:`~rlx.policy.Policy` of a run directory or checkpoint.

    Builds one sub-env of the run's env class to read its specs, then the policy from
    the recorded config, then loads the trained weights and normalizer statistics.

    Args:
        seed: For a run of ``num_seeds > 1``: which seed's agent (``0 <= seed <
            num_seeds``), as a single-seed policy. A one-seed run takes ``None`` (or 0).

    Returns:
        ``(policy, run_config_dict)``.

    Raises:
        ValueError: a multi-seed run without ``seed``, or a ``seed`` out of range.
    """
    # A run directory: its newest checkpoint that loads (as --resume picks it).
    state = newest_readable_checkpoint(path)[1] if Path(path).is_dir() else load_checkpoint(checkpoint_path(path))
    run = state["config"]
    algo_config = config_from_dict(ALGORITHMS[run["algorithm"]], run["config"], where="checkpoint config")
    num_seeds = getattr(algo_config, "num_seeds", 1)
    if num_seeds > 1 and seed is None:
        raise ValueError(f"{path}: this run trained {num_seeds} members; pick one with --member i (0 <= i < {num_seeds}) or --best")
    if seed is not None and not 0 <= seed < num_seeds:
        raise ValueError(f"{path}: seed {seed} is not in [0, {num_seeds}): the run trained {num_seeds} seed(s)")
    env = env_factory(run["env"], run.get("env_kwargs"))(1, None, device=torch.device(device))

    def build(model_cls: Any, model_config: dict[str, Any] | None, seeds: int = 1) -> PolicyBase:
        return algo_config.algorithm_cls.policy_cls(
            env.observation_spec,
            env.action_spec,
            model_cls=model_cls,
            model_config=model_config,
            distribution_cls=algo_config.distribution_cls,
            normalize_obs=algo_config.normalize_obs,
            device=device,
            obs_groups=algo_config.obs_groups,
            num_seeds=seeds,
        )

    if num_seeds == 1:
        policy = build(algo_config.model_cls, algo_config.model_config)
        policy.load_state_dict(state["algorithm"]["policy"])
        return policy, run
    from rlx.members.stacked import stacked_model_cls

    policy_cls = algo_config.algorithm_cls.policy_cls
    stacked = build(algo_config.model_cls or stacked_model_cls(policy_cls.default_model_cls),
                    {**(algo_config.model_config or {}), "num_seeds": num_seeds}, num_seeds)
    stacked.load_state_dict(state["algorithm"]["policy"])
    policy = build(None, algo_config.model_config)  # one agent: the single-seed model
    policy.load_member_(stacked, seed)
    return policy, run


def _is_torchscript(path: Path) -> bool:
    if not path.is_file() or not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(name.endswith("constants.pkl") for name in archive.namelist())


def load_policy(
    path: str | Path, *, deterministic: bool = True, device: str | torch.device = "cpu", seed: int | None = None
) -> nn.Module:
    """Load a trained policy as a callable module: observations in, env actions out.

    Args:
        path: A run directory (its newest checkpoint), a checkpoint file, or a
            TorchScript file written by ``rlx export``.
        deterministic: Take the distribution's mode (ignored for TorchScript files,
            which are exported deterministic).
        device: Where the module's parameters go.
        seed: Which seed of a multi-seed run (see :func:`policy_from_checkpoint`).
    """
    path = Path(path)
    if _is_torchscript(path):
        return torch.jit.load(str(path), map_location=device)
    policy, _ = policy_from_checkpoint(path, device=device, seed=seed)
    if policy.recurrent:
        return DeployedRecurrentPolicy(policy, deterministic=deterministic)
    return DeployedPolicy(policy, deterministic=deterministic)


def export_torchscript(path: str | Path, out: str | Path, *, batch_size: int = 2, seed: int | None = None) -> Path:
    """Trace the deterministic policy of a run into a TorchScript file.

    Raises:
        ValueError: the env's observations are a ``Composite`` (dict); tracing takes
            tensors only, so use :func:`load_policy` for such policies.
    """
    policy, _ = policy_from_checkpoint(path, seed=seed)
    if not isinstance(policy.observation_spec.zero(), Tensor):
        raise ValueError("rlx export supports tensor observations only; load dict-observation policies with rlx.load_policy")
    if policy.recurrent:
        module: DeployedPolicy = DeployedRecurrentPolicy(policy, deterministic=True)

        def inputs(n: int) -> tuple[Tensor, ...]:
            # Random states and a mix of resets, so the trace keeps both paths.
            resets = torch.arange(n) % 2 == 0
            return policy.observation_spec.rand((n,)), torch.randn_like(module.initial_state(n)), resets
    else:
        module = DeployedPolicy(policy, deterministic=True)

        def inputs(n: int) -> tuple[Tensor, ...]:
            return (policy.observation_spec.rand((n,)),)

    traced = torch.jit.trace(module, inputs(batch_size), check_trace=False)
    probe = inputs(batch_size + 3)
    got, expected = traced(*probe), module(*probe)
    if isinstance(expected, Tensor):
        got, expected = (got,), (expected,)
    if not all(torch.equal(a, b) for a, b in zip(got, expected)):
        raise RuntimeError("the traced policy disagrees with the eager one; export is not safe for this model")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    traced.save(str(out))
    return out


class _OnnxInputs(nn.Module):
    """A deployed policy called with plain tensors, one per input of the ONNX graph: a
    Composite observation's top-level entries are put back into a TensorDict inside."""

    def __init__(self, deployed: DeployedPolicy, obs_keys: list[str] | None) -> None:
        super().__init__()
        self.deployed, self.obs_keys = deployed, obs_keys

    def forward(self, *inputs: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        n = len(self.obs_keys) if self.obs_keys is not None else 1
        obs: Any = inputs[0]
        if self.obs_keys is not None:
            obs = TensorDict(dict(zip(self.obs_keys, inputs[:n])), batch_size=[inputs[0].shape[0]])
        return self.deployed(obs, *inputs[n:])


def _onnx_obs_keys(policy: PolicyBase) -> list[str] | None:
    """The top-level keys acting reads (the ONNX inputs), or ``None`` for a tensor."""
    spec = policy.observation_spec
    keys = policy.actor_obs_keys
    if keys is None:
        return None
    nested = [k for k in keys if isinstance(spec[k], Composite)]
    if nested:
        raise ValueError(f"ONNX export takes top-level observation entries; {nested} are nested Composites")
    return keys


def export_onnx(policy: PolicyBase | str | Path, out: str | Path, *, check_rows: int = 4096, seed: int | None = None) -> Path:
    """Write the deterministic policy as an ONNX graph for deployment (``pip install 'rlx[onnx]'``).

    Inputs are raw observations, the normalizer is inside, and the outputs are env
    actions (the distribution's mode, clipped or squashed as the env receives them):

    * a tensor observation: input ``obs [N, *obs]``, output ``actions [N, *action]``;
    * a ``Composite`` observation: one input per top-level entry the actor reads (its
      ``obs_groups`` group, ``action_mask`` included), named by its key, in sorted order;
    * a recurrent policy: the same, then inputs ``state [N, *state]`` and ``resets [N]``
      (bool, True at an episode's first step), and outputs ``actions`` and ``next_state``.

    The batch dimension ``N`` is dynamic. When ``onnxruntime`` is installed the written
    file is run on ``check_rows`` random observations and compared with the eager policy.

    Args:
        policy: A trained policy, or a run directory / checkpoint to load it from.
        out: The ``.onnx`` file to write.
        check_rows: Observations of the check (0: no check).
        seed: Which seed of a multi-seed run (see :func:`policy_from_checkpoint`).

    Raises:
        ValueError: nested Composite observations, a recurrent policy over a Composite
            observation, or an exported graph that disagrees with the eager policy.
    """
    _require_onnx()
    if not isinstance(policy, PolicyBase):
        policy, _ = policy_from_checkpoint(policy, seed=seed)
    keys = _onnx_obs_keys(policy)
    if keys is not None and policy.recurrent:
        # torch.export cannot yet trace a TensorDict reshaped over a symbolic batch, which
        # the recurrent models do with [B, L] observations.
        raise ValueError("ONNX export of a recurrent policy with a Composite observation is not supported yet; "
                         "deploy it with rlx.load_policy, or flatten the observation into one tensor")
    deployed = DeployedRecurrentPolicy(policy) if policy.recurrent else DeployedPolicy(policy)
    module = _OnnxInputs(deployed, keys).eval()
    obs_names = keys or ["obs"]
    in_names = obs_names + (["state", "resets"] if policy.recurrent else [])
    out_names = ["actions", "next_state"] if policy.recurrent else ["actions"]
    batch = torch.export.Dim("batch")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # One self-contained file (weights inside), which is what gets copied to a robot; a
    # weights file beside it is only needed past protobuf's 2 GB, far beyond any policy.
    weight_bytes = sum(t.numel() * t.element_size() for t in module.state_dict().values())
    torch.onnx.export(
        module, _onnx_example(policy, deployed, keys, 3), str(out), input_names=in_names, output_names=out_names,
        dynamo=True, dynamic_shapes=(tuple({0: batch} for _ in in_names),), verbose=False,  # forward(*inputs)
        external_data=weight_bytes > _ONNX_INLINE_BYTES,
    )
    if check_rows:
        _check_onnx(out, module, _onnx_example(policy, deployed, keys, check_rows), in_names)
    return out


#: Policies up to this many bytes of weights are written as one ``.onnx`` file.
_ONNX_INLINE_BYTES = 1 << 30


def _require_onnx() -> None:
    """Fail before any work when the ``onnx`` extra is missing, naming the extra."""
    missing = []
    for name in ("onnx", "onnxscript"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ImportError(f"ONNX export needs {' and '.join(missing)}: pip install 'rlx[onnx]'")


def _onnx_example(policy: PolicyBase, deployed: DeployedPolicy, keys: list[str] | None, n: int) -> tuple[Tensor, ...]:
    obs = policy.observation_spec.rand((n,))
    inputs = tuple(obs.get(k) for k in keys) if keys is not None else (obs,)  # the actor's keys only
    if policy.recurrent:  # random states and a mix of resets: both paths run
        inputs += (torch.randn_like(deployed.initial_state(n)), torch.arange(n) % 3 == 0)
    return inputs


def _check_onnx(path: Path, module: nn.Module, inputs: tuple[Tensor, ...], names: list[str]) -> None:
    """Run the file in onnxruntime (when installed) against the eager module."""
    try:
        import onnxruntime
    except ImportError:
        return
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {name: x.numpy() for name, x in zip(names, inputs)})
    with torch.no_grad():
        expected = module(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for name, a, b in zip(("actions", "next_state"), got, expected):
        error = (torch.from_numpy(a).double() - b.double()).abs().max().item() if b.numel() else 0.0  # SYNC: export check, CPU
        if not error <= 1e-4:
            raise ValueError(f"the ONNX graph's '{name}' differs from the eager policy's by {error:.3g}")
