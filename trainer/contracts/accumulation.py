"""Accumulation arithmetic: how ``A`` (micro batches per optimizer step), ``W`` (ranks), ``b``
(micro batch) and ``G`` (samples per step) relate, and which window a batch is in.

The one place these formulas are written. It sits in the floor because the data order
(`GlobalBatchSampler`), the resume plan, the Trainer's batch counts and the loops all use it, and
the floor is the one part each of them may import. The window arithmetic of an epoch (loss
divisors, the last window's weights) builds on it in trainer/loops/accumulation.py.
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
