"""The random draws creating a DataLoader's iterator makes, made ahead of creating it.

Lightning creates the first training epoch's iterator before ``on_train_start``; Lockstep creates
it after ``on_train_epoch_start``, because a `GradientAccumulationScheduler` may set that epoch's
accumulation in the hook and the `GlobalBatchSampler` cuts its windows when it is iterated. To
draw what Lightning draws at its moment, the fit loop makes the iterator's draws ahead
(`draw_ahead`), then creates the real iterator from the generators' states of that moment and puts
back the states the hooks left (`iterate_from`): the same numbers, in Lightning's order.

The draws of ``iter(loader)`` are PyTorch's: one int64 for the workers' base seed (from the
loader's ``generator``, else the default generator), and, when worker processes prefetch
indices at once, the sampler's seed (a ``RandomSampler`` or shuffling `GlobalBatchSampler` with no
generator of its own draws one int64 from the default generator at its first batch).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import torch
from torch.utils.data import DataLoader, RandomSampler

from trainer.data.global_batch_sampler import global_batch_sampler
from trainer.rng import capture_generators, capture_rng_state, restore_generators, restore_rng_state

__all__ = ["draw_ahead", "iterate_from"]

T = TypeVar("T")


def _sampler_draws_default(loader: DataLoader[Any]) -> bool:
    batches = global_batch_sampler(loader)
    if batches is not None:
        return batches.shuffle and batches.generator is None and batches.seed is None
    sampler = getattr(loader.batch_sampler, "sampler", loader.sampler)
    return isinstance(sampler, RandomSampler) and sampler.generator is None


def draw_ahead(loader: Any) -> dict[str, Any] | None:
    """Make the draws ``iter(loader)`` will make; returns the states before them (for
    `iterate_from`), or None when the loader is not a plain DataLoader whose draws are known."""
    if type(loader) is not DataLoader or (loader.persistent_workers and loader._iterator is not None):
        return None
    before = {"rng": capture_rng_state(), "generators": capture_generators(loader)}
    torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
    if loader.num_workers > 0 and _sampler_draws_default(loader):
        torch.empty((), dtype=torch.int64).random_()
    return before


def iterate_from(loader: Iterable[Any], before: dict[str, Any], at_start: Callable[[], T]) -> tuple[Iterator[Any], T]:
    """``iter(loader)`` drawing from the states `draw_ahead` saw, and what ``at_start`` returns in
    those states (the epoch's resumable state); then the global RNG states as they are now come back."""
    now = capture_rng_state()
    restore_rng_state(before["rng"])
    restore_generators(loader, before["generators"])
    started = at_start()
    iterator = iter(loader)
    restore_rng_state(now)
    return iterator, started
