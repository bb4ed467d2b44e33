"""`RunState`: what changes while the Trainer runs, apart from its fixed settings (`TrainerConfig`).

The Trainer holds one (``trainer.run``) and shows each field as a plain attribute of the same
name (`trainer.run_state_fields.RunStateFields`), so ``trainer.should_stop = True`` and
``trainer.optimizers`` read and write it. Which stage runs is `TrainerState`'s; where a fit stands
is `FitProgress`'s.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Protocol

import torch

from trainer.contracts.schedulers import LRSchedulerConfig


class DataHooksView(Protocol):
    """The loader hooks of a DataModule or a module (`trainer.data.data_hooks.DataHooks`)."""

    def train_dataloader(self) -> object: ...
    def val_dataloader(self) -> object: ...
    def test_dataloader(self) -> object: ...
    def predict_dataloader(self) -> object: ...


class DataModuleView(DataHooksView, Protocol):
    """The user's DataModule, as the trainer's parts use it (`trainer.data.datamodule.DataModule`)."""

    @property
    def prepare_data_per_node(self) -> bool: ...

    def prepare_data(self) -> None: ...
    def setup(self, stage: str) -> None: ...
    def teardown(self, stage: str) -> None: ...
    def on_exception(self, exception: BaseException) -> None: ...
    def state_dict(self) -> dict[str, object]: ...
    def load_state_dict(self, state_dict: dict[str, object]) -> None: ...


@dataclasses.dataclass
class RunState:
    """The current run's objects and the flags callbacks may set."""

    accumulate_grad_batches: int  # settable between epochs (GradientAccumulationScheduler)
    should_stop: bool = False  # set by a callback or the module: the loop stops at the next agreement point
    optimizers: list[torch.optim.Optimizer] = dataclasses.field(default_factory=list)
    lr_scheduler_configs: list[LRSchedulerConfig] = dataclasses.field(default_factory=list)
    # a user's loaders, of batches the trainer does not look into
    train_dataloader: Iterable[object] | None = None
    val_dataloaders: list[Iterable[object]] = dataclasses.field(default_factory=list)
    datamodule: DataModuleView | None = None  # the current (or last) run's DataModule
    num_test_batches: list[int | None] = dataclasses.field(default_factory=list)
    test_dataloaders: list[Iterable[object]] = dataclasses.field(default_factory=list)  # the last test's
    num_predict_batches: list[int | None] = dataclasses.field(default_factory=list)
    predict_dataloaders: list[Iterable[object]] = dataclasses.field(default_factory=list)  # read by a prediction writer
