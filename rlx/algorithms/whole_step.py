"""One CUDA graph for a step's whole device work: what PPO, NPG and distillation share.

Each of them writes ``step()``'s device work as one function, ``update_phase``, inside
which the host decides nothing; step() calls it through ``run_update_phase``: the function
itself, or with ``cudagraphs`` a :class:`~rlx.core.cuda_graphs.GraphedCall` of it, made
again after each load (a captured graph reads the optimizer state it was captured with,
which a load replaces).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlx.core.cuda_graphs import GraphedCall

__all__ = ["WholeStepGraph"]


class WholeStepGraph:
    """Mixed in before :class:`~rlx.algorithms.base.Algorithm`; the algorithm defines
    ``update_phase`` and sets ``run_update_phase = self._wrapped_phase()`` once built."""

    @property
    def graphs_whole_step(self) -> bool:
        """Whether one CUDA graph holds all of step()'s device work (``cudagraphs``)."""
        return self.uses_cuda_graphs

    def _wrapped_phase(self) -> Callable[[], Any]:
        """``update_phase``, captured whole in a CUDA graph where :attr:`graphs_whole_step`."""
        if not self.graphs_whole_step:
            return self.update_phase
        return GraphedCall(self.update_phase, self.device, before_capture=self.drop_grads)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.run_update_phase = self._wrapped_phase()
