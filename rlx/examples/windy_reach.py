"""WindyReach: a task written to rsl_rl's ``VecEnv`` interface, with privileged critic state.

A 2-D point mass of unknown mass (0.5 to 2) pushed by an unknown constant wind (each
component within +-0.5) must reach a goal within 100 steps (a time-out; no
termination). The ``policy`` group holds the offset to the goal and the velocity; the
``critic`` group the wind and the mass, which the actor never sees: the asymmetric
actor-critic of GPU simulators' robot tasks, small enough for a CPU. Reward per step:
minus the distance to the goal, minus 0.01 |a|^2, with actions clipped to [-1, 1].

It needs neither rsl_rl nor a simulator: ``benchmarks/vs_rsl_rl.py`` trains it with
rsl_rl's ``OnPolicyRunner`` and with rlx, and the tests of :mod:`rlx.runners` train it.
:func:`pd_controller` is the hand-written reference (1 on the normalized scale; the
random policy is 0).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

__all__ = ["WindyReach", "pd_controller", "episode_return", "mirror"]

EPISODE = 100
DT, DRAG = 0.05, 0.98


class WindyReach:
    """rsl_rl ``VecEnv``: reach a goal under an unobserved wind and mass (module docstring).

    Args:
        num_envs: ``B``.
        device: Where the state lives.
        seed: Seed of the env's own generator (resets draw from it, never from torch's).
    """

    num_actions = 2
    max_episode_length = EPISODE

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None) -> None:
        self.num_envs, self.device, self.cfg = num_envs, torch.device(device), {}
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed if seed is not None else torch.randint(2**31, ()).item())  # SYNC: once, at build
        B = num_envs
        self.pos, self.vel, self.goal = (torch.zeros(B, 2, device=self.device) for _ in range(3))
        self.wind = torch.zeros(B, 2, device=self.device)
        self.mass = torch.ones(B, 1, device=self.device)
        self.episode_length_buf = torch.zeros(B, dtype=torch.long, device=self.device)
        self._reset(torch.ones(B, dtype=torch.bool, device=self.device))

    def _uniform(self, shape: tuple[int, ...], low: float, high: float) -> torch.Tensor:
        return torch.rand(shape, generator=self.generator, device=self.device) * (high - low) + low

    def _reset(self, rows: torch.Tensor) -> None:
        B, m = self.num_envs, rows.view(-1, 1)
        self.pos = torch.where(m, self._uniform((B, 2), -1.0, 1.0), self.pos)
        self.goal = torch.where(m, self._uniform((B, 2), -1.0, 1.0), self.goal)
        self.vel = torch.where(m, 0.0, self.vel)
        self.wind = torch.where(m, self._uniform((B, 2), -0.5, 0.5), self.wind)
        self.mass = torch.where(m, self._uniform((B, 1), 0.5, 2.0), self.mass)
        self.episode_length_buf = torch.where(rows, 0, self.episode_length_buf)

    def get_observations(self) -> TensorDict:
        policy = torch.cat([self.goal - self.pos, self.vel], dim=-1)
        critic = torch.cat([self.wind, self.mass], dim=-1)
        return TensorDict({"policy": policy, "critic": critic}, batch_size=[self.num_envs], device=self.device)

    def step(self, actions: torch.Tensor):
        a = actions.clamp(-1.0, 1.0)
        self.vel = (self.vel + DT * (2.0 * a + self.wind) / self.mass) * DRAG
        self.pos = self.pos + DT * self.vel
        distance = torch.linalg.vector_norm(self.goal - self.pos, dim=-1)
        rewards = -distance - 0.01 * a.square().sum(-1)
        self.episode_length_buf = self.episode_length_buf + 1
        time_outs = self.episode_length_buf >= EPISODE
        self._reset(time_outs)
        # rsl_rl's per-step log (rlx reports it as env/distance_to_goal).
        extras = {"time_outs": time_outs, "log": {"/distance_to_goal": distance.mean()}}
        return self.get_observations(), rewards, time_outs.clone(), extras


def pd_controller(obs: TensorDict) -> torch.Tensor:
    policy = obs.get("policy")
    return (2.0 * policy[:, :2] - 1.0 * policy[:, 2:]).clamp(-1.0, 1.0)


def episode_return(act, num_envs: int, device: str, seed: int = 12345) -> float:
    """Mean return of one 100-step episode in each of ``num_envs`` fresh sub-envs."""
    env = WindyReach(num_envs, device, seed=seed)
    obs, total = env.get_observations(), torch.zeros(num_envs, device=device)
    with torch.no_grad():
        for _ in range(EPISODE):
            obs, rewards, _, _ = env.step(act(obs))
            total += rewards
    return float(total.mean())  # SYNC: the evaluation's result


def mirror(obs: TensorDict, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor]:
    """The task's mirror through the y axis (a ``symmetry_fn``): x components flip sign,
    in the goal offset, the velocity, the wind and the action; the mass stays."""
    flip = torch.tensor([-1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 1.0], device=actions.device)  # dx dy vx vy, wind x y, mass
    mirrored = TensorDict({"policy": obs.get("policy") * flip[:4], "critic": obs.get("critic") * flip[4:]},
                          batch_size=obs.batch_size, device=obs.device)
    return mirrored, actions * flip[:2]


def rsl_rl_augmentation(env=None, obs: TensorDict | None = None, actions: torch.Tensor | None = None):
    """:func:`mirror` in rsl_rl's form (a ``symmetry_cfg``'s ``data_augmentation_func``):
    each of ``obs`` and ``actions`` (either may be ``None``) followed by its mirror."""
    flip = torch.tensor([-1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 1.0])
    out_obs = out_actions = None
    if obs is not None:
        mirrored = TensorDict({"policy": obs.get("policy") * flip[:4].to(obs.device),
                               "critic": obs.get("critic") * flip[4:].to(obs.device)},
                              batch_size=obs.batch_size, device=obs.device)
        out_obs = torch.cat([obs, mirrored])
    if actions is not None:
        out_actions = torch.cat([actions, actions * flip[:2].to(actions.device)])
    return out_obs, out_actions
