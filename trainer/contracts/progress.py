"""`FitProgress`: where a fit stands, as a frozen value.

The fit loop holds the current value and replaces it with the one a transition method returns,
at one place per event: an epoch starts (`epoch_started`), a batch starts (`at_batch`), an
optimizer step is taken (`stepped`), a batch is trained (`batch_trained`), an epoch ends
(`epoch_ending`, then `next_epoch` after its hooks). Whoever keeps a value (a callback, a log
line) keeps that moment's position; it never changes under them. Checkpoints save it with
`state_dict` and a resume reads it back with `from_state_dict`.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, SupportsInt

from trainer.contracts.lightning_progress import count, entry, is_lightning_fit_loop, lightning_fit_loop, position_from_lightning


@dataclasses.dataclass(frozen=True)
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
    shuffle: bool | None = None  # whether the epoch's order is shuffled (None: not known)
    # batches trained in the whole run, over every epoch (Lightning's ``total_batch_idx`` + 1):
    # ``check_val_every_n_epoch=None`` validates every ``val_check_interval`` of these
    batches_total: int = 0

    def epoch_started(
        self, first_batch: int, samples_done: int | None = None, global_batch_size: int | None = None,
        dataset_size: int | None = None, shuffle: bool | None = None,
    ) -> FitProgress:
        """An epoch (or the rest of an interrupted one) of a ``dataset_size``-sample dataset begins
        at ``first_batch``, after ``samples_done`` samples, with ``global_batch_size`` samples per
        step (None: unknown)."""
        return dataclasses.replace(
            self, batch_idx=first_batch, batches_done=first_batch, samples_done=samples_done,
            global_batch_size=global_batch_size, dataset_size=dataset_size, shuffle=shuffle,
        )

    def at_batch(self, batch_idx: int) -> FitProgress:
        """Batch ``batch_idx`` is being trained."""
        # the three per-batch transitions construct directly: `dataclasses.replace` costs more than a step's own work here
        return FitProgress(
            self.current_epoch, self.global_step, batch_idx, self.batches_done, self.epoch_finished,
            self.samples_done, self.global_batch_size, self.dataset_size, self.shuffle, self.batches_total,
        )

    def stepped(self) -> FitProgress:
        """An optimizer step was taken: the one place ``global_step`` counts up."""
        return FitProgress(
            self.current_epoch, self.global_step + 1, self.batch_idx, self.batches_done, self.epoch_finished,
            self.samples_done, self.global_batch_size, self.dataset_size, self.shuffle, self.batches_total,
        )

    def batch_trained(self, batch_idx: int, is_last: bool, samples_done: int | None) -> FitProgress:
        """``batch_idx`` is fully trained (a checkpoint from here on continues after it); after a
        window's step ``samples_done`` samples of the epoch are trained (else it is unchanged)."""
        return FitProgress(
            self.current_epoch, self.global_step, self.batch_idx, batch_idx + 1, is_last,
            samples_done, self.global_batch_size, self.dataset_size, self.shuffle, self.batches_total + 1,
        )

    def epoch_ending(self) -> FitProgress:
        """The epoch has no batch left (also when ``should_stop`` ended it early): its end hooks run."""
        return dataclasses.replace(self, epoch_finished=True)

    def next_epoch(self) -> FitProgress:
        """The epoch's end hooks ran: the next epoch starts at its first batch."""
        return dataclasses.replace(
            self, current_epoch=self.current_epoch + 1, batch_idx=0, batches_done=0,
            samples_done=0 if self.samples_done is not None else None, epoch_finished=False,
        )

    def state_dict(self) -> dict[str, object]:
        """The checkpoint entries (format_version 2; ``samples_done`` and ``global_batch_size``
        are added when known, and older checkpoints without them still load)."""
        position: dict[str, object] = {
            "batches_done": self.batches_done, "epoch_finished": self.epoch_finished, "batches_total": self.batches_total,
        }
        if self.samples_done is not None:
            position.update(samples_done=self.samples_done, global_batch_size=self.global_batch_size)
        if self.dataset_size is not None:
            position["dataset_size"] = self.dataset_size
        if self.shuffle is not None:
            position["shuffle"] = self.shuffle
        # Lightning's counters for the same position, beside ours: Lightning resumes from this file too
        position.update(lightning_fit_loop(
            self.current_epoch, self.global_step, self.batches_done, self.epoch_finished, self.batches_total
        ))
        return {"epoch": self.current_epoch, "global_step": self.global_step, "loops": {"fit_loop": position}}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, object]) -> FitProgress:
        """The position a checkpoint (or a spawned run's rank 0) recorded; in a file Lightning wrote,
        where Lightning's own resume of it continues (`position_from_lightning`)."""
        position = entry(entry(state, "loops"), "fit_loop")
        epoch = count(state, "epoch", required=True)
        if is_lightning_fit_loop(position):
            epoch, position = position_from_lightning(position)
        batches_done = count(position, "batches_done")
        return cls(
            current_epoch=epoch,
            global_step=count(state, "global_step", required=True),
            batch_idx=batches_done,
            batches_done=batches_done,
            epoch_finished=bool(position.get("epoch_finished", False)),
            samples_done=_optional_int(position.get("samples_done")),
            global_batch_size=_optional_int(position.get("global_batch_size")),
            dataset_size=_optional_int(position.get("dataset_size")),
            shuffle=_optional_bool(position.get("shuffle")),
            batches_total=count(position, "batches_total"),
        )


def _optional_int(value: object) -> int | None:
    if value is None or isinstance(value, (SupportsInt, str)):
        return None if value is None else int(value)
    raise TypeError(f"a checkpoint's position entry must be a number, got {type(value).__name__}")


def _optional_bool(value: object) -> bool | None:
    return None if value is None else bool(value)
