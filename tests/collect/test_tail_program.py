"""collect's tail (:meth:`rlx.collect.rollout.Rollout.tail`): the values the T loop left
out, ``V(final_obs)`` on the truncated steps, the reward scaler's recursion and merge, and
the rollout's statistics, stacked for the one transfer. ``compile=True`` runs it as one
program; eager runs the same function.

The comparison runs both on the same buffer, from the same state, with the policy in
float64 (``policy.double()``): its values then differ by float64 reassociation (about
1e-15 relative) before both are rounded into the float32 buffer, so they agree to one
float32 rounding (``rtol = 2^-23``). The scaler's float32 recursion rounds once per
step where eager rounds twice (a fused multiply-add), so a running return moves by at
most ``2T 2^-24`` of the largest one, and its merged mean and variance (float64) by as
much relative. A rollout statistic sums at most ``T`` float32 rewards per env (``|r| <=
16.3`` here) in either order: ``T 2^-24 * 16.3 T`` absolute. Counts are exact, and the
episode sums (float64 over float32 rewards) agree to ``N 2^-53`` relative.
"""

from __future__ import annotations

import pytest
import torch

from rlx import AlgorithmConfig
from rlx.core.compiling import WarmProgram
from rlx.envs import Pendulum

B, T = 16, 12


class ShortPendulum(Pendulum):
    """Pendulum that truncates after 5 steps: every collect has truncated steps."""

    max_episode_steps = 5


def _pair(capacity: int | None):
    config = dict(num_envs=B, horizon=T, device="cpu", seed=0, normalize_rewards=True, model_config={"hiddens": [32, 32]})
    eager = AlgorithmConfig(**config).build(ShortPendulum)
    compiled = AlgorithmConfig(**config, compile=True).build(ShortPendulum)
    assert isinstance(compiled.rollout._tail.func, WarmProgram)  # the tail is a compiled program
    for _ in range(2):  # the scaler and the carried episodes have something in them
        eager.collect()
        eager.step()
    compiled.load_state_dict(eager.state_dict())
    for algo in (eager, compiled):
        algo.policy.double()
        if capacity is not None:
            algo.rollout.set_truncation_capacity(capacity)
    return eager, compiled


@pytest.mark.slow
@pytest.mark.parametrize("capacity", [None, 1], ids=["capacity", "overflow"])
def test_the_compiled_tail_gives_what_the_eager_one_gives(capacity: int | None) -> None:
    eager, compiled = _pair(capacity)
    eager.rollout.begin(False)
    eager.rollout.steps(False)  # the T loop alone: the buffer both tails read
    compiled.buffer.update_(eager.buffer)
    got, want = {}, {}
    for algo, out in ((compiled, got), (eager, want)):
        stats = algo.rollout.tail(algo.reward_scaler)
        out.update(stats.to_host())
        algo.rollout.finish(out)  # with an overflow: every step valued after the transfer
    assert want["rollout/truncation_overflow"] == got["rollout/truncation_overflow"] == float(capacity == 1)
    assert set(got) == set(want)
    for key in ("values", "final_values"):
        torch.testing.assert_close(compiled.buffer.get(key), eager.buffer.get(key), rtol=2**-23, atol=1e-30)
    assert int(eager.buffer.get("truncated")[:, :T].sum()) > 0
    bound = 2 * T * 2**-24
    torch.testing.assert_close(compiled.reward_scaler.returns, eager.reward_scaler.returns, rtol=0,
                               atol=bound * float(eager.reward_scaler.returns.abs().max()))
    for name in ("mean", "var"):
        torch.testing.assert_close(getattr(compiled.reward_scaler.stats, name), getattr(eager.reward_scaler.stats, name),
                                   rtol=bound, atol=0)
    assert compiled.reward_scaler.stats.count.item() == eager.reward_scaler.stats.count.item() == 3 * B * T
    sums = T * 2**-24 * 16.3 * T
    for name, value in want.items():
        if name.startswith(("returns/", "rewards/")):
            assert abs(got[name] - value) <= 2 * sums, name
        elif name in ("episodes/return_sum", "episodes/length_sum"):
            assert got[name] == pytest.approx(value, rel=B * T * 2**-53), name
        else:
            assert got[name] == value, name
    torch.testing.assert_close(compiled.rollout.episode_return, eager.rollout.episode_return, rtol=B * T * 2**-53, atol=0)


def test_the_tail_stacks_its_statistics_in_the_program() -> None:
    """The tail's statistics leave it stacked (``Stats.pack``), so the transfer adds no
    stacking op; an env's own logged scalars, added after it, join the same transfer."""
    algo = AlgorithmConfig(num_envs=4, horizon=8, device="cpu", seed=0).build(ShortPendulum)
    algo.rollout.begin(True)
    algo.rollout.steps(False)
    stats = algo.rollout.tail(None)
    assert stats._packed is not None and stats._packed[0] == list(stats._values)
    stats.add("env/extra", torch.tensor(2.5))
    host = stats.to_host()
    buf = algo.buffer
    ends = (buf.get("truncated") | buf.get("terminated"))[:, :8]
    assert host["env/extra"] == 2.5 and host["episodes/count"] == float(ends.sum()) > 0
