"""Giving each rank its own shard of a DataLoader's data.

- training: a `GlobalBatchSampler` (trainer/data/global_batch_sampler.py), on any number of
  ranks, one included: the epoch's order and its optimizer steps do not depend on the world size.
- ``UnpaddedDistributedSampler``: disjoint shards that cover the dataset exactly once, for exact
  evaluation (``DistributedSampler`` pads with duplicates so that all ranks have equal length).
- ``distribute_dataloader``: rebuild a DataLoader around a distributed sampler, keeping every
  other setting of the user's loader.
- ``set_epoch``: reshuffle per epoch, whatever sampler the loader holds.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Iterator

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

from trainer.data.global_batch_sampler import GlobalBatchSampler, global_batch_sampler
from trainer.contracts.user_line import user_stacklevel

__all__ = ["UnpaddedDistributedSampler", "distribute_dataloader", "set_epoch", "warn_full_data"]

# DataLoader arguments copied from the user's loader; the sampling arguments are rebuilt.
_KEPT_LOADER_ARGS = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)


class UnpaddedDistributedSampler(DistributedSampler[int]):
    """Shard ``dataset`` over ``num_replicas`` ranks so that every index appears exactly once.

    Rank ``r`` gets positions ``r, r + num_replicas, ...`` of the (optionally shuffled) index
    list, so ranks may differ by one sample. Use it for evaluation: metrics reduced over ranks
    then count each sample once. Ranks can therefore run a different number of batches; code that
    runs a collective per batch must not use it. ``shuffle`` permutes with ``seed + epoch``
    (call ``set_epoch``) identically on every rank.

    ``contiguous=True`` gives rank ``r`` the ``r``-th of ``num_replicas`` consecutive blocks of
    the index list instead (the first ``len % num_replicas`` blocks one longer), so the ranks'
    outputs concatenated in rank order are in the list's order (what ``predict`` returns).
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        num_replicas: int,
        rank: int,
        shuffle: bool = False,
        seed: int = 0,
        contiguous: bool = False,
    ) -> None:
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(
                f"UnpaddedDistributedSampler: num_replicas must be an int >= 1, got {num_replicas!r}."
            )
        if not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ValueError(
                f"UnpaddedDistributedSampler: rank={rank!r} must be in 0..{num_replicas - 1} "
                f"for num_replicas={num_replicas}."
            )
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.total_size = len(dataset)  # type: ignore[arg-type]
        self.contiguous = contiguous
        base, extra = divmod(self.total_size, num_replicas)
        self._block_start = rank * base + min(rank, extra)
        strided = len(range(rank, self.total_size, num_replicas))
        self.num_samples = base + int(rank < extra) if contiguous else strided

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            indices = torch.randperm(self.total_size, generator=generator).tolist()
        else:
            indices = list(range(self.total_size))
        if self.contiguous:
            return iter(indices[self._block_start : self._block_start + self.num_samples])
        return iter(indices[self.rank :: self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples


def distribute_dataloader(
    dataloader: DataLoader[Any],
    *,
    num_replicas: int,
    rank: int,
    shuffle: bool | None = None,
    seed: int = 0,
    evaluation: bool = False,
    contiguous: bool = False,
    share_seed: Callable[[int], int] | None = None,
) -> DataLoader[Any]:
    """Return a DataLoader that yields only this rank's shard of ``dataloader``'s data.

    Training (``evaluation=False``): a `GlobalBatchSampler` as the batch sampler, also for
    ``num_replicas=1``: each epoch one permutation (``shuffle``) drawn as a ``RandomSampler``
    draws it (its seed from torch's default generator, rank 0's shared by ``share_seed``), or
    from the user's ``generator`` (the loader's, or its ``RandomSampler``'s) when there is one;
    the loader's ``drop_last`` drops the epoch's shorter last global window. A loader with
    ``batch_size=None`` (no batching) gets a ``DistributedSampler`` instead (unchanged at one rank).
    With ``evaluation=True`` an ``UnpaddedDistributedSampler`` (each sample exactly once;
    ``contiguous=True``: in consecutive blocks, for ``predict``). ``shuffle=None`` keeps the
    original order type: a ``RandomSampler`` shuffles, a ``SequentialSampler`` does not. Batch
    size, ``drop_last``, a plain ``BatchSampler``'s settings and every other DataLoader argument
    (workers, ``collate_fn``, pinning, ``generator``, ...) are kept.

    Returned unchanged: loaders that already shard (a ``DistributedSampler`` as sampler or inside
    the batch sampler), loaders over an ``IterableDataset`` (the dataset must shard itself, e.g.
    by ``torch.distributed.get_rank()``), and, with a warning when ``num_replicas > 1``, loaders
    with a custom sampler or batch sampler, DataLoader subclasses and iterables that are not
    DataLoaders, which cannot be rebuilt without losing behaviour.
    """
    _check_place(num_replicas, rank)
    if _kept_as_is(dataloader, num_replicas):
        return dataloader

    batch_sampler = dataloader.batch_sampler
    user_batch_sampler = dataloader.batch_size is None and batch_sampler is not None
    inner = getattr(batch_sampler, "sampler", None) if user_batch_sampler else dataloader.sampler
    custom = _custom_part(dataloader, inner, batch_sampler if user_batch_sampler else None)
    if custom is not None:
        warn_full_data(f"the DataLoader uses {custom}", num_replicas)
        return dataloader

    if shuffle is None:
        shuffle = isinstance(inner, RandomSampler)
    kwargs = rebuild_kwargs(dataloader)
    if not evaluation and (user_batch_sampler or dataloader.batch_size is not None):
        # the user's batch sampler (torch's Sampler type declares no batch size), or the DataLoader's
        batching: Any = batch_sampler if user_batch_sampler else dataloader
        size, drop_last = batching.batch_size, batching.drop_last
        kwargs["batch_sampler"] = GlobalBatchSampler(
            len(dataloader.dataset),  # type: ignore[arg-type]
            size,
            num_replicas=num_replicas,
            rank=rank,
            shuffle=shuffle,
            generator=_user_generator(inner, dataloader),
            share_seed=share_seed,
            drop_last=drop_last,
        )
        return DataLoader(dataloader.dataset, **kwargs)
    if num_replicas == 1:
        return dataloader
    sampler: DistributedSampler[int]
    if evaluation:
        sampler = UnpaddedDistributedSampler(
            dataloader.dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed,
            contiguous=contiguous,
        )
    else:
        sampler = DistributedSampler(
            dataloader.dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed
        )
    if user_batch_sampler:
        batch_size, drop_last = batch_sampler.batch_size, batch_sampler.drop_last  # type: ignore[union-attr]
        kwargs["batch_sampler"] = BatchSampler(sampler, batch_size=batch_size, drop_last=drop_last)
    else:
        kwargs.update(sampler=sampler, batch_size=dataloader.batch_size, drop_last=dataloader.drop_last)
    return DataLoader(dataloader.dataset, **kwargs)


def _kept_as_is(dataloader: Any, num_replicas: int) -> bool:
    if not isinstance(dataloader, DataLoader):
        warn_full_data(f"a plain iterable ({type(dataloader).__qualname__}), not a DataLoader", num_replicas)
        return True
    return _shards_already(dataloader)


def _check_place(num_replicas: Any, rank: Any) -> None:
    if not isinstance(num_replicas, int) or num_replicas < 1:
        raise ValueError(f"distribute_dataloader: num_replicas must be an int >= 1, got {num_replicas!r}.")
    if not isinstance(rank, int) or not 0 <= rank < num_replicas:
        raise ValueError(
            f"distribute_dataloader: rank={rank!r} must be in 0..{num_replicas - 1} "
            f"for num_replicas={num_replicas}."
        )


def _shards_already(dataloader: DataLoader[Any]) -> bool:
    """An ``IterableDataset`` (it shards itself), or a loader already given a distributed sampler."""
    return (
        isinstance(dataloader.dataset, IterableDataset)
        or _is_distributed(dataloader)
        or global_batch_sampler(dataloader) is not None
    )


def set_epoch(dataloader: Any, epoch: int) -> None:
    """Call ``set_epoch(epoch)`` on the loader's sampler, batch sampler and batch sampler's sampler.

    Objects without ``set_epoch`` are skipped, so any iterable may be passed.
    """
    seen: set[int] = set()
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    for obj in (
        getattr(dataloader, "sampler", None),
        batch_sampler,
        getattr(batch_sampler, "sampler", None),
    ):
        if obj is not None and id(obj) not in seen and callable(getattr(obj, "set_epoch", None)):
            seen.add(id(obj))
            obj.set_epoch(epoch)


def _user_generator(sampler: Any, dataloader: DataLoader[Any]) -> torch.Generator | None:
    own: torch.Generator | None = getattr(sampler, "generator", None)  # a sampler's own, if it has one
    return own if own is not None else dataloader.generator


def warn_full_data(what: str, num_replicas: int) -> None:
    """Warn that a loader (``what`` says why) is left as it is, so each of ``num_replicas`` ranks sees all its data."""
    if num_replicas == 1:
        return  # one rank: the full data is its share
    warnings.warn(
        f"distribute_dataloader: {what}, which cannot be given a distributed sampler without "
        f"losing its behaviour, so it is left as is and EACH OF THE {num_replicas} RANKS WILL SEE "
        f"THE FULL DATA. To shard it, build a DataLoader with `sampler=DistributedSampler(dataset)` "
        f"(or make your sampler yield only this rank's indices, e.g. by wrapping a "
        f"DistributedSampler).",
        UserWarning,
        stacklevel=user_stacklevel(),
    )


def _is_distributed(dataloader: DataLoader[Any]) -> bool:
    batch_sampler = dataloader.batch_sampler
    return any(
        isinstance(obj, DistributedSampler)
        for obj in (dataloader.sampler, batch_sampler, getattr(batch_sampler, "sampler", None))
    )


def _custom_part(dataloader: DataLoader[Any], sampler: Any, batch_sampler: Any) -> str | None:
    """Describe what makes the loader impossible to rebuild faithfully, or None."""
    if type(dataloader) is not DataLoader:
        return f"a DataLoader subclass ({type(dataloader).__qualname__})"
    if batch_sampler is not None and type(batch_sampler) is not BatchSampler:
        return f"a custom batch_sampler ({type(batch_sampler).__qualname__})"
    if type(sampler) is SequentialSampler:
        return None
    if type(sampler) is RandomSampler:
        if sampler.replacement or sampler.num_samples != len(sampler.data_source):
            return "a RandomSampler with replacement or num_samples"
        return None
    return f"a custom sampler ({type(sampler).__qualname__})"


def rebuild_kwargs(dataloader: DataLoader[Any]) -> dict[str, Any]:
    """The arguments to build an equivalent DataLoader, except dataset, sampler and batching."""
    # Only arguments this torch version's DataLoader keeps (in_order is recent): read from the
    # loader itself, not from the signature of ``DataLoader.__init__``, which a library may have
    # wrapped as ``(*args, **kwargs)`` (then every argument, ``collate_fn`` too, would be lost)
    return {name: getattr(dataloader, name) for name in _KEPT_LOADER_ARGS if hasattr(dataloader, name)}
