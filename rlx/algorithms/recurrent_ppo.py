"""PPO with a recurrent policy: hidden states that carry across steps and collects and
restart exactly where a sub-env's episode ended.

Nothing of the engine is overridden. The policy (:class:`~rlx.policy.RecurrentPolicy`)
carries a non-empty state, so the rollout stores, per column ``t``, the state before
step ``t`` (``hidden``) and whether step ``t`` begins an episode (``resets``: the
previous step was terminated or truncated, or the env was reset); column ``T``'s state
and flag are carried into the next collect, so episodes longer than ``T`` keep their
memory. The update trains on whole sequences (:class:`~rlx.algorithms.minibatches.Sequences`:
truncated backprop through time, with optional burn-in). GAE, normalizers, AMP, KL
controls and schedules are PPO's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlx.algorithms.minibatches import MinibatchSource, Sequences
from rlx.algorithms.ppo import PPO
from rlx.policy import RecurrentPolicy

if TYPE_CHECKING:
    from rlx.config import RecurrentAlgorithmConfig

__all__ = ["RecurrentPPO", "RecurrentUpdate"]


class RecurrentUpdate:
    """What makes a first-order algorithm (PPO, A2C) recurrent: a policy with a state, and
    minibatches of whole sequences. Mixed in before the algorithm's class."""

    policy_cls = RecurrentPolicy

    def _minibatch_source(self) -> MinibatchSource:
        """The units the update shuffles and slices: sequences of ``seq_len`` steps."""
        return Sequences(self.config.sequence_length, self.config.burn_in)


class RecurrentPPO(RecurrentUpdate, PPO):
    """PPO with a recurrent policy; build it with ``RecurrentAlgorithmConfig(...).build(env_cls)``."""

    config: RecurrentAlgorithmConfig
    policy: RecurrentPolicy
