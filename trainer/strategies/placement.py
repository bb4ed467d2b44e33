"""`JobPlacement`: ``global_rank`` and the other attributes of this process's place in the job,
written once for the `Strategy` (which reads its cluster environment) and the Trainer (which reads
its strategy, so that a strategy's own answer is the Trainer's)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.contracts.internals import JobRanksView


class JobPlacement:
    """``global_rank``, ``local_rank``, ``node_rank``, ``world_size``, ``num_nodes``, ``is_global_zero``,
    read from `_job_ranks`, which the class using it names."""

    @property
    def _job_ranks(self) -> JobRanksView:
        raise NotImplementedError(f"{type(self).__name__} must say where its ranks are read from (_job_ranks)")

    @property
    def global_rank(self) -> int:
        """Rank of this process among all processes."""
        return self._job_ranks.global_rank

    @property
    def local_rank(self) -> int:
        """Rank of this process on its node (selects its device)."""
        return self._job_ranks.local_rank

    @property
    def node_rank(self) -> int:
        """Rank of this node among the nodes."""
        return self._job_ranks.node_rank

    @property
    def world_size(self) -> int:
        """Number of processes, W."""
        return self._job_ranks.world_size

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return self._job_ranks.num_nodes

    @property
    def is_global_zero(self) -> bool:
        """Whether this is global rank 0 (the process that logs and writes files)."""
        return self._job_ranks.is_global_zero
