"""Gradient-accumulation windows.

An epoch's micro batches are cut into windows of ``A`` consecutive batches; each window ends in
one optimizer step. Every micro-batch loss is divided by the number of micro batches in *its*
window, so a step always uses the true mean gradient over the window, including the shorter
last window of an epoch whose batch count is not a multiple of ``A``. With a
`GlobalBatchSampler`'s `EpochLayout` the last window's micro batches are weighted by their
sample counts instead (``W * n / R``), so that the step is the mean over its ``R`` samples on any
number of ranks, and a padding micro batch weighs 0.
"""
from __future__ import annotations

import math

from trainer.contracts.accumulation import check_accumulation, window_start
from trainer.data.global_batch_sampler import EpochLayout


class AccumulationWindows:
    """Window arithmetic for one epoch.

    Args:
        accumulate: micro batches per window (``A``).
        num_batches: batches this epoch, or ``None`` when the loader has no length (the loop
            then learns where the epoch ends one batch ahead and corrects the last window's
            gradient scale at the step, see :meth:`grad_correction`).
        layout: the epoch's global windows, when the loader has a `GlobalBatchSampler`.
    """

    def __init__(self, accumulate: int, num_batches: int | None, layout: EpochLayout | None = None) -> None:
        self.accumulate = check_accumulation(accumulate)
        self.num_batches = num_batches
        self.layout = layout
        # a limit that ends the epoch early leaves the layout's last window out: plain divisors then
        self._weighted = layout is not None and layout.num_batches == num_batches
        self.plain_until = self._plain_until()
        # `samples_through`'s arithmetic, read once: it runs at every optimizer step
        if layout is not None:
            self._last_start = layout.last_window_start
            self._epoch_samples = layout.offset + layout.full_windows * layout.global_batch_size + layout.last_size

    def _plain_until(self) -> float:
        """The first batch index whose window is not a plain full one (``inf``: none): before it
        no micro batch pads and each loss is divided by ``A``, which the step reads without the
        window arithmetic below."""
        a, n = self.accumulate, self.num_batches
        until: float = math.inf if n is None else n - n % a  # a shorter last window starts there
        if self._weighted and self.layout is not None and self.layout.last_size:
            until = min(until, self.layout.last_window_start)
        return until

    def is_window_start(self, batch_idx: int) -> bool:
        """Whether this micro batch opens a window (where an overridden ``optimizer_zero_grad`` runs)."""
        return window_start(batch_idx, self.accumulate) == batch_idx

    def is_window_end(self, batch_idx: int, is_last_batch: bool) -> bool:
        """Whether the optimizer steps (and DDP syncs) after this micro batch."""
        return is_last_batch or (batch_idx + 1) % self.accumulate == 0

    def loss_divisor(self, batch_idx: int) -> float:
        """What this micro batch's loss is divided by: the size of its window when known, or
        ``R / (W * n)`` in a layout's last window (a padding micro batch: see `is_padding`)."""
        weight = self.layout.loss_weight(batch_idx) if self._weighted else None  # type: ignore[union-attr]
        if weight:
            return 1.0 / weight
        if self.num_batches is None:
            return self.accumulate
        return min(self.accumulate, self.num_batches - window_start(batch_idx, self.accumulate))

    def is_padding(self, batch_idx: int) -> bool:
        """Whether this micro batch only lets the rank join the window's collectives (weight 0)."""
        return self._weighted and self.layout.loss_weight(batch_idx) == 0.0  # type: ignore[union-attr]

    def samples_through(self, batch_idx: int) -> int | None:
        """Samples of the epoch trained once the window ending at ``batch_idx`` stepped (None: no layout)."""
        layout = self.layout
        if layout is None:
            return None
        if batch_idx >= self._last_start:  # `EpochLayout.samples_through`, inline
            return self._epoch_samples
        return layout.offset + ((batch_idx - layout.first_batch) // layout.accumulate + 1) * layout.global_batch_size

    def grad_correction(self, batch_idx: int) -> float:
        """Factor to multiply gradients by at the step that ends after ``batch_idx``.

        1.0 whenever the divisor was already the true window size; for a loader of unknown
        length the last window was divided by ``A`` but held fewer batches.
        """
        if self.num_batches is not None:
            return 1.0
        in_window = batch_idx % self.accumulate + 1
        return self.accumulate / in_window

