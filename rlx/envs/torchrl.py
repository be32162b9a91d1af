"""TorchRL envs as rlx envs (:class:`TorchRLEnv`), and rlx envs as TorchRL envs (:func:`to_torchrl`).

TorchRL steps into ``"next"`` and resets finished sub-envs in a separate, partial
``reset``; rlx's protocol auto-resets inside ``step``. The adapters translate exactly:

* :class:`TorchRLEnv` calls ``step_and_maybe_reset``: the ``"next"`` observation of a
  finished sub-env becomes ``final_obs`` and the reset observation ``obs``. TorchRL's
  ``terminated`` key gives ``terminated``; ``truncated`` (or ``done`` without
  ``terminated``) gives ``truncated``.
* :func:`to_torchrl` reports an rlx env's ``final_obs`` as the ``"next"`` observation and
  hands out the auto-reset observation when TorchRL resets those sub-envs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from rlx.env import Env

__all__ = ["TorchRLEnv", "to_torchrl"]


class TorchRLEnv(Env):
    """A TorchRL ``EnvBase`` with batch size ``[B]`` behind rlx's env protocol.

    Args:
        num_envs: ``B``.
        horizon: Unused (the env constructor protocol).
        device: Where the env runs.
        make_env: ``make_env(num_envs, device) -> EnvBase`` with batch size ``[B]``.
        obs_keys: Observation entries to expose (default: every entry of the env's
            observation spec). One key gives a tensor observation; several give a
            ``Composite``.
        reset_input: Optional ``reset_input(env, num_envs) -> TensorDict`` passed to the
            first ``reset`` (for batch-unlocked envs such as TorchRL's ``PendulumEnv``,
            whose batch comes from the reset's parameters).
    """

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        device: torch.device | str = "cpu",
        make_env: Callable[[int, torch.device], EnvBase] | None = None,
        obs_keys: list[str] | None = None,
        reset_input: Callable[[EnvBase, int], TensorDictBase] | None = None,
    ) -> None:
        super().__init__(num_envs, horizon, device=device)
        if make_env is None:
            raise ValueError("TorchRLEnv: make_env(num_envs, device) -> EnvBase is required")
        self.torchrl_env = make_env(num_envs, self.device)
        self._reset_input = reset_input
        spec = self.torchrl_env.observation_spec
        self.obs_keys = list(obs_keys or spec.keys())
        missing = [k for k in self.obs_keys if k not in spec.keys()]
        if missing:
            raise ValueError(f"TorchRLEnv: obs_keys {missing} are not in the env's observation spec {list(spec.keys())}")
        batch = len(self.torchrl_env.batch_size)

        def one_env(s: Any) -> Any:  # drop the env's batch dims: rlx specs describe ONE sub-env
            return s[(0,) * batch] if batch else s

        if len(self.obs_keys) == 1:
            self.observation_spec = one_env(spec[self.obs_keys[0]]).to(self.device)
        else:
            self.observation_spec = Composite({k: one_env(spec[k]) for k in self.obs_keys}, device=self.device)
        self.action_spec = one_env(self.torchrl_env.action_spec).to(self.device)
        self._action_key = self.torchrl_env.action_key
        self._reward_key = self.torchrl_env.reward_key
        self._root: TensorDictBase | None = None

    def _obs(self, td: TensorDictBase) -> Any:
        if len(self.obs_keys) == 1:
            return td.get(self.obs_keys[0]).reshape(self.num_envs, *self.observation_spec.shape)
        return td.select(*self.obs_keys).reshape(self.num_envs)

    def reset(self, *, config: dict[str, Any] | None = None) -> Any:
        if self._reset_input is None:
            self._root = self.torchrl_env.reset()
        else:
            start = self._reset_input(self.torchrl_env, self.num_envs)
            try:  # newer TorchRL asks to be told that the reset input carries state
                self._root = self.torchrl_env.reset(start, set_state=True)
            except TypeError:
                self._root = self.torchrl_env.reset(start)
        return self._obs(self._root)

    def step(self, actions: torch.Tensor) -> TensorDict:
        B = self.num_envs
        root = self._root.clone(False)
        root.set(self._action_key, actions)  # [B, *action]: the one-env spec batched
        stepped, next_root = self.torchrl_env.step_and_maybe_reset(root)
        nxt = stepped.get("next")
        done = nxt.get("done").reshape(B, 1).bool()
        terminated = nxt.get("terminated", done).reshape(B, 1).bool() if "terminated" in nxt.keys() else torch.zeros_like(done)
        truncated = nxt.get("truncated").reshape(B, 1).bool() if "truncated" in nxt.keys() else done & ~terminated
        self._root = next_root
        return TensorDict(
            {
                "obs": self._obs(next_root),
                "rewards": nxt.get(self._reward_key).reshape(B, 1).float(),
                "terminated": terminated,
                "truncated": truncated & ~terminated,
                "final_obs": self._obs(nxt),
            },
            batch_size=[B],
            device=self.device,
        )


class _RlxAsTorchRL(EnvBase):
    """An rlx env as a TorchRL ``EnvBase`` with batch size ``[B]`` (see :func:`to_torchrl`)."""

    def __init__(self, env: Any) -> None:
        B = env.num_envs
        super().__init__(device=torch.device(env.device), batch_size=torch.Size([B]))
        self.rlx_env = env
        obs_spec = env.observation_spec
        if isinstance(obs_spec, Composite):
            self.observation_spec = Composite(
                {k: v.expand(B, *v.shape) for k, v in obs_spec.items()}, shape=(B,), device=self.device
            )
        else:
            self.observation_spec = Composite(observation=obs_spec.expand(B, *obs_spec.shape), shape=(B,), device=self.device)
        self.action_spec = env.action_spec.expand(B, *env.action_spec.shape)
        self.reward_spec = Unbounded(shape=(B, 1), device=self.device)
        flag = Categorical(2, shape=(B, 1), dtype=torch.bool, device=self.device)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=(B,), device=self.device)
        self._pending: Any = None

    def _obs_td(self, obs: Any) -> TensorDict:
        if isinstance(obs, TensorDictBase):
            return obs.clone(False)
        # A copy: an rlx env may return a view of state that its next step overwrites,
        # and a TorchRL rollout keeps every step's observation.
        return TensorDict({"observation": obs.clone()}, batch_size=self.batch_size, device=self.device)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        partial = tensordict is not None and "_reset" in tensordict.keys() and self._pending is not None
        # rlx envs already reset finished sub-envs inside step(): a partial reset hands
        # out those observations instead of resetting anything again.
        obs = self._pending if partial else self.rlx_env.reset()
        out = self._obs_td(obs)
        false = torch.zeros(*self.batch_size, 1, dtype=torch.bool, device=self.device)
        out.update({"done": false, "terminated": false.clone(), "truncated": false.clone()})
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        result = self.rlx_env.step(tensordict.get(self.action_key))
        B = self.batch_size
        terminated = result.get("terminated") if "terminated" in result.keys() else torch.zeros(*B, 1, dtype=torch.bool, device=self.device)
        truncated = result.get("truncated") if "truncated" in result.keys() else torch.zeros_like(terminated)
        self._pending = result.get("obs")
        final = result.get("final_obs") if "final_obs" in result.keys() else result.get("obs")
        out = self._obs_td(final)
        out.update(
            {"reward": result.get("rewards"), "done": terminated | truncated, "terminated": terminated, "truncated": truncated}
        )
        return out

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            torch.manual_seed(seed)


def to_torchrl(env: Any) -> EnvBase:
    """Wrap an rlx env (an instance) as a TorchRL ``EnvBase`` with batch size ``[B]``.

    Observations appear under ``"observation"`` (or the Composite's own keys), rewards
    under ``"reward"``, and ``done`` / ``terminated`` / ``truncated`` follow TorchRL's
    conventions, so TorchRL collectors and rollouts work on it.
    """
    return _RlxAsTorchRL(env)
