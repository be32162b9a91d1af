"""Collecting experience: the ``[B, T+1]`` buffer and its keys, episode statistics, the
T loop (:class:`~rlx.collect.rollout.Rollout`) and evaluation on a separate env."""
