"""Train on GPU simulators that speak rsl_rl's ``VecEnv`` (Isaac Lab, mjlab, Genesis,
MuJoCo Playground): :class:`RslRlVecEnv`.

The adapter reads either form of the interface:

* rsl_rl >= 3: ``get_observations() -> TensorDict`` of observation groups (``policy``,
  ``critic``, ...), ``step(actions) -> (obs TensorDict, rewards [B], dones [B], extras)``;
* rsl_rl 2.x: ``get_observations() -> (Tensor, extras)`` with the other groups in
  ``extras["observations"]``, and ``step`` returning the policy observation as a tensor.

Groups become the top-level keys of a ``Composite`` observation (the 2.x policy tensor is
``policy``), so ``obs_groups={"actor": ["policy"], "critic": ["policy", "critic"]}`` gives
the asymmetric actor-critic these simulators train with. ``dones & ~time_outs`` is
``terminated`` and ``time_outs`` (``extras["time_outs"]``, 0/1 floats or bools) is
``truncated``.

The truncation bootstrap. These envs reset a sub-env inside ``step`` and return the first
observation of its next episode, and most do not expose the last observation of the one
that ended. The adapter then bootstraps a time-out from ``V(s_t)``, the observation the
step was taken from (rsl_rl's own approximation). An env that puts the true last
observation in ``extras["final_observation"]`` (a TensorDict of groups, or the policy
tensor in 2.x) gets the exact ``V(final_obs)``; a final observation is read only where it
is given.

Scalars in ``extras["log"]`` (rsl_rl's episode logging) and ``extras["episode"]`` appear
in ``collect()``'s statistics as ``env/<name>`` (leading and trailing slashes dropped:
rsl_rl's ``/episode_reward`` is ``env/episode_reward``, Isaac Lab's
``Episode_Reward/track_lin_vel_xy_exp`` keeps its section): means over the steps of the
collect that reported them, accumulated on the device; under torch.distributed, means
over the ranks.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor
from torchrl.data import Composite, Unbounded

from rlx.env import FINAL_OBS, OBS, REWARDS, TERMINATED, TRUNCATED, Env, bound_env_class, resolve_make_env, select_rows

__all__ = ["RslRlVecEnv", "FINAL_OBSERVATION_KEY"]

#: The ``extras`` entry an env may fill with the true last observation of episodes that
#: ended in a step (only those rows are read).
FINAL_OBSERVATION_KEY = "final_observation"
#: The group name of a 2.x env's policy observation tensor.
POLICY = "policy"


class RslRlVecEnv(Env):
    """An rsl_rl ``VecEnv`` as an rlx env (see the module docstring).

    Args:
        num_envs: ``B``; the VecEnv must have as many.
        horizon: Unused (the VecEnv ends its own episodes).
        device: Must be the VecEnv's device.
        make_env: ``make_env(num_envs, device)`` returning the VecEnv, or its import path
            (``"my_pkg.envs:make_env"``); usually bound with :meth:`factory`.
        reset_env: Whether :meth:`reset` calls the VecEnv's ``reset()``. rsl_rl's runner
            never does (Isaac Lab's wrapper resets at construction; the envs reset
            themselves in ``step``): :class:`rlx.runners.OnPolicyRunner` passes False, and
            a reset then only reads ``get_observations()``.
    """

    factory_kwargs: ClassVar[dict[str, Any]] = {}

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu",
                 make_env: Callable[[int, torch.device], Any] | str | None = None,
                 reset_env: bool | None = None) -> None:
        super().__init__(num_envs, horizon, device=device)
        self.reset_env = bool(self.factory_kwargs.get("reset_env", True) if reset_env is None else reset_env)
        if not self.reset_env:  # rsl_rl's runner steps the env only to train: no probing step at build
            self.step_output_keys = (OBS, REWARDS, TERMINATED, TRUNCATED, FINAL_OBS)
        make_env = resolve_make_env(make_env or self.factory_kwargs.get("make_env"), "RslRlVecEnv")
        self.vec_env = make_env(num_envs, self.device)
        #: Spread the VecEnv's episode clocks (``episode_length_buf``) at the next reset:
        #: rsl_rl's ``init_at_random_ep_len``, which a reset would otherwise undo.
        self.randomize_episode_lengths_at_reset = False
        for attr in ("num_envs", "num_actions", "get_observations", "step"):
            if not hasattr(self.vec_env, attr):
                raise ValueError(f"RslRlVecEnv: {type(self.vec_env).__name__} has no '{attr}': not an rsl_rl VecEnv")
        if int(self.vec_env.num_envs) != num_envs:
            raise ValueError(f"RslRlVecEnv: make_env built {self.vec_env.num_envs} envs, expected {num_envs}")
        vec_device = torch.device(getattr(self.vec_env, "device", self.device))
        if vec_device.type != self.device.type or (vec_device.index or 0) != (self.device.index or 0):
            raise ValueError(f"RslRlVecEnv: the VecEnv is on {vec_device}, the algorithm on {self.device}; set device")
        obs = self._groups(*_split(self.vec_env.get_observations()))
        self.observation_spec = Composite(
            {k: Unbounded(shape=obs.get(k).shape[1:], device=self.device) for k in obs.keys()}, device=self.device
        )
        self.action_spec = Unbounded(shape=(int(self.vec_env.num_actions),), device=self.device)
        length = getattr(self.vec_env, "max_episode_length", None)
        if isinstance(length, (int, float)) and length > 0:
            self.max_episode_steps = int(length)
        self._last_obs = obs
        self._log_sums: dict[str, Tensor] = {}
        self._log_counts: dict[str, Tensor] = {}

    @classmethod
    def factory(cls, make_env: Callable[[int, torch.device], Any] | str, *, reset_env: bool = True) -> type[RslRlVecEnv]:
        """An env class bound to ``make_env`` (and ``reset_env``), usable wherever an env class is.

        Example:
            >>> algo = AlgorithmConfig(num_envs=4096, obs_groups={"actor": ["policy"]}).build(RslRlVecEnv.factory(make))
        """
        return bound_env_class(cls, make_env, {"make_env": make_env, **({} if reset_env else {"reset_env": False})})

    def _groups(self, obs: Tensor | TensorDictBase, extras: dict[str, Any] | None) -> TensorDict:
        """Both forms as one TensorDict of groups, float32, on the device."""
        if isinstance(obs, TensorDictBase):
            groups = {k: obs.get(k) for k in obs.keys()}
        else:
            groups = {POLICY: obs, **dict((extras or {}).get("observations") or {})}
        rows = next(iter(groups.values())).shape[0]  # num_envs, or a deployed policy's batch
        return TensorDict({k: v.float() for k, v in sorted(groups.items())}, batch_size=[rows], device=self.device)

    def groups(self, observations: Any) -> TensorDict:
        """What ``get_observations()`` returns (either form) as this env's observation: a
        TensorDict of groups, float32, on the device (for a policy's deployment)."""
        return self._groups(*_split(observations))

    def reset(self, *, config: dict[str, Any] | None = None) -> TensorDict:
        if self.reset_env and callable(getattr(self.vec_env, "reset", None)):
            self.vec_env.reset()
        if self.randomize_episode_lengths_at_reset:
            self.randomize_episode_lengths()
        obs = self._groups(*_split(self.vec_env.get_observations()))
        self._last_obs = obs
        return obs

    def randomize_episode_lengths(self) -> None:
        """rsl_rl's ``init_at_random_ep_len``: each sub-env's episode clock drawn uniformly
        from ``[0, max_episode_length)``, so time limits come staggered (a one-shot: clears
        :attr:`randomize_episode_lengths_at_reset`)."""
        buf = self.vec_env.episode_length_buf
        self.vec_env.episode_length_buf = torch.randint_like(buf, high=int(self.vec_env.max_episode_length))
        self.randomize_episode_lengths_at_reset = False

    def step(self, actions: Tensor) -> TensorDict:
        obs, rewards, dones, extras = self.vec_env.step(actions)
        extras = extras or {}
        obs = self._groups(obs, extras)
        B = self.num_envs
        dones = dones.reshape(B).bool()
        time_outs = extras.get("time_outs")
        truncated = dones & time_outs.reshape(B).bool() if time_outs is not None else torch.zeros_like(dones)
        final = self._last_obs  # V(s_t) where no final observation is given (rsl_rl's approximation)
        given = extras.get(FINAL_OBSERVATION_KEY)
        if given is not None:
            given = self._groups(*_split(given))
            final = select_rows(dones, given, final)
        self._accumulate_logs(extras)
        self._last_obs = obs
        return TensorDict(
            {OBS: obs, REWARDS: rewards.reshape(B, 1).float(), TERMINATED: (dones & ~truncated).view(B, 1),
             TRUNCATED: truncated.view(B, 1), FINAL_OBS: final},
            batch_size=[B], device=self.device,
        )

    def _accumulate_logs(self, extras: dict[str, Any]) -> None:
        # Tensors on the env's device are summed there; plain numbers (wrappers that call
        # .item() themselves, like Playground's) and host tensors on the host: no tensor
        # op per logged name per step, and no host-to-device copy.
        for section in ("log", "episode"):
            for name, value in (extras.get(section) or {}).items():
                if isinstance(value, Tensor):
                    value = value.detach().float().mean()
                    if value.device != self.device:
                        value = value.item()  # SYNC: none, a host tensor's value (not the device's)
                elif isinstance(value, numbers.Real):  # int, float, bool (a success rate), numpy scalars
                    value = float(value)
                else:
                    continue
                key = name.strip("/")  # rsl_rl's "/episode_reward", Isaac Lab's "Episode_Reward/x"
                self._log_sums[key] = self._log_sums.get(key, 0.0) + value
                self._log_counts[key] = self._log_counts.get(key, 0) + 1

    def pop_log_stats(self) -> dict[str, Tensor]:
        """Means of the logged scalars since the last call (``[]`` float32 tensors on the
        device, in sorted key order so that every rank reduces them alike), then forget
        them. A host number becomes a device tensor by a fill, not a copy: no sync."""
        out = {}
        for k in sorted(self._log_sums):
            mean = self._log_sums[k] / self._log_counts[k]
            out[k] = mean.float() if isinstance(mean, Tensor) else torch.full((), mean, dtype=torch.float32, device=self.device)
        self._log_sums, self._log_counts = {}, {}
        return out


def _split(result: Any) -> tuple[Any, dict[str, Any] | None]:
    """``get_observations()``'s result as ``(obs, extras)``: 2.x returns a pair."""
    if isinstance(result, tuple):
        return result[0], result[1]
    return result, None

