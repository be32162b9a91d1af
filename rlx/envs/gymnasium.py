"""Gymnasium vector envs as rlx envs: ``GymnasiumEnv.factory("CartPole-v1")``.

The adapter runs a gymnasium vector env (sync or async) and converts numpy to torch on
the algorithm's device, with specs derived from the spaces. It presents rlx's same-step
protocol whatever gymnasium's autoreset mode:

* ``"next_step"`` (gymnasium 1.x's default): a sub-env that ends returns its final
  observation, and gymnasium would spend that sub-env's NEXT step on the reset (reward 0,
  action ignored): a transition that belongs to no episode. The adapter resets the
  finished sub-envs at once with ``reset(options={"reset_mask": done})``, so that step
  never happens and never reaches the buffer; the final observation becomes
  ``final_obs`` and the reset observation ``obs``.
* ``"same_step"``: gymnasium resets in the same step and reports the final observation
  in ``info["final_obs"]``, which becomes ``final_obs``.

``gymnasium`` is an optional dependency (``pip install 'rlx[gymnasium]'``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Categorical, Composite, MultiCategorical, TensorSpec, Unbounded

from rlx.env import ACTION_MASK, Env, bound_env_class

__all__ = ["GymnasiumEnv", "space_to_spec"]

_AUTORESET_MODES = ("next_step", "same_step")
_VECTORIZATION = ("sync", "async")


#: gymnasium's MuJoCo envs, whose extra is ``rlx[mujoco]`` (gymnasium and mujoco).
_MUJOCO_ENVS = ("Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup", "InvertedDoublePendulum",
                "InvertedPendulum", "Pusher", "Reacher", "Swimmer", "Walker2d")


def _extra_for(env: Any) -> str:
    """The pip extra an env id needs: ``rlx[mujoco]`` for gymnasium's MuJoCo envs."""
    name = env.split("/")[-1].split("-")[0] if isinstance(env, str) else ""
    return "rlx[mujoco]" if name in _MUJOCO_ENVS else "rlx[gymnasium]"


def _import_gymnasium(env: Any = None) -> Any:
    try:
        import gymnasium
    except ImportError as e:
        raise ImportError(f"GymnasiumEnv needs gymnasium ({e}): pip install '{_extra_for(env)}'") from e
    return gymnasium


def _torch_dtype(dtype: Any) -> torch.dtype:
    return torch.from_numpy(np.zeros((), dtype=dtype)).dtype


def space_to_spec(space: Any, *, device: torch.device | str = "cpu", key: str = "") -> TensorSpec:
    """The torchrl spec of ONE sub-env for a gymnasium space.

    ``Discrete`` becomes ``Categorical`` (actions ``[B]``), ``MultiDiscrete``
    ``MultiCategorical``, ``MultiBinary`` a boolean ``Categorical(2)``, a ``Box`` a
    ``Bounded`` spec when its bounds are finite (else ``Unbounded``), and ``Dict`` a
    ``Composite``; an ``action_mask`` entry of a Dict becomes a boolean mask.

    Raises:
        TypeError: a space with no tensor form (``Text``, ``Graph``, ...), naming it.
    """
    gym = _import_gymnasium()
    spaces = gym.spaces
    if isinstance(space, spaces.Dict):
        return Composite(
            {k: space_to_spec(v, device=device, key=f"{key}.{k}" if key else k) for k, v in space.spaces.items()},
            device=device,
        )
    if key.split(".")[-1] == ACTION_MASK:
        return Categorical(2, shape=tuple(space.shape), dtype=torch.bool, device=device)
    if isinstance(space, spaces.Discrete):
        return Categorical(int(space.n), device=device)
    if isinstance(space, spaces.MultiDiscrete):
        return MultiCategorical([int(n) for n in np.asarray(space.nvec).reshape(-1)], device=device)
    if isinstance(space, spaces.MultiBinary):
        return Categorical(2, shape=tuple(space.shape), dtype=torch.bool, device=device)
    if isinstance(space, spaces.Box):
        dtype = _torch_dtype(space.dtype)
        if dtype == torch.float64:
            dtype = torch.float32  # rlx computes in float32; float64 observations are cast
        low, high = np.asarray(space.low), np.asarray(space.high)
        if np.all(np.isfinite(low)) and np.all(np.isfinite(high)):
            return Bounded(
                torch.as_tensor(low, dtype=dtype), torch.as_tensor(high, dtype=dtype),
                shape=tuple(space.shape), dtype=dtype, device=device,
            )
        return Unbounded(shape=tuple(space.shape), dtype=dtype, device=device)
    raise TypeError(f"gymnasium space {type(space).__name__} at {key or 'the top level'} has no tensor form in rlx")


