"""Lightning's distributed sampler injection, which Lockstep follows under ``python -m trainer.as_lightning``.

Where Lockstep's own rule (trainer/data/distributed_sampler.py) gives each sample to one rank in the
one-process order and leaves what it cannot rebuild as it is, Lightning's, on several ranks:

- training: a ``DistributedSampler`` that always shuffles (``seed + epoch``) and pads the shares to
  equal length, over the dataset for a ``RandomSampler`` or ``SequentialSampler``, else over the
  positions of what the loader's own sampler draws that epoch (Lightning's ``DistributedSamplerWrapper``:
  chemprop's ``SeededSampler``);
- validation and test: the same, shuffled only where the loader shuffles, so shares are padded;
- predict: unpadded strided shares of the loader's sampler (Lightning's ``UnrepeatedDistributedSampler``),
  each rank's predictions its own;
- the loader is built again with that sampler, a ``DataLoader`` subclass too, from the attributes
  its constructor names (neuralforecast's ``TimeSeriesLoader``); a custom batch sampler is built
  again around it from its ``batch_size`` and ``drop_last``.

Left as they are: loaders over an ``IterableDataset``, loaders whose sampler is already a
``DistributedSampler``, iterables that are not DataLoaders, and, with Lockstep's warning, loaders
that cannot be built again from their attributes (where Lightning raises).
"""
from __future__ import annotations

import inspect
from typing import Any, Iterable, Iterator

from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler, SequentialSampler

from trainer.data.distributed_sampler import warn_full_data

__all__ = ["SamplerShare", "lightning_distributed"]


class SamplerShare(DistributedSampler[Any]):
    """This rank's share of what ``sampler`` draws each epoch, as Lightning's ``DistributedSamplerWrapper``
    gives it: a ``DistributedSampler`` over the positions of the drawn indices (``shuffle``: permuted
    with ``seed + epoch``; padded to equal shares), or with ``padded=False`` strided shares of them,
    ranks differing by one at most (Lightning's predict). ``set_epoch`` reaches ``sampler`` too."""

    def __init__(
        self, sampler: Iterable[Any], *, num_replicas: int, rank: int, shuffle: bool, seed: int, padded: bool = True
    ) -> None:
        super().__init__(range(len(sampler)), num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)  # type: ignore[arg-type]
        self.sampler = sampler
        if not padded:
            self.total_size = len(sampler)  # type: ignore[arg-type]
            self.num_samples = len(range(rank, self.total_size, num_replicas))

    def __iter__(self) -> Iterator[Any]:
        drawn = list(self.sampler)  # one draw of the user's sampler per epoch, as Lightning's
        return iter([drawn[position] for position in super().__iter__()])

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        forward = getattr(self.sampler, "set_epoch", None)
        if callable(forward):
            forward(epoch)


def lightning_distributed(dataloader: Any, stage: str, *, num_replicas: int, rank: int, seed: int) -> Any:
    """``dataloader`` with this rank's share of its data as Lightning gives it to rank ``rank`` of
    ``num_replicas`` in ``stage`` (``fit`` for the training loader, ``validate``, ``test``, ``predict``)."""
    if (
        not isinstance(dataloader, DataLoader)
        or isinstance(dataloader.dataset, IterableDataset)
        or isinstance(dataloader.sampler, DistributedSampler)
    ):
        return dataloader
    shuffle = stage == "fit" or _shuffles(dataloader)  # Lightning shuffles every training loader
    sampler: DistributedSampler[Any]
    if stage == "predict":
        # Lightning's UnrepeatedDistributedSampler seeds its shuffle with the epoch alone
        sampler = SamplerShare(dataloader.sampler, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=0,
                               padded=False)
    elif type(dataloader.sampler) in (RandomSampler, SequentialSampler):
        sampler = DistributedSampler(dataloader.dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
    else:
        sampler = SamplerShare(dataloader.sampler, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
    rebuilt = _rebuilt(dataloader, sampler)
    if rebuilt is None:
        warn_full_data(f"the DataLoader ({type(dataloader).__qualname__}) cannot be built again from its attributes",
                       num_replicas)
        return dataloader
    return rebuilt


def _shuffles(dataloader: DataLoader[Any]) -> bool:
    batch_sampler = dataloader.batch_sampler
    sampler = getattr(batch_sampler, "sampler", batch_sampler) if batch_sampler is not None else dataloader.sampler
    return isinstance(sampler, RandomSampler)


def _rebuilt(dataloader: DataLoader[Any], sampler: DistributedSampler[Any]) -> DataLoader[Any] | None:
    """``type(dataloader)`` built again with ``sampler``, or None where it cannot be.

    As Lightning does for a loader it did not see built: the constructor's arguments are the
    loader's attributes of the same names that differ from their defaults (a constructor taking
    ``**kwargs`` also takes ``DataLoader``'s)."""
    params, variadic = _constructor_parameters(type(dataloader))
    batching = _batching(dataloader, sampler)
    if batching is None:
        return None
    kwargs = {**_attribute_arguments(dataloader, params), "dataset": dataloader.dataset, **batching}
    if _unfilled(params, kwargs) or (not variadic and not set(kwargs) <= set(params)):
        return None
    try:
        return type(dataloader)(**kwargs)
    except TypeError:
        return None


def _constructor_parameters(cls: type) -> tuple[dict[str, inspect.Parameter], bool]:
    """The parameters a loader class's constructor takes, and whether it takes ``**kwargs``."""
    params = dict(inspect.signature(cls.__init__).parameters)  # type: ignore[misc]
    variadic = any(p.kind is p.VAR_KEYWORD for p in params.values())
    if variadic:
        params.update(inspect.signature(DataLoader.__init__).parameters)
    params.pop("self", None)
    return params, variadic


def _attribute_arguments(dataloader: DataLoader[Any], params: dict[str, inspect.Parameter]) -> dict[str, Any]:
    attributes = {k: v for k, v in vars(dataloader).items() if not k.startswith("_")}
    attributes["multiprocessing_context"] = dataloader.multiprocessing_context
    return {k: v for k, v in attributes.items() if k in params and params[k].default is not v}


def _unfilled(params: dict[str, inspect.Parameter], kwargs: dict[str, Any]) -> bool:
    """Whether a required positional parameter has no value in ``kwargs``."""
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.kind in positional and p.default is p.empty and name not in kwargs for name, p in params.items())


def _batching(dataloader: DataLoader[Any], sampler: DistributedSampler[Any]) -> dict[str, Any] | None:
    """The sampling arguments: ``sampler``, or the user's batch sampler built again around it."""
    batch_sampler: Any = dataloader.batch_sampler
    if dataloader.batch_size is not None or batch_sampler is None:
        return {"sampler": sampler, "shuffle": False, "batch_sampler": None}
    if not (hasattr(batch_sampler, "batch_size") and hasattr(batch_sampler, "drop_last")):
        return None
    try:
        rebuilt = type(batch_sampler)(sampler, batch_size=batch_sampler.batch_size, drop_last=batch_sampler.drop_last)
    except TypeError:
        return None
    return {"sampler": None, "shuffle": False, "batch_sampler": rebuilt, "batch_size": 1, "drop_last": False}
