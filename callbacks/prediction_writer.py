"""`BasePredictionWriter`: write predictions per batch and/or per epoch, on every rank (Lightning's)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Sequence

from callbacks.callback import Callback
from trainer.contracts.arguments import hint_misspelled_arguments

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView

_INTERVALS = ("batch", "epoch", "batch_and_epoch")


class WriteInterval(str, enum.Enum):
    """When a `BasePredictionWriter` writes (its ``interval``), as Lightning's: equal to the strings."""

    BATCH = "batch"
    EPOCH = "epoch"
    BATCH_AND_EPOCH = "batch_and_epoch"

    @property
    def on_batch(self) -> bool:
        """Whether each batch is written."""
        return self in (WriteInterval.BATCH, WriteInterval.BATCH_AND_EPOCH)

    @property
    def on_epoch(self) -> bool:
        """Whether the whole run's predictions are written at its end."""
        return self in (WriteInterval.EPOCH, WriteInterval.BATCH_AND_EPOCH)


class BasePredictionWriter(Callback):
    """Subclass it and implement `write_on_batch_end` and/or `write_on_epoch_end`.

    Args:
        write_interval: ``"batch"``, ``"epoch"`` or ``"batch_and_epoch"``.

    Every rank calls them with its own predictions and the dataset indices of its samples
    (``batch_indices``; ``None`` where the loader's sampler draws a random order), so each rank
    writes its shard, e.g. to ``f"predictions_{trainer.global_rank}.pt"``.
    """

    @hint_misspelled_arguments
    def __init__(self, write_interval: str = "batch") -> None:
        if write_interval not in _INTERVALS:
            raise ValueError(f"BasePredictionWriter(write_interval={write_interval!r}): use one of {_INTERVALS}.")
        self.interval = WriteInterval(write_interval)
        self._predictions: dict[int, list[Any]] = {}
        self._indices: dict[int, list[Any]] = {}
        self._planned: dict[int, list[list[int]] | None] = {}

    def write_on_batch_end(
        self,
        trainer: TrainerView,
        pl_module: ModuleView,
        prediction: Any,
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        """Override: write one batch's ``prediction``."""
        raise NotImplementedError()

    def write_on_epoch_end(
        self, trainer: TrainerView, pl_module: ModuleView, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        """Override: write every prediction of the run (a list per loader when there are several;
        ``batch_indices`` always has one list per loader)."""
        raise NotImplementedError()

    def on_predict_epoch_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self._predictions, self._indices, self._planned = {}, {}, {}

    def on_predict_batch_end(
        self,
        trainer: TrainerView,
        pl_module: ModuleView,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        indices = self._batch_indices(trainer, batch_idx, dataloader_idx)
        if self.interval != "batch":
            self._predictions.setdefault(dataloader_idx, []).append(outputs)
            self._indices.setdefault(dataloader_idx, []).append(indices)
        if self.interval != "epoch":
            self.write_on_batch_end(trainer, pl_module, outputs, indices, batch, batch_idx, dataloader_idx)

    def on_predict_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if self.interval == "batch":
            return
        keys = sorted(self._predictions)
        predictions = [self._predictions[k] for k in keys]
        indices = [self._indices[k] for k in keys]
        if len(keys) == 1:  # as Lightning: one loader's predictions flat, the indices always per loader
            predictions = predictions[0]
        self.write_on_epoch_end(trainer, pl_module, predictions, indices)

    def _batch_indices(self, trainer: TrainerView, batch_idx: int, dataloader_idx: int) -> list[int] | None:
        """The dataset indices of this batch, read from the loader's batch sampler when its order is fixed."""
        if dataloader_idx not in self._planned:
            self._planned[dataloader_idx] = _fixed_order(trainer, dataloader_idx)
        planned = self._planned[dataloader_idx]
        return planned[batch_idx] if planned is not None and batch_idx < len(planned) else None


def _fixed_order(trainer: TrainerView, dataloader_idx: int) -> list[list[int]] | None:
    from torch.utils.data import RandomSampler

    loaders = trainer.predict_dataloaders
    if dataloader_idx >= len(loaders):
        return None
    batch_sampler = getattr(loaders[dataloader_idx], "batch_sampler", None)
    sampler = getattr(batch_sampler, "sampler", None)
    if batch_sampler is None or isinstance(sampler, RandomSampler) or getattr(sampler, "shuffle", False):
        return None
    return [list(b) for b in batch_sampler]
