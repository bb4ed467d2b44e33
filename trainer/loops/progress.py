"""`FitProgress`: where a fit stands. The fit loop owns it; checkpoints save and restore it."""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class FitProgress:
    """The run's position: epoch, optimizer steps, and the place inside the current epoch."""

    current_epoch: int = 0
    global_step: int = 0  # optimizer steps taken (one per accumulation window)
    batch_idx: int = 0  # the batch being trained
    batches_done: int = 0  # batches of the current epoch fully trained (where a resume continues)
    epoch_finished: bool = False  # the current epoch has no batch left (its end hooks may run)
    # With a `GlobalBatchSampler` (trainer/data/global_batch_sampler.py), the position in the
    # world-size-free unit: samples of the epoch consumed by finished optimizer steps, and G.
    samples_done: int | None = None
    global_batch_size: int | None = None
    dataset_size: int | None = None  # the epoch's train dataset length (None: not known)

    def start_epoch(
        self, first_batch: int, samples_done: int | None = None, global_batch_size: int | None = None,
        dataset_size: int | None = None,
    ) -> None:
        """An epoch (or the rest of an interrupted one) of a ``dataset_size``-sample dataset begins
        at ``first_batch``, after ``samples_done`` samples, with ``global_batch_size`` samples per
        step (None: unknown)."""
        self.batch_idx = self.batches_done = first_batch
        self.samples_done, self.global_batch_size = samples_done, global_batch_size
        self.dataset_size = dataset_size

    def optimizer_stepped(self) -> None:
        """An optimizer step was taken: the one place ``global_step`` counts up."""
        self.global_step += 1

    def window_stepped(self, samples_done: int | None) -> None:
        """An optimizer step ended a window: ``samples_done`` samples of the epoch are trained."""
        self.samples_done = samples_done

    def batch_trained(self, batch_idx: int, is_last: bool) -> None:
        """``batch_idx`` is fully trained: a checkpoint from here on continues after it."""
        self.batches_done = batch_idx + 1
        self.epoch_finished = is_last

    def finish_epoch(self) -> None:
        """The epoch's end hooks ran: the next epoch starts at its first batch."""
        self.current_epoch += 1
        self.batch_idx = self.batches_done = 0
        self.samples_done = 0 if self.samples_done is not None else None
        self.epoch_finished = False

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint entries (format_version 2; ``samples_done`` and ``global_batch_size``
        are added when known, and older checkpoints without them still load)."""
        position: dict[str, Any] = {"batches_done": self.batches_done, "epoch_finished": self.epoch_finished}
        if self.samples_done is not None:
            position.update(samples_done=self.samples_done, global_batch_size=self.global_batch_size)
        if self.dataset_size is not None:
            position["dataset_size"] = self.dataset_size
        return {"epoch": self.current_epoch, "global_step": self.global_step, "loops": {"fit_loop": position}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take the position a checkpoint (or a spawned run's rank 0) recorded."""
        position = state.get("loops", {}).get("fit_loop", {})
        self.current_epoch = int(state["epoch"])
        self.global_step = int(state["global_step"])
        self.batches_done = int(position.get("batches_done", 0))
        self.epoch_finished = bool(position.get("epoch_finished", False))
        self.batch_idx = self.batches_done
        samples, size = position.get("samples_done"), position.get("global_batch_size")
        self.samples_done = None if samples is None else int(samples)
        self.global_batch_size = None if size is None else int(size)
        length = position.get("dataset_size")
        self.dataset_size = None if length is None else int(length)
