"""rlx's on-policy algorithms on one engine: the shared base and PPO."""
