"""Shared test envs: scripted episodes with known ends, and envs that break the protocol."""

from __future__ import annotations

import io
import math
import os
from typing import Any

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Categorical, Composite, Unbounded

from rlx.env import Env
from rlx.run.threads import AutoThreads, threads_are_set_by_user, usable_cores


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``slow`` tests first (in their order), the rest after, so that the minute-long
    runs start early and the short tests fill in around them (see
    :func:`pytest_xdist_make_scheduler`)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: pytest without xdist skips it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n N`` (xdist's default ``--dist load``), work stealing: xdist's ``load``
    deals each worker one run of consecutive tests first, which would hand every slow
    test to the first worker; with work stealing a worker that runs dry takes half of
    another's queue. Another ``--dist`` is left as asked."""
    if config.getoption("dist", "load") != "load":
        return None
    from xdist.scheduler import WorkStealingScheduling

    return WorkStealingScheduling(config, log)


def _suite_threads() -> AutoThreads | None:
    """torch's threads for this test process. Under xdist (``-n N``) the workers share the
    cores: each takes its share, fixed, from the start. A look between tests cannot see a
    long test's neighbour start compiling, and a small eager network on two OpenMP threads
    that another process keeps descheduling runs about ten times slower (measured in
    docs/contributing.md).
    One process: kept off the cores other processes use (rlx.run.threads), looked at
    again between tests at most every 5 s. A user's ``OMP_NUM_THREADS`` is left alone."""
    if threads_are_set_by_user():
        return None
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, usable_cores() // workers))
        return None
    return AutoThreads()


_CPU_THREADS = _suite_threads()


@pytest.fixture(autouse=True)
def _cpu_threads() -> None:
    if _CPU_THREADS is not None:
        _CPU_THREADS.update()


@pytest.fixture(autouse=True)
def _matmul_precision():
    """torch's float32 matmul precision is process-wide, and a CUDA build sets it (TF32 by
    default): each test starts from the one the session started with."""
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


class ScriptedEnv(Env):
    """Deterministic episodes: sub-env ``i`` ends every ``i % 5 + 1`` steps.

    Even sub-envs terminate, odd ones truncate. The reward of a step is ``step + 1``
    within the episode (so an episode of length L returns L (L + 1) / 2) plus
    ``0.5 * action``. The observation is ``[steps_so_far, i]``.
    """

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(2,), device=self.device)
        self.action_spec = Categorical(2, device=self.device)
        self.index = torch.arange(num_envs, device=self.device)
        self.lengths = self.index % 5 + 1
        self.steps = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def _obs(self) -> torch.Tensor:
        return torch.stack([self.steps.float(), self.index.float()], -1)

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        self.steps.zero_()
        return self._obs()

    def step(self, actions: torch.Tensor) -> TensorDict:
        self.steps += 1
        rewards = self.steps.float() + 0.5 * actions.float()
        done = self.steps >= self.lengths
        final_obs = self._obs()
        self.steps = torch.where(done, 0, self.steps)
        terminated = done & (self.index % 2 == 0)
        truncated = done & (self.index % 2 == 1)
        return TensorDict(
            {
                "obs": self._obs(),
                "rewards": rewards.unsqueeze(-1),
                "terminated": terminated.unsqueeze(-1),
                "truncated": truncated.unsqueeze(-1),
                "final_obs": final_obs,
            },
            batch_size=[self.num_envs],
            device=self.device,
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"steps": self.steps.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.steps.copy_(state["steps"])


class MaskedChoiceEnv(Env):
    """One-step bandit with a Composite observation and an ``action_mask``.

    Four actions; only two (chosen at random per step) are valid. Reward 1 for the
    valid action with the higher index, 0 for the other; every episode lasts one step.
    """

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Composite(
            obs=Unbounded(shape=(4,), device=self.device),
            action_mask=Categorical(2, shape=(4,), dtype=torch.bool, device=self.device),
            device=self.device,
        )
        self.action_spec = Categorical(4, device=self.device)

    def _new(self) -> TensorDict:
        keys = torch.rand(self.num_envs, 4, device=self.device)
        top2 = keys.topk(2, dim=-1).indices
        mask = torch.zeros(self.num_envs, 4, dtype=torch.bool, device=self.device)
        mask.scatter_(1, top2, True)
        self.mask = mask
        return TensorDict({"obs": mask.float(), "action_mask": mask}, batch_size=[self.num_envs], device=self.device)

    def reset(self, *, config: dict[str, Any] | None = None) -> TensorDict:
        return self._new()

    def step(self, actions: torch.Tensor) -> TensorDict:
        best = torch.where(self.mask, torch.arange(4, device=self.device), -1).argmax(-1)
        valid = self.mask.gather(1, actions.long().view(-1, 1)).squeeze(1)
        self.invalid_taken = getattr(self, "invalid_taken", 0) + int((~valid).sum())
        rewards = (actions == best).float().unsqueeze(-1)
        final = TensorDict({"obs": self.mask.float(), "action_mask": self.mask}, batch_size=[self.num_envs])
        return TensorDict(
            {
                "obs": self._new(),
                "rewards": rewards,
                "terminated": torch.ones(self.num_envs, 1, dtype=torch.bool, device=self.device),
                "final_obs": final,
            },
            batch_size=[self.num_envs],
            device=self.device,
        )


@pytest.fixture
def scripted_env() -> type[ScriptedEnv]:
    return ScriptedEnv


@pytest.fixture
def masked_choice_env() -> type[MaskedChoiceEnv]:
    return MaskedChoiceEnv


def best_until(algo: Any, metric: str, goal: float, max_env_steps: int) -> float:
    """Train ``algo`` (collect, then step on that rollout) until a collect's ``metric``
    reaches ``goal`` or ``max_env_steps`` run out: the learning tests' loop.

    Returns:
        The best value of ``metric`` (NaN, when no episode ended, never counts; ``-inf``
        if no value did).
    """
    best = -math.inf
    while algo.env_steps < max_env_steps and best < goal:
        value = algo.collect()[metric]
        algo.step()
        if not math.isnan(value):
            best = max(best, value)
    return best


def through_bytes(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` saved with ``torch.save`` and loaded back with ``weights_only=True``, as
    from a checkpoint file: it loads only if it holds plain tensors and containers."""
    blob = io.BytesIO()
    torch.save(state, blob)
    blob.seek(0)
    return torch.load(blob, weights_only=True)


@pytest.fixture
def saved_and_loaded() -> Any:
    """:func:`through_bytes`, for the state round-trip tests."""
    return through_bytes


def train_resuming(make: Any, resume_at: int | None, iterations: int = 3, before: Any = None) -> Any:
    """``iterations`` collect/step rounds of ``make()``; before round ``resume_at`` (``None``:
    never) the run goes on in a new ``make()`` loaded from the old one's ``state_dict()``,
    as a resumed run does. ``before(algo, k)`` runs first in every round k. Returns the
    algorithm that ran last: compare ``train_resuming(make, None)`` with
    ``train_resuming(make, k)`` for exact resume."""
    algo = make()
    for k in range(iterations):
        if before is not None:
            before(algo, k)
        if k == resume_at:
            state = algo.state_dict()
            algo = make()
            algo.load_state_dict(state)
        algo.collect()
        algo.step()
    return algo


@pytest.fixture
def resumed_run() -> Any:
    """:func:`train_resuming`, for the exact-resume tests."""
    return train_resuming


@pytest.fixture
def train_best() -> Any:
    """:func:`best_until`, for the learning tests."""
    return best_until


def best_pendulum_return(env_cls, *, max_env_steps: int = 400_000, goal: float = -400.0) -> tuple[float, int]:
    """Train PPO (the shipped Pendulum settings) on ``env_cls`` until the mean episode
    return reaches ``goal`` or the budget ends: ``(best return, env steps)``. The learning
    test every Pendulum-shaped adapter runs."""
    from rlx import AlgorithmConfig

    algo = AlgorithmConfig(num_envs=64, horizon=64, num_sgd_iters=10, sgd_minibatch_size=1024, gamma=0.9,
                           optimizer_config={"lr": 1e-3}, model_config={"hiddens": [64, 64], "activation_fn": "tanh"},
                           vf_clip_param=None, max_grad_norm=0.5, device="cpu", seed=0).build(env_cls)
    return best_until(algo, "episodes/return_mean", goal, max_env_steps), algo.env_steps


@pytest.fixture
def pendulum_learner():
    """:func:`best_pendulum_return`, for the adapters' learning tests."""
    return best_pendulum_return
