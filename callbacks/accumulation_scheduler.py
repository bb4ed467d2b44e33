"""`GradientAccumulationScheduler`: change ``accumulate_grad_batches`` by epoch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from callbacks.callback import Callback
from trainer.contracts.arguments import hint_misspelled_arguments

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


class GradientAccumulationScheduler(Callback):
    """Sets ``trainer.accumulate_grad_batches`` at the start of each epoch.

    Args:
        scheduling: ``{epoch: accumulate}``; keys are 0-based epochs (ints >= 0), values ints >= 1.
            From epoch ``e`` on, the value of the largest key ``<= e`` applies; before the
            smallest key, 1. ``{0: 1, 4: 2, 8: 4}``: no accumulation for epochs 0-3, 2 micro
            batches per step for 4-7, 4 from epoch 8.

    The Trainer's own ``accumulate_grad_batches`` must stay at its default of 1: two sources of
    the same setting would silently fight.
    """

    @hint_misspelled_arguments
    def __init__(self, scheduling: Mapping[int, int]) -> None:
        if not isinstance(scheduling, Mapping):
            raise TypeError(
                f"GradientAccumulationScheduler(scheduling=...) expects a dict {{epoch: accumulate}}, "
                f"got {type(scheduling).__name__}."
            )
        if not scheduling:
            raise ValueError(
                "GradientAccumulationScheduler(scheduling={}) is empty: "
                "give at least one {epoch: accumulate}."
            )
        for epoch, value in scheduling.items():
            bad_epoch = (
                f"GradientAccumulationScheduler: epoch keys must be ints >= 0 (0-based), got {epoch!r}."
            )
            if isinstance(epoch, bool) or not isinstance(epoch, int):
                raise TypeError(bad_epoch)
            if epoch < 0:
                raise ValueError(bad_epoch)
            bad_value = (
                f"GradientAccumulationScheduler: accumulation values must be ints >= 1, got {value!r} "
                f"for epoch {epoch}."
            )
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(bad_value)
            if value < 1:
                raise ValueError(bad_value)
        self.scheduling: dict[int, int] = dict(sorted(scheduling.items()))
        if 0 not in self.scheduling:
            self.scheduling = {0: 1, **self.scheduling}
        self._last_set: int | None = None

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        """The accumulation that applies to 0-based ``epoch``."""
        value = 1
        for start, accumulate in self.scheduling.items():
            if start > epoch:
                break
            value = accumulate
        return value

    def on_train_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        # a value this callback set in an earlier `fit` of the same Trainer is not a conflict
        if trainer.accumulate_grad_batches not in (1, self._last_set):
            raise ValueError(
                f"Trainer(accumulate_grad_batches={trainer.accumulate_grad_batches}) and "
                "GradientAccumulationScheduler both set the accumulation: use one of them (drop the "
                "Trainer argument, or put its value in the schedule; a Trainer(global_batch_size=...) fixes it)."
            )

    def on_train_epoch_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self._last_set = self.get_accumulate_grad_batches(trainer.current_epoch)
        trainer.accumulate_grad_batches = self._last_set
