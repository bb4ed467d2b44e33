"""What the strategy and the resume path need of a loader that shards itself.

A loader with these members (a `trainer.data.dali.DALILoader`, or any of the same shape) is not
given a sampler: the strategy asks it for this rank's shard, and a checkpoint saves and restores
its position through its own ``state_dict``. Any other iterable is a plain loader.
"""
from __future__ import annotations

from typing import Iterator, Protocol, runtime_checkable


@runtime_checkable
class ShardingLoader(Protocol):
    """A loader that shards itself and keeps its own position."""

    def sharded(self, shard_id: int, num_shards: int, training: bool) -> ShardingLoader:
        """A copy reading shard ``shard_id`` of ``num_shards`` (``training``: the fit's loader)."""
        ...

    def state_dict(self) -> dict[str, object]:
        """The position inside the epoch (what a checkpoint saves)."""
        ...

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Continue from a saved position."""
        ...

    def __iter__(self) -> Iterator[object]: ...  # a user's batches
