"""`LRSchedulerConfig`: a scheduler and when it steps. In the floor, as a callback that swaps
the schedule (`StochasticWeightAveraging`) builds one; `SchedulerMetrics`: what a plateau
scheduler reads when it steps."""
from __future__ import annotations

import dataclasses
from typing import Mapping

import torch


@dataclasses.dataclass
class LRSchedulerConfig:
    """A scheduler and when it steps (Lightning's dict keys)."""

    scheduler: torch.optim.lr_scheduler.LRScheduler | torch.optim.lr_scheduler.ReduceLROnPlateau
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    name: str | None = None
    strict: bool = True  # a missing monitor is an error (True) or a warning and a skipped step
    # the monitored value the scheduler last stepped on: the same object means nothing new was logged
    last_monitored: object = dataclasses.field(default=None, init=False, repr=False, compare=False)

    @property
    def is_plateau(self) -> bool:
        """Whether the scheduler needs a monitored value (``ReduceLROnPlateau``)."""
        return isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


@dataclasses.dataclass
class SchedulerMetrics:
    """What a ``ReduceLROnPlateau`` reads: the logged values, and whether validation may still add some."""

    values: Mapping[str, object]
    validation_pending: bool  # validation is on but has not run yet in this fit
