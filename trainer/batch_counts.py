"""`BatchCounts`: the Trainer's read-only views of batch sizes and counts (a base class of `Trainer`),
read from its loaders, its settings, its fit loop and its `MetricLogger`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from trainer.contracts.accumulation import global_batch_size, steps_in
from trainer.contracts.config import TrainerConfig
from trainer.data.loaders import loader_batch_size, num_batches

if TYPE_CHECKING:
    from trainer.loops.fit_loop import FitLoop
    from trainer.metrics.metric_logger import MetricLogger


class BatchCounts:
    """Sizes and counts read from the Trainer's loaders, settings and loop (nothing stored here)."""

    train_dataloader: Iterable[object] | None
    val_dataloaders: list[Iterable[object]]
    limit_val_batches: int | float | None
    accumulate_grad_batches: int
    max_epochs: int | None
    max_steps: int
    if TYPE_CHECKING:  # the Trainer's read-only property

        @property
        def world_size(self) -> int: ...

    fit_loop: FitLoop
    config: TrainerConfig
    metric_logger: MetricLogger

    @property
    def micro_batch_size(self) -> int | None:
        """b: samples per rank per forward (from the train loader)."""
        return loader_batch_size(self.train_dataloader) if self.train_dataloader is not None else None

    @property
    def train_batch_size(self) -> int | None:
        """The size of the training batch being processed, as ``self.log`` weights it (None: unknown)."""
        return self.metric_logger.train.batch_size

    @property
    def global_batch_size(self) -> int | None:
        """W * b * A: samples per optimizer step over all ranks (the ``global_batch_size`` given, if one was)."""
        if self.config.loop.global_batch_size is not None:
            return self.config.loop.global_batch_size
        b = self.micro_batch_size
        return None if b is None else global_batch_size(self.world_size, b, self.accumulate_grad_batches)

    @property
    def num_val_batches(self) -> list[int | None]:
        """Batches per validation loader of ``fit`` or the last ``validate`` (after ``limit_val_batches``)."""
        return [num_batches(dl, self.limit_val_batches, "val") for dl in self.val_dataloaders]

    @property
    def estimated_stepping_batches(self) -> int | float:
        """The optimizer steps fit will take (Lightning's estimate: ``ceil(batches / A) * max_epochs``,
        capped by ``max_steps``; ``inf`` when unbounded). Known once fit set up its data (from
        ``configure_optimizers`` on, e.g. a ``OneCycleLR``'s ``total_steps``)."""
        if self.max_epochs in (None, -1):
            return float("inf") if self.max_steps == -1 else self.max_steps
        batches = self.fit_loop.num_training_batches
        if batches is None:
            if self.train_dataloader is None:
                raise RuntimeError("estimated_stepping_batches is known once fit has set up its data (configure_optimizers on).")
            return self.max_steps if self.max_steps != -1 else float("inf")  # a loader without length
        steps = steps_in(batches, self.accumulate_grad_batches) * max(self.max_epochs, 1)
        return min(steps, self.max_steps) if self.max_steps != -1 else steps
