"""Symmetry augmentation and the mirror loss (rsl_rl's ``symmetry_cfg``).

A task symmetric under a mirror (a robot's left and right, a reflection of the plane)
gives every sample a twin: the mirrored observation, whose best action is the mirrored
action. ``symmetry_fn(obs, actions) -> (mirrored_obs, mirrored_actions)`` is the user's
mirror, on batches; with ``symmetry_augment`` every minibatch is doubled with its
mirrored twin, which keeps the collect-time log-probability, value, advantage and
return of the sample it mirrors (rsl_rl's rule: the twin is what a symmetric policy
would have collected). :class:`Symmetry` checks at build that the mirror is an
involution (mirroring twice gives the input back) on random observations and actions.

With ``mirror_loss_coeff`` the loss gains ``coeff * mean((mu(mirror(o)) - mirror(mu(o)))^2)``
(Mittal et al., 2024, rsl_rl's ``use_mirror_loss``): ``mu`` is the policy's mean action
(the distribution's mode, differentiable for continuous actions), and the target side,
the mirror of the mean on the original observation, carries no gradient. It pulls the
policy toward symmetry directly, where augmentation only shows it mirrored samples;
``losses/mirror`` reports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import Tensor

from rlx.collect.buffer import ACTIONS
from rlx.core.config_fields import ConfigError
from rlx.env import OBS

__all__ = ["Symmetry"]

MirrorFn = Callable[[Any, Tensor], tuple[Any, Tensor]]


def _leaves(x: Any) -> dict[str, Tensor]:
    if isinstance(x, TensorDictBase):
        return {"/".join(k if isinstance(k, tuple) else (k,)): v for k, v in x.items(include_nested=True, leaves_only=True)}
    return {"": x}


class Symmetry:
    """The mirror of a task (module docstring).

    Args:
        fn: ``fn(obs, actions) -> (mirrored_obs, mirrored_actions)`` on ``[N, ...]`` batches.
        observation_spec, action_spec: The env's specs (random inputs for the check).
        device: Where the check's inputs live.
        where: The config field, for errors.

    Raises:
        ConfigError: ``fn`` fails on a batch, changes a shape or dtype, or is not an
            involution (naming the entry and how far off it came back).
    """

    def __init__(self, fn: MirrorFn, observation_spec: Any, action_spec: Any, device: torch.device,
                 *, where: str = "AlgorithmConfig.symmetry_fn") -> None:
        self.fn = fn
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # the run's RNG stream is not touched
            obs = observation_spec.rand((16,)).to(device)
            actions = action_spec.rand((16,)).to(device)
        try:
            once = fn(obs, actions)
            twice = fn(*once)
        except Exception as e:  # noqa: BLE001 - any failure of the user's function is a config error
            raise ConfigError(f"{where}: calling it on a batch of 16 random observations and actions raised "
                              f"{type(e).__name__}: {e}") from e
        for name, (given, back) in {"actions": (actions, twice[1]), **{f"obs{('/' + k) if k else ''}": (v, _leaves(twice[0])[k])
                                                                        for k, v in _leaves(obs).items()}}.items():
            if back.shape != given.shape or back.dtype != given.dtype:
                raise ConfigError(f"{where}: mirroring {name} twice gave shape {tuple(back.shape)} {back.dtype}, "
                                  f"expected {tuple(given.shape)} {given.dtype}")
            if not torch.allclose(back.float(), given.float(), atol=1e-5, rtol=1e-5):
                off = (back.float() - given.float()).abs().max().item()  # SYNC: build-time check
                raise ConfigError(f"{where}: is not an involution: mirroring {name} twice changed it by up to {off:.3g} "
                                  "(a mirror applied twice must give its input back)")

    def mirror_loss(self, policy: Any, mb: dict[str, Any], out: Any, mean: Callable[[Tensor], Tensor]) -> Tensor:
        """The mirror loss of a minibatch (module docstring), each row's mean over its action
        dims, reduced over rows by ``mean`` (each member's mean).

        Args:
            policy: The policy; its actor runs on the mirrored observations.
            mb: The minibatch (with its mirrored twins, under augmentation: then each twin's
                mirror is its original, and the loss is symmetric in the two).
            out: The policy's evaluation of ``mb`` (its distribution gives the means).
        """
        obs, means = mb[OBS], out.dist.mode()
        on_mirrored = policy._actor_distribution(self.fn(obs, mb[ACTIONS])[0]).mode()
        _, target = self.fn(obs, means.detach())
        error = (on_mirrored.float() - target.float()).square()
        return mean(error.reshape(error.shape[0], -1).mean(dim=1, keepdim=True))

    def augment(self, mb: dict[str, Any], members: int = 1) -> dict[str, Any]:
        """``mb`` with each sample's mirrored twin: twice the rows; the twin's other
        entries (collect-time log-probability, value, advantage, return) are its
        original's. With S members (seed-major rows) each member's rows stay together:
        its originals, then their twins."""
        obs, actions = self.fn(mb[OBS], mb[ACTIONS])
        out = {key: _with_twins(x, x, members) for key, x in mb.items() if key not in (OBS, ACTIONS)}
        out[OBS] = _with_twins(mb[OBS], obs, members)
        out[ACTIONS] = _with_twins(mb[ACTIONS], actions, members)
        return out


def _with_twins(x: Any, twins: Any, members: int) -> Any:
    """``[S * n, ...]`` rows and their twins as ``[S * 2n, ...]``, member by member."""
    if members == 1:
        return torch.cat([x, twins])
    n = x.shape[0] // members
    paired = torch.stack([x.reshape(members, n, *x.shape[1:]), twins.reshape(members, n, *twins.shape[1:])], dim=1)
    return paired.reshape(2 * x.shape[0], *x.shape[1:])
