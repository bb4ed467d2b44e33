"""The one walk through a batch: which containers hold its tensors, and how to rebuild them.

A batch is a tensor or any nesting of mappings, sequences (lists, tuples, namedtuples) and
dataclasses (their ``init`` fields); strings, bytes and every other object are leaves. Moving a
batch (`trainer.accelerators.accelerator.move_to_device`), prefetching it, weighting ``self.log``
epoch means by its size and counting ThroughputMonitor samples all go through this module, so
they agree on what a batch holds.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Callable

import torch

__all__ = ["apply_to_tensors", "batch_size", "leaves", "tensors"]


def _children(item: Any) -> Iterable[Any] | None:
    """The parts of a container, in order, or None for a leaf."""
    kind = type(item)
    parts: Iterable[Any]  # a typed name, not a cast: this walk runs for every batch
    if kind is tuple or kind is list:  # the common batches first: the ABC checks cost more
        parts = item
        return parts
    if kind is dict:
        parts = item.values()
        return parts
    if isinstance(item, (str, bytes)):
        return None
    if isinstance(item, Mapping):
        return item.values()
    if isinstance(item, Sequence):
        return item
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return [getattr(item, f.name) for f in dataclasses.fields(item) if f.init]
    return None


def leaves(batch: Any) -> Iterator[Any]:
    """Every leaf of ``batch`` (tensors and other objects), depth first, in container order."""
    stack = [batch]
    while stack:
        item = stack.pop()
        children = None if isinstance(item, torch.Tensor) else _children(item)
        if children is None:
            yield item
        else:
            stack.extend(reversed(list(children)))


def tensors(batch: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``batch``, depth first, in container order."""
    return (leaf for leaf in leaves(batch) if isinstance(leaf, torch.Tensor))


def batch_size(batch: Any) -> int | None:
    """The first dimension of the first tensor in ``batch`` (1 for a 0-d tensor), None without
    tensors. Reads only shapes: no device sync."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    children = _children(batch)
    if children is not None:
        for child in children:
            size = batch_size(child)
            if size is not None:
                return size
    return None


def apply_to_tensors(
    batch: Any, fn: Callable[[torch.Tensor], Any], other: Callable[[Any], Any] | None = None
) -> Any:
    """``batch`` with ``fn`` applied to every tensor and ``other`` (default: keep) to every other
    leaf, in containers of the same types (dicts, lists, tuples, namedtuples, dataclasses)."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    kind = type(batch)
    if kind is tuple or kind is list:  # the common batches first, as in `_children`
        return _same_sequence(batch, [apply_to_tensors(v, fn, other) for v in batch])
    if kind is dict:
        return {k: apply_to_tensors(v, fn, other) for k, v in batch.items()}
    children = _children(batch)
    if children is None:
        return batch if other is None else other(batch)
    if isinstance(batch, Mapping):
        return type(batch)({k: apply_to_tensors(v, fn, other) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, Sequence):
        return _same_sequence(batch, [apply_to_tensors(v, fn, other) for v in batch])
    return _replace_fields(batch, fn, other)


def _replace_fields(batch: Any, fn: Callable[[torch.Tensor], Any], other: Callable[[Any], Any] | None) -> Any:
    """A copy of dataclass ``batch`` with `apply_to_tensors` applied to each field ``__init__`` takes."""
    changes = {
        f.name: apply_to_tensors(getattr(batch, f.name), fn, other)
        for f in dataclasses.fields(batch)
        if f.init
    }
    return dataclasses.replace(batch, **changes)


def _same_sequence(batch: Sequence[Any], items: list[Any]) -> Any:
    """``items`` in a sequence of ``batch``'s type (a list subclass stays a plain list)."""
    if isinstance(batch, list):
        return items
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*items)
    return type(batch)(items)  # type: ignore[call-arg]
