"""Exact loss normalization: the mean over *all* items of the global batch.

When ``training_step`` returns ``{"loss": summed_loss, "num_items": n}`` (e.g. the tokens that
count), averaging per-micro-batch means again (over accumulation and over ranks) weights a
short sequence like a long one. Instead the summed loss is back-propagated as is, the item
count is all-reduced once per optimizer step, and the window's gradients are multiplied by
``W / total_items`` (DDP or FSDP has already averaged them over the W ranks), before unscaling,
clipping and the step. No micro batch of the window has to be fetched ahead of time.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from trainer.contracts.protocols import StrategyView as Strategy


class ItemMeanNormalizer:
    """Counts items over an accumulation window and rescales its gradients at the step."""

    def __init__(self) -> None:
        self._items: torch.Tensor | None = None
        self._plain = 0  # micro batches of this window that returned a plain (mean) loss

    def observe(self, output: Any, loss: torch.Tensor, batch_idx: int, counts: bool = True) -> torch.Tensor | None:
        """Record this micro batch's item count; returned when the loss is a sum to normalise later.
        ``counts=False``: a padding micro batch, whose items are not counted."""
        items = output.get("num_items") if isinstance(output, Mapping) else None
        count = None
        if items is None:
            self._plain += 1
            mixed = self._items is not None
        else:
            count = torch.as_tensor(items, dtype=torch.float32, device=loss.device).detach().reshape(())
            if not counts:
                count = count * 0.0
            self._items = count if self._items is None else self._items + count
            mixed = self._plain > 0
        if mixed:
            raise ValueError(
                f"training_step returned 'num_items' for some micro batches of an accumulation window "
                f"but not for others (batch index {batch_idx}); return it always or never."
            )
        return count

    @property
    def active(self) -> bool:
        """Whether the current window's losses were sums with item counts."""
        return self._items is not None

    def finish_window(self, strategy: Strategy, param_lists: list[list[torch.Tensor]]) -> None:
        """Scale the window's gradients to the mean over every item of the global batch."""
        if self._items is not None:
            total = strategy.reduce(self._items, "sum")
            factor = strategy.world_size / total.clamp_min(1.0)
            for params in param_lists:
                grads = [p.grad for p in params if p.grad is not None]
                if grads:
                    torch._foreach_mul_(grads, factor)
        self._items = None
        self._plain = 0
