"""Resolving dataloaders and counting their batches (limits, empty loaders, look-ahead)."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any


def as_loader_list(loaders: Any, name: str) -> list[Any]:
    """A single loader, a list/tuple of loaders, or None, as a list; ``name`` is the argument."""
    if loaders is None:
        return []
    items = list(loaders) if isinstance(loaders, (list, tuple)) else [loaders]
    for item in items:
        check_loader(name, item)
    return items


def check_loader(name: str, loader: Any) -> None:
    """A loader is a DataLoader or any iterable of batches (not a str, not a number)."""
    if isinstance(loader, (str, bytes)) or not isinstance(loader, Iterable):
        raise TypeError(
            f"{name} must be a DataLoader or an iterable of batches, got {type(loader).__name__}"
        )


def dataset_size(loader: Any) -> int | None:
    """The length of a map-style DataLoader's dataset (None: another kind of loader, or no length)."""
    from torch.utils.data import DataLoader, IterableDataset

    dataset = loader.dataset if isinstance(loader, DataLoader) else None
    if dataset is None or isinstance(dataset, IterableDataset):
        return None
    try:
        return len(dataset)  # type: ignore[arg-type]
    except TypeError:
        return None


def has_length(loader: Any) -> bool:
    """Whether ``len(loader)`` works."""
    try:
        len(loader)
    except TypeError:
        return False
    return True


def num_batches(loader: Any, limit: int | float | None, what: str) -> int | None:
    """Batches to draw from ``loader`` this epoch, or None when it has no length and no int limit."""
    try:
        length: int | None = len(loader)
    except TypeError:  # an IterableDataset without __len__
        length = None
    if length == 0:
        raise ValueError(
            f"The {what} dataloader is empty (len 0). Check the dataset size, batch_size and "
            "drop_last, or the sampler's shard for this rank."
        )
    if limit is None:
        return length
    if isinstance(limit, float):
        if length is None:
            if limit == 1.0:
                return None
            raise ValueError(f"limit_{what}_batches={limit} is a fraction, but the {what} loader has no length")
        if limit >= 1.0:
            return length
        if 0.0 < limit and int(length * limit) == 0:  # a fraction meant to run some batches runs none
            raise ValueError(
                f"limit_{what}_batches={limit} of the {length} batches of the {what} dataloader rounds "
                f"down to 0 batches. Use at least 1/{length}, or an int number of batches."
            )
        return int(length * limit)
    return limit if length is None else min(limit, length)


def iterate_with_lookahead(
    loader: Iterable[Any],
    limit: int | None,
    start: int = 0,
    rank: int | None = None,
    epoch: int = 0,
    on_fetch_error: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, Any, bool]]:
    """Yield ``(batch_idx, batch, is_last)``; the epoch's end is learned one batch ahead.

    ``start`` is the index of the loader's first batch (after a mid-epoch resume) and
    ``limit`` the epoch's total number of batches.

    Knowing the last batch before running it lets its accumulation window sync and step even
    when the loader has no length. With ``rank`` (several processes), a loader that ends before
    ``limit`` raises `short_loader_error` instead of ending the epoch on this rank alone: the
    other ranks would wait in the next collective for a rank that never joins it.
    When fetching a batch raises, ``on_fetch_error`` is called with that batch's index first.
    """
    if limit is not None and start >= limit:
        return
    it = iter(loader)
    fetch = _Fetch(it, limit, rank, epoch, on_fetch_error)
    current, idx = fetch(start), start
    while current is not _END:
        upcoming = _END if limit is not None and idx + 1 >= limit else fetch(idx + 1)
        yield idx, current, upcoming is _END
        current, idx = upcoming, idx + 1


_END = object()


class _Fetch:
    """Draws batch ``idx`` of the epoch: the batch, or `_END` when the loader has ended."""

    def __init__(
        self, it: Iterator[Any], limit: int | None, rank: int | None, epoch: int,
        on_fetch_error: Callable[[int], None] | None,
    ) -> None:
        self.it, self.limit, self.rank, self.epoch, self.on_fetch_error = it, limit, rank, epoch, on_fetch_error

    def __call__(self, idx: int) -> Any:
        try:
            return next(self.it)
        except StopIteration:
            if self.rank is not None and self.limit is not None:
                # raised before the batch ahead of it runs, so no rank enters the step's all-reduce alone
                raise short_loader_error("train", self.rank, idx, self.limit, self.epoch) from None
            return _END
        except Exception:
            if self.on_fetch_error is not None:
                self.on_fetch_error(idx)
            raise


def check_trained_some(seen: int) -> None:
    """Refuse an epoch in which the train loader yielded no batch (``seen`` batches trained)."""
    if seen == 0:
        raise ValueError(
            "The train dataloader produced no batches this epoch. Check the dataset, the "
            "sampler and drop_last."
        )


def short_loader_error(
    what: str, rank: int, yielded: int, expected: int, epoch: int | None = None
) -> ValueError:
    """The error of a rank whose ``what`` dataloader yielded ``yielded`` of ``expected`` batches."""
    when = f" of epoch {epoch}" if epoch is not None else ""
    return ValueError(
        f"Rank {rank}: the {what} dataloader ended before batch_idx {yielded}{when}: it yielded "
        f"{yielded} batches, fewer batches than len() announced ({expected}). Every rank plans the "
        "epoch on len(), so a rank that runs out early would leave the others waiting in a "
        "collective it never joins. Make the loader's __len__ match what it yields (or remove "
        "__len__: the ranks then agree batch by batch when to stop)."
    )


def loader_batch_size(loader: Any) -> int | None:
    """The loader's micro batch size, when it declares one."""
    size = getattr(loader, "batch_size", None)
    if size is None:
        size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return size

