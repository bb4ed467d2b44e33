"""`RunStateFields`: the fields of `RunState` (`trainer.contracts.run_state`) as the Trainer's attributes.

The Trainer holds one `RunState` (``trainer.run``) and shows each field as a plain attribute of the
same name, so ``trainer.should_stop = True`` and ``trainer.optimizers`` read and write it.
"""
from __future__ import annotations

from typing import Any

from trainer.contracts.run_state import RunState


class ForwardedField:
    """An attribute of the Trainer that reads and writes the `RunState` field of the same name;
    subclasses forward to another holder (`_holder`)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def _holder(self, trainer: Any) -> Any:
        return trainer.run

    def __get__(self, trainer: Any, owner: type | None = None) -> Any:
        if trainer is None:
            return self
        return getattr(self._holder(trainer), self.name)

    def __set__(self, trainer: Any, value: Any) -> None:
        setattr(self._holder(trainer), self.name, value)


class RunStateFields:
    """The `RunState` fields as attributes of the Trainer (``trainer.should_stop``...)."""

    run: RunState
    accumulate_grad_batches = ForwardedField()
    should_stop = ForwardedField()
    optimizers = ForwardedField()
    lr_scheduler_configs = ForwardedField()
    train_dataloader = ForwardedField()
    val_dataloaders = ForwardedField()
    datamodule = ForwardedField()
    num_test_batches = ForwardedField()
    test_dataloaders = ForwardedField()
    num_predict_batches = ForwardedField()
    predict_dataloaders = ForwardedField()
