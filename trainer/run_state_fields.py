"""`RunStateFields`: the fields of `RunState` (`trainer.contracts.run_state`) as the Trainer's attributes.

The Trainer holds one `RunState` (``trainer.run``) and shows each field as a plain attribute of the
same name, so ``trainer.should_stop = True`` and ``trainer.optimizers`` read and write it.
"""
from __future__ import annotations

from typing import Callable, TypeVar

from trainer.contracts.run_state import RunState
from trainer.field_attribute import FieldAttribute

_T = TypeVar("_T")


class RunField(FieldAttribute["RunStateFields", _T]):
    """An attribute of the Trainer that reads and writes the `RunState` field of the same name;
    ``read`` names the field (``lambda run: run.should_stop``), so the attribute has the field's type."""

    _source = "run"

    def __init__(self, read: Callable[[RunState], _T]) -> None:
        super().__init__(read)

    def __set__(self, trainer: RunStateFields, value: _T) -> None:
        setattr(trainer.run, self.name, value)


class RunStateFields:
    """The `RunState` fields as attributes of the Trainer (``trainer.should_stop``...)."""

    run: RunState
    accumulate_grad_batches = RunField(lambda run: run.accumulate_grad_batches)
    should_stop = RunField(lambda run: run.should_stop)
    optimizers = RunField(lambda run: run.optimizers)
    lr_scheduler_configs = RunField(lambda run: run.lr_scheduler_configs)
    train_dataloader = RunField(lambda run: run.train_dataloader)
    val_dataloaders = RunField(lambda run: run.val_dataloaders)
    datamodule = RunField(lambda run: run.datamodule)
    num_test_batches = RunField(lambda run: run.num_test_batches)
    test_dataloaders = RunField(lambda run: run.test_dataloaders)
    num_predict_batches = RunField(lambda run: run.num_predict_batches)
    predict_dataloaders = RunField(lambda run: run.predict_dataloaders)
