"""`RunStateFields`: the fields of `RunState` (`trainer.contracts.run_state`) as the Trainer's attributes.

The Trainer holds one `RunState` (``trainer.run``) and shows each field as a plain attribute of the
same name, so ``trainer.should_stop = True`` and ``trainer.optimizers`` read and write it.
"""
from __future__ import annotations

from typing import Any

from trainer.contracts.run_state import RunState


class _Field:
    """An attribute of the Trainer that reads and writes the `RunState` field of the same name."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, trainer: Any, owner: type | None = None) -> Any:
        if trainer is None:
            return self
        return getattr(trainer.run, self.name)

    def __set__(self, trainer: Any, value: Any) -> None:
        setattr(trainer.run, self.name, value)


class RunStateFields:
    """The `RunState` fields as attributes of the Trainer (``trainer.should_stop``...)."""

    run: RunState
    accumulate_grad_batches = _Field()
    should_stop = _Field()
    optimizers = _Field()
    lr_scheduler_configs = _Field()
    train_dataloader = _Field()
    val_dataloaders = _Field()
    datamodule = _Field()
    num_test_batches = _Field()
    num_predict_batches = _Field()
    predict_dataloaders = _Field()