def _to_torch(x: Any, spec: TensorSpec, batch: int, device: torch.device) -> Any:
    if isinstance(spec, Composite):
        return TensorDict(
            {k: _to_torch(x[k], spec[k], batch, device) for k in spec.keys()}, batch_size=[batch], device=device
        )
    return torch.as_tensor(np.asarray(x)).to(device=device, dtype=spec.dtype).reshape(batch, *spec.shape)


def _stack_final(final: Any, spec: TensorSpec, done: np.ndarray, current: Any) -> Any:
    """Numpy final observations: entries of the ``info["final_obs"]`` object array where
    ``done``, the current observation elsewhere."""
    if isinstance(spec, Composite):
        return {
            k: _stack_final(
                np.array([f[k] if d else None for f, d in zip(final, done)], dtype=object), spec[k], done, current[k]
            )
            for k in spec.keys()
        }
    out = np.array(current, copy=True)
    for i in np.flatnonzero(done):
        out[i] = final[i]
    return out


class GymnasiumEnv(Env):
    """A gymnasium vector env behind rlx's env protocol (see the module docstring).

    Args:
        num_envs: Number of gymnasium sub-envs ``B``.
        horizon: Unused (the env constructor protocol).
        device: Where observations, rewards and flags are put.
        env: A gymnasium env id (``"CartPole-v1"``) or a function returning one
            gymnasium env (called once per sub-env).
        vectorization: ``"sync"`` (one process) or ``"async"`` (one process per sub-env).
        autoreset_mode: The gymnasium vector env's mode: ``"next_step"`` or ``"same_step"``.
        make_kwargs: Keyword arguments for ``gymnasium.make`` when ``env`` is an id.
    """

    #: Keyword arguments a factory class binds (see :meth:`factory`).
    factory_kwargs: ClassVar[dict[str, Any]] = {}

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        device: torch.device | str = "cpu",
        env: str | Callable[[], Any] | None = None,
        vectorization: str | None = None,
        autoreset_mode: str | None = None,
        make_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(num_envs, horizon, device=device)
        gym = _import_gymnasium(env if env is not None else self.factory_kwargs.get("env"))
        given = {"env": env, "vectorization": vectorization, "autoreset_mode": autoreset_mode, "make_kwargs": make_kwargs}
        # Defaults, then what a factory bound, then what this call gives explicitly.
        options = {"vectorization": "sync", "autoreset_mode": "next_step", **self.factory_kwargs}
        options.update({k: v for k, v in given.items() if v is not None})
        env, vectorization, autoreset_mode = options.get("env"), options["vectorization"], options["autoreset_mode"]
        if env is None:
            raise ValueError("GymnasiumEnv: env must be a gymnasium env id or a function making one env")
        if vectorization not in _VECTORIZATION:
            raise ValueError(f"GymnasiumEnv: vectorization must be one of {_VECTORIZATION}, got {vectorization!r}")
        if autoreset_mode not in _AUTORESET_MODES:
            raise ValueError(f"GymnasiumEnv: autoreset_mode must be one of {_AUTORESET_MODES}, got {autoreset_mode!r}")
        make_kwargs = dict(options.get("make_kwargs") or {})
        make_one = (lambda: gym.make(env, **make_kwargs)) if isinstance(env, str) else env
        vector_cls = gym.vector.SyncVectorEnv if vectorization == "sync" else gym.vector.AsyncVectorEnv
        mode = gym.vector.AutoresetMode.NEXT_STEP if autoreset_mode == "next_step" else gym.vector.AutoresetMode.SAME_STEP
        try:
            self.vector_env = vector_cls([make_one for _ in range(num_envs)], autoreset_mode=mode)
        except gym.error.DependencyNotInstalled as e:  # MuJoCo, Box2D, ...: name the extra
            extra = _extra_for(env)
            hint = f"pip install '{extra}'" if extra != "rlx[gymnasium]" else "install what gymnasium names"
            raise ImportError(f"GymnasiumEnv {env!r}: {str(e).splitlines()[0]}; {hint}") from e
        self.autoreset_mode = autoreset_mode
        self.observation_spec = space_to_spec(self.vector_env.single_observation_space, device=self.device)
        self.action_spec = space_to_spec(self.vector_env.single_action_space, device=self.device)
        action_space = self.vector_env.single_action_space
        self._action_offset = np.asarray(getattr(action_space, "start", 0))
        self._action_shape = tuple(action_space.shape or ())  # gymnasium's, e.g. a 2-D MultiDiscrete's
        self._obs_np: Any = None

    @classmethod
    def factory(cls, env: str | Callable[[], Any], **options: Any) -> type[GymnasiumEnv]:
        """An env class bound to ``env`` and ``options``, usable wherever an env class is.

        Example:
            >>> algo = AlgorithmConfig(num_envs=8).build(GymnasiumEnv.factory("CartPole-v1"))
        """
        return bound_env_class(cls, env, {"env": env, **options})

    def _torch_obs(self, obs: Any) -> Any:
        return _to_torch(obs, self.observation_spec, self.num_envs, self.device)

    def reset(self, *, config: dict[str, Any] | None = None) -> Any:
        # Seeds come from torch's RNG, so an rlx seed makes gymnasium's resets repeatable.
        seed = int(torch.randint(0, 2**31 - 1, ()).item())  # SYNC: reset only, CPU RNG
        obs, _ = self.vector_env.reset(seed=seed, options=config)
        self._obs_np = obs
        return self._torch_obs(obs)

    def step(self, actions: torch.Tensor) -> TensorDict:
        actions_np = actions.detach().cpu().numpy()  # SYNC: gymnasium lives on the host
        # [B, *space.shape]: a Discrete's [B] (or [B, 1]), a MultiDiscrete's nvec shape (rlx
        # flattens it), a MultiBinary's or a Box's shape.
        actions_np = actions_np.reshape(self.num_envs, *self._action_shape)
        obs, rewards, terminated, truncated, info = self.vector_env.step(actions_np + self._action_offset)
        done = np.logical_or(terminated, truncated)
        if self.autoreset_mode == "same_step":
            final = info.get("final_obs")
            final_obs = _stack_final(final, self.observation_spec, done, obs) if done.any() else obs
        else:
            final_obs = obs
            if done.any():
                # Reset the finished sub-envs now: gymnasium would otherwise spend their
                # next step on the reset, a transition that belongs to no episode.
                obs, _ = self.vector_env.reset(options={"reset_mask": done})
        self._obs_np = obs
        B = self.num_envs
        return TensorDict(
            {
                "obs": self._torch_obs(obs),
                "rewards": torch.as_tensor(np.asarray(rewards, dtype=np.float32)).view(B, 1).to(self.device),
                "terminated": torch.as_tensor(np.asarray(terminated, dtype=bool)).view(B, 1).to(self.device),
                "truncated": torch.as_tensor(np.asarray(truncated & ~terminated, dtype=bool)).view(B, 1).to(self.device),
                "final_obs": self._torch_obs(final_obs),
            },
            batch_size=[B],
            device=self.device,
        )

    def close(self) -> None:
        """Close the gymnasium vector env (and its worker processes when async)."""
        self.vector_env.close()
