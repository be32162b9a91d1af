"""CueRecall: the cue, the query, the reward and the episode ends."""

from __future__ import annotations

import pytest
import torch

from rlx.envs import CueRecall, check_env


@pytest.mark.parametrize("delay", [1, 5])
def test_the_cue_shows_only_at_the_first_step_and_the_query_only_at_the_last(delay: int) -> None:
    env = CueRecall(64, delay=delay)
    obs = env.reset()
    cue = obs[:, 1].long()
    assert torch.equal(obs[:, 0] + obs[:, 1], torch.ones(64)) and (obs[:, 2] == 0).all()
    actions = torch.randint(0, 2, (64,))
    for k in range(1, delay + 1):
        out = env.step(actions)
        assert (out["rewards"] == 0).all() and not out["terminated"].any() and not out["truncated"].any()
        expected = torch.tensor([0.0, 0.0, float(k == delay)]).expand(64, 3)
        assert torch.equal(out["obs"], expected)
    out = env.step(actions)
    assert out["terminated"].all() and not out["truncated"].any()
    assert torch.equal(out["rewards"].squeeze(-1), torch.where(actions == cue, 1.0, -1.0))
    # Every sub-env started its next episode with a fresh cue.
    new_obs = out["obs"]
    assert torch.equal(new_obs[:, 0] + new_obs[:, 1], torch.ones(64)) and (new_obs[:, 2] == 0).all()


def test_the_query_observation_is_the_same_for_both_cues() -> None:
    env = CueRecall(256, delay=3)
    env.reset()
    for _ in range(3):
        out = env.step(torch.zeros(256, dtype=torch.long))
    assert torch.equal(out["obs"], torch.tensor([0.0, 0.0, 1.0]).expand(256, 3))
    cues = env.state[:, 0]
    assert 0 < cues.sum() < 256  # both cues are drawn


def test_cue_recall_passes_the_env_checks_and_rejects_a_bad_delay() -> None:
    assert check_env(lambda n, h=None, device="cpu": CueRecall(n, h, device=device, delay=4)) == []
    with pytest.raises(ValueError, match="delay must be an int >= 1, got 0"):
        CueRecall(2, delay=0)
