"""Accumulation arithmetic: how ``A`` (micro batches per optimizer step), ``W`` (ranks), ``b``
(micro batch) and ``G`` (samples per step) relate, and which window a batch is in.

The one place these formulas are written. It sits in the floor because the data order
(`GlobalBatchSampler`), the resume plan, the Trainer's batch counts and the loops all use it, and
the floor is the one part each of them may import. The window arithmetic of an epoch (loss
divisors, the last window's weights) builds on it in trainer/loops/accumulation_windows.py.
"""
from __future__ import annotations

import math


def check_accumulation(accumulate: object) -> int:
    """``accumulate`` if it is a valid ``A`` (an int >= 1), else a ValueError."""
    if not isinstance(accumulate, int) or isinstance(accumulate, bool) or accumulate < 1:
        raise ValueError(f"accumulate_grad_batches must be an int >= 1, got {accumulate!r}")
    return accumulate


def global_batch_size(world_size: int, micro_batch: int, accumulate: int) -> int:
    """``G = W * b * A``: the samples of one optimizer step over every rank."""
    return world_size * micro_batch * accumulate


def window_start(batch_idx: int, accumulate: int) -> int:
    """The first micro batch of the window holding ``batch_idx`` (windows of ``accumulate``)."""
    return batch_idx - batch_idx % accumulate


def steps_in(num_batches: int, accumulate: int) -> int:
    """Optimizer steps over ``num_batches`` micro batches (the last window may be shorter)."""
    return math.ceil(num_batches / accumulate)


class GlobalBatchError(ValueError):
    """``global_batch_size`` cannot be met on this world size (raised before any step)."""


def accumulation_for(global_batch: int, world_size: int, micro_batch: int) -> int:
    """``A = G / (W * b)`` for ``Trainer(global_batch_size=G)``; a `GlobalBatchError` naming the
    world sizes that work when ``W * b`` does not divide ``G``."""
    if global_batch % (world_size * micro_batch) == 0:
        return global_batch // (world_size * micro_batch)
    asked = (
        f"global_batch_size={global_batch} with micro batch {micro_batch} (the train loader's batch_size) "
        f"needs world_size x {micro_batch} x accumulate_grad_batches = {global_batch}"
    )
    if global_batch % micro_batch:
        sizes = _divisors(global_batch)
        raise GlobalBatchError(
            f"{asked}: no world size can, as {micro_batch} does not divide {global_batch}. Choose a micro batch "
            f"that divides it ({sizes}). No step was taken."
        )
    sizes = _divisors(global_batch // micro_batch)
    raise GlobalBatchError(
        f"{asked}, and world size {world_size} does not divide {global_batch // micro_batch} micro batches. "
        f"The world sizes that work: {sizes}. No step was taken."
    )


# Divisors are searched up to this bound, so an error's list costs the same whatever G is (a G of
# 10**15 would otherwise be tried number by number); every divisor of an n up to its square is
# still found, each small one giving its large partner n // d.
_SEARCHED = 10_000
_SHOWN = 32


def _divisors(n: int) -> str:
    """The divisors of ``n`` for an error message, ascending: every one when ``n <= _SEARCHED**2``,
    else those up to ``_SEARCHED`` and ``n`` itself; at most ``_SHOWN`` of them, then how many more."""
    small = [d for d in range(1, min(n, _SEARCHED) + 1) if n % d == 0]
    complete = n <= _SEARCHED ** 2
    found = sorted({*small, *(n // d for d in small)}) if complete else [*small, n] if n > _SEARCHED else small
    shown = ", ".join(str(d) for d in found[:_SHOWN])
    if complete:
        return shown if len(found) <= _SHOWN else f"{shown}, ... ({len(found)} in all, up to {n})"
    more = ", ..." if len(found) > _SHOWN else ""
    return f"{shown}{more} (the divisors up to {_SEARCHED}, and {n} itself; larger ones not searched)"
