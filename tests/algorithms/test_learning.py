"""End-to-end learning on real tasks with fixed seeds (thresholds, not timings)."""

from __future__ import annotations

import pytest

from rlx import AlgorithmConfig
from rlx.envs import CartPole, ContinuousDummyEnv
from rlx.examples.cartpole import SOLVED_LENGTH, cartpole_config


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_ppo_solves_cartpole_within_300k_env_steps(seed: int, train_best) -> None:
    algo = cartpole_config(seed=seed, device="cpu").build(CartPole)
    best = train_best(algo, "episodes/length_mean", SOLVED_LENGTH, 300_000)
    assert best >= SOLVED_LENGTH, f"best mean episode length {best:.1f} after {algo.env_steps} env steps"


def test_ppo_learns_the_continuous_dummy_env() -> None:
    # The optimal policy drives the position to 0; random actions keep |x| near its start.
    algo = AlgorithmConfig(
        num_envs=64, horizon=16, device="cpu", seed=0, normalize_obs=True, model_config={"hiddens": [32]},
        optimizer_config={"lr": 3e-3}, horizons_per_env_reset=4,
    ).build(ContinuousDummyEnv)
    first = algo.collect()["rewards/mean"]
    for _ in range(40):
        algo.step()
        last = algo.collect()["rewards/mean"]
    assert last > 0.5 * first  # rewards are -|x|: the mean distance has at least halved


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * __import__("os").sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/statm"), reason="needs /proc")
@pytest.mark.parametrize("algorithm", ["ppo", "npg"])
def test_memory_does_not_grow_across_iterations(algorithm: str) -> None:
    from rlx import NPGConfig

    cls = AlgorithmConfig if algorithm == "ppo" else NPGConfig
    extra = {"sgd_minibatch_size": 512} if algorithm == "ppo" else {"line_search": True}
    algo = cls(num_envs=64, horizon=32, device="cpu", seed=0, normalize_obs=True, model_config={"hiddens": [32]},
               **extra).build(CartPole)
    rss = {}
    for i in range(1, 51):
        algo.collect()
        algo.step()
        if i in (5, 50):
            rss[i] = _rss_bytes()
    assert rss[50] - rss[5] < 4 * 2**20, f"RSS grew by {(rss[50] - rss[5]) / 2**20:.1f} MiB"


@pytest.mark.slow
def test_ppo_with_bf16_autocast_solves_cartpole_on_cpu(train_best) -> None:
    import dataclasses

    algo = dataclasses.replace(cartpole_config(seed=0, device="cpu"), enable_amp=True).build(CartPole)
    best = train_best(algo, "episodes/length_mean", SOLVED_LENGTH, 300_000)
    assert best >= SOLVED_LENGTH, f"best mean episode length {best:.1f} after {algo.env_steps} env steps"


@pytest.mark.slow
def test_ppo_with_micro_batches_solves_cartpole(train_best) -> None:
    import dataclasses

    # 512-sample minibatches in 128-sample passes: the same gradient up to float rounding.
    algo = dataclasses.replace(cartpole_config(seed=0, device="cpu"), micro_batch_size=128).build(CartPole)
    assert algo._micro_units < 512  # the passes really are split
    best = train_best(algo, "episodes/length_mean", SOLVED_LENGTH, 300_000)
    assert best >= SOLVED_LENGTH, f"best mean episode length {best:.1f} after {algo.env_steps} env steps"
