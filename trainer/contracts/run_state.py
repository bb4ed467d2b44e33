"""`RunState`: what changes while the Trainer runs, apart from its fixed settings (`TrainerConfig`).

The Trainer holds one (``trainer.run``) and shows each field as a plain attribute of the same
name (`trainer.run_state.RunStateFields`), so ``trainer.should_stop = True`` and
``trainer.optimizers`` read and write it. Which stage runs is `TrainerState`'s; where a fit stands
is `FitProgress`'s.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch


@dataclasses.dataclass
class RunState:
    """The current run's objects and the flags callbacks may set."""

    accumulate_grad_batches: int  # settable between epochs (GradientAccumulationScheduler)
    should_stop: bool = False  # set by a callback or the module: the loop stops at the next agreement point
    optimizers: list[torch.optim.Optimizer] = dataclasses.field(default_factory=list)
    lr_scheduler_configs: list[Any] = dataclasses.field(default_factory=list)
    train_dataloader: Any = None
    val_dataloaders: list[Any] = dataclasses.field(default_factory=list)
    datamodule: Any = None  # the current (or last) run's DataModule
    num_test_batches: list[int | None] = dataclasses.field(default_factory=list)
    test_dataloaders: list[Any] = dataclasses.field(default_factory=list)  # the last test's
    num_predict_batches: list[int | None] = dataclasses.field(default_factory=list)
    predict_dataloaders: list[Any] = dataclasses.field(default_factory=list)  # read by a prediction writer
