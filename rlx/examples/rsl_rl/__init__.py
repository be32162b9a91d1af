"""Train and play scripts shaped like Isaac Lab's ``scripts/reinforcement_learning/rsl_rl``
(``train.py``, ``play.py``) on :class:`~rlx.examples.windy_reach.WindyReach`, an rsl_rl
``VecEnv``. Each imports its runner in one line, ``from rlx.runners import
OnPolicyRunner``; changed to ``from rsl_rl.runners import OnPolicyRunner`` they run with
rsl_rl 5 unchanged (``tests/runners/test_rsl_rl_scripts.py`` runs both).

    python -m rlx.examples.rsl_rl.train --max_iterations 50
    python -m rlx.examples.rsl_rl.play --num_envs 50
"""
