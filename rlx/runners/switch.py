"""One line for code that builds rsl_rl's runners itself, such as Isaac Lab's newest
backend (``isaaclab_rl.rsl_rl``'s ``create_rsl_rl_runner``, which imports
``OnPolicyRunner`` and ``DistillationRunner`` from ``rsl_rl.runners``)::

    import rlx.runners; rlx.runners.use_rlx_runners()

After it, ``rsl_rl.runners.OnPolicyRunner`` and ``DistillationRunner`` are rlx's, both for
modules imported later and for modules already imported that took the names from it.
rsl_rl's own modules (``rsl_rl.runners.on_policy_runner``, ...) keep theirs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["use_rlx_runners"]

NAMES = ("OnPolicyRunner", "DistillationRunner")


def use_rlx_runners() -> Callable[[], None]:
    """Put rlx's runners where rsl_rl's names are looked up (module docstring); returns a
    function that puts rsl_rl's back.

    Raises:
        ImportError: rsl_rl is not installed (what builds its runners imports it).
    """
    import rsl_rl.runners as rsl_runners

    from rlx.runners.distillation import DistillationRunner
    from rlx.runners.on_policy import OnPolicyRunner

    ours = {"OnPolicyRunner": OnPolicyRunner, "DistillationRunner": DistillationRunner}
    theirs = {name: getattr(rsl_runners, name) for name in NAMES if getattr(rsl_runners, name, None) is not ours[name]}
    replaced: list[tuple[object, str, object]] = []
    for module in list(sys.modules.values()):
        home = getattr(module, "__name__", "") or ""
        if module is not rsl_runners and (home.startswith("rsl_rl.") or home.startswith("rlx.")):
            continue  # rsl_rl's own modules keep their classes; rlx's are rlx's
        namespace = getattr(module, "__dict__", None)
        for name, cls in theirs.items():
            if namespace is not None and namespace.get(name) is cls:
                setattr(module, name, ours[name])
                replaced.append((module, name, cls))

    def restore() -> None:
        for module, name, cls in replaced:
            setattr(module, name, cls)

    return restore
