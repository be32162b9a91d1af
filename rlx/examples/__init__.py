"""Runnable examples: ``python -m rlx.examples.cartpole``."""
