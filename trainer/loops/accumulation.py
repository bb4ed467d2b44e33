"""Gradient-accumulation windows.

An epoch's micro batches are cut into windows of ``A`` consecutive batches; each window ends in
one optimizer step. Every micro-batch loss is divided by the number of micro batches in *its*
window, so a step always uses the true mean gradient over the window, including the shorter
last window of an epoch whose batch count is not a multiple of ``A``.
"""
from __future__ import annotations


class AccumulationWindows:
    """Window arithmetic for one epoch.

    Args:
        accumulate: micro batches per window (``A``).
        num_batches: batches this epoch, or ``None`` when the loader has no length (the loop
            then learns where the epoch ends one batch ahead and corrects the last window's
            gradient scale at the step, see :meth:`grad_correction`).
    """

    def __init__(self, accumulate: int, num_batches: int | None) -> None:
        if accumulate < 1:
            raise ValueError(f"accumulate_grad_batches must be >= 1, got {accumulate}")
        self.accumulate = accumulate
        self.num_batches = num_batches

    def is_window_end(self, batch_idx: int, is_last_batch: bool) -> bool:
        """Whether the optimizer steps (and DDP syncs) after this micro batch."""
        return is_last_batch or (batch_idx + 1) % self.accumulate == 0

    def loss_divisor(self, batch_idx: int) -> int:
        """What this micro batch's loss is divided by: the size of its window when known."""
        if self.num_batches is None:
            return self.accumulate
        window_start = batch_idx - batch_idx % self.accumulate
        return min(self.accumulate, self.num_batches - window_start)

    def grad_correction(self, batch_idx: int) -> float:
        """Factor to multiply gradients by at the step that ends after ``batch_idx``.

        1.0 whenever the divisor was already the true window size; for a loader of unknown
        length the last window was divided by ``A`` but held fewer batches.
        """
        if self.num_batches is not None:
            return 1.0
        in_window = batch_idx % self.accumulate + 1
        return self.accumulate / in_window
