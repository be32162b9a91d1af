"""``check_env``: the first thing to run on a new env (also ``rlx check-env module:Class``)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from rlx.env import (
    FINAL_OBS,
    OBS,
    TERMINATED,
    TRUNCATED,
    EnvOutputError,
    canonical_device,
    check_env_limits,
    check_obs,
    check_step_output,
)

__all__ = ["check_env"]


def _leaves(x: Any, name: str) -> list[tuple[str, torch.Tensor]]:
    if isinstance(x, TensorDictBase):
        return [
            (f"{name}.{'.'.join(k) if isinstance(k, tuple) else k}", v)
            for k, v in x.items(include_nested=True, leaves_only=True)
        ]
    return [(name, x)] if isinstance(x, torch.Tensor) else []


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, TensorDictBase):
        return all(torch.equal(x, b.get(k)) for k, x in a.items(include_nested=True, leaves_only=True))
    return torch.equal(a, b)


def check_env(
    env_cls: Any,
    num_envs: int = 4,
    *,
    steps: int = 300,
    device: str | torch.device = "cpu",
    horizon: int | None = None,
    verbose: bool = True,
) -> list[str]:
    """Check an env class against rlx's protocol and say, in plain words, what is wrong.

    Runs the checks ``build()`` runs (observation, reward and flag keys, shapes and
    dtypes against the specs) on every step of a ``steps``-long random-action rollout,
    plus:

    * every returned tensor is on the env's device, and observations keep the spec's dtype;
    * ``final_obs`` is present whenever ``truncated`` is returned;
    * auto-reset: a sub-env that ended starts a new episode in the same step (``obs``
      differs from ``final_obs``), rather than staying in its terminal state;
    * no NaN or inf in observations and rewards.

    Args:
        env_cls: The env class or factory.
        num_envs: Sub-envs to build.
        steps: Random-action steps to take.
        device: Device to build the env on.
        horizon: Passed to the constructor.
        verbose: Print the findings.

    Returns:
        The problems found (empty when the env passes).
    """
    problems: list[str] = []
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"check_env: steps must be an int >= 1, got {steps!r}")
    device = canonical_device(device)
    name = getattr(env_cls, "__name__", repr(env_cls))
    try:
        check_env_limits(env_cls, num_envs, horizon)
        env = env_cls(num_envs, horizon, device=device)
    except Exception as e:  # the constructor is user code: report whatever it raises
        problems.append(f"{name}({num_envs}, device={device}) failed: {type(e).__name__}: {e}")
        return _report(name, problems, verbose)
    for attr in ("observation_spec", "action_spec"):
        if not hasattr(env, attr):
            problems.append(f"{name} has no {attr} attribute (a torchrl spec of ONE sub-env)")
    if problems:
        return _report(name, problems, verbose)
    obs_spec = env.observation_spec

    def check_leaves(out: Any, where: str) -> None:
        for key, tensor in _leaves(out, where):
            if canonical_device(tensor.device) != device:
                problems.append(f"{key} is on {tensor.device}, but the env was built on {device}")
            elif tensor.is_floating_point() and not torch.isfinite(tensor).all():
                problems.append(f"{key} holds NaN or inf")

    try:
        obs = env.reset()
        check_obs(obs, obs_spec, num_envs, where=f"{name}.reset()")
        check_leaves(obs, f"{name}.reset() obs")
    except EnvOutputError as e:
        problems.append(str(e))
        return _report(name, problems, verbose)

    ended = 0
    stuck = 0
    for t in range(steps):
        actions = env.action_spec.rand((num_envs,)).to(device)
        out = env.step(actions)
        where = f"{name}.step() at step {t}"
        try:
            check_step_output(out, obs_spec, num_envs, where=where)
        except EnvOutputError as e:
            problems.append(str(e))
            break
        check_leaves(out, where)
        done = torch.zeros(num_envs, dtype=torch.bool, device=device)
        for key in (TERMINATED, TRUNCATED):
            if key in out.keys():
                done |= out.get(key).squeeze(-1)
        if done.any() and FINAL_OBS in out.keys():
            ended += int(done.sum())
            idx = done.nonzero().squeeze(-1)  # SYNC: a checker, not a training loop
            if _same(out.get(OBS)[idx], out.get(FINAL_OBS)[idx]):
                stuck += 1
        if problems:
            break
    if stuck:
        problems.append(
            f"{name} does not auto-reset: in {stuck} step(s), sub-envs that ended returned their final "
            "observation as 'obs'; 'obs' must be the first observation of the next episode and 'final_obs' the last"
        )
    if ended == 0 and TERMINATED in out.keys() and not problems and verbose:
        print(f"note: no episode ended in {steps} random steps, so auto-reset was not exercised")
    return _report(name, problems, verbose)


def _report(name: str, problems: list[str], verbose: bool) -> list[str]:
    if verbose:
        if problems:
            print(f"{name}: {len(problems)} problem(s)")
            for p in problems:
                print(f"  - {p}")
        else:
            print(f"{name}: passes rlx's env checks")
    return problems
