"""`LRSchedulerConfig`: a scheduler and when it steps. In the floor, as a callback that swaps
the schedule (`StochasticWeightAveraging`) builds one."""
from __future__ import annotations

import dataclasses
from typing import Any

import torch


@dataclasses.dataclass
class LRSchedulerConfig:
    """A scheduler and when it steps (Lightning's dict keys)."""

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    name: str | None = None
    strict: bool = True  # a missing monitor is an error (True) or a warning and a skipped step
    # the monitored value the scheduler last stepped on: the same object means nothing new was logged
    last_monitored: Any = dataclasses.field(default=None, init=False, repr=False, compare=False)

    @property
    def is_plateau(self) -> bool:
        """Whether the scheduler needs a monitored value (``ReduceLROnPlateau``)."""
        return isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
