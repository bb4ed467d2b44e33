"""`JobPlacement`: the Trainer's attributes for this process's place in the job, read from its strategy."""
from __future__ import annotations

from trainer.strategies.strategy import Strategy


class JobPlacement:
    """``global_rank``, ``local_rank``, ``node_rank``, ``world_size``, ``num_nodes``, ``is_global_zero``."""

    _strategy: Strategy

    @property
    def global_rank(self) -> int:
        """Rank of this process among all processes."""
        return self._strategy.global_rank

    @property
    def local_rank(self) -> int:
        """Rank of this process on its node (selects its device)."""
        return self._strategy.local_rank

    @property
    def node_rank(self) -> int:
        """Rank of this node among the nodes."""
        return self._strategy.node_rank

    @property
    def world_size(self) -> int:
        """Number of processes, W."""
        return self._strategy.world_size

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return self._strategy.num_nodes

    @property
    def is_global_zero(self) -> bool:
        """Whether this is global rank 0 (the process that logs and writes files)."""
        return self._strategy.is_global_zero
