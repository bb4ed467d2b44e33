"""`RunStateFields`: the fields of `RunState` (`trainer.contracts.run_state`) as the Trainer's attributes.

The Trainer holds one `RunState` (``trainer.run``) and shows each field as a plain attribute of the
same name, so ``trainer.should_stop = True`` and ``trainer.optimizers`` read and write it.
"""
from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar, overload

from trainer.contracts.run_state import RunState

_T = TypeVar("_T")


class RunField(Generic[_T]):
    """An attribute of the Trainer that reads and writes the `RunState` field of the same name;
    ``read`` names the field (``lambda run: run.should_stop``), so the attribute has the field's type."""

    def __init__(self, read: Callable[[RunState], _T]) -> None:
        self._read = read

    def __set_name__(self, owner: type, name: str) -> None:
        check_reads(self._read, (name,), f"{owner.__name__}.{name}")
        self.name = name

    @overload
    def __get__(self, trainer: None, owner: type | None = None) -> RunField[_T]: ...

    @overload
    def __get__(self, trainer: RunStateFields, owner: type | None = None) -> _T: ...

    def __get__(self, trainer: RunStateFields | None, owner: type | None = None) -> RunField[_T] | _T:
        if trainer is None:
            return self
        # the field of the same name, without calling `read` (checked to read it): one Python call per read
        return getattr(trainer.run, self.name)  # type: ignore[no-any-return]

    def __set__(self, trainer: RunStateFields, value: _T) -> None:
        setattr(trainer.run, self.name, value)


class _Path:
    """What a field reader reads: the attribute names, in order (`check_reads`)."""

    def __init__(self, names: tuple[str, ...] = ()) -> None:
        self.names = names

    def __getattr__(self, name: str) -> _Path:
        return _Path((*self.names, name))


def check_reads(read: Callable[[Any], object], path: tuple[str, ...], where: str) -> None:
    """Raise `TypeError` unless ``read`` reads exactly ``path`` (``("limits", "max_epochs")``) of its argument:
    the attribute's name and the field it reads are one name."""
    got = read(_Path())
    if not isinstance(got, _Path) or got.names != path:
        raise TypeError(f"{where} must read {'.'.join(path)}, not {'.'.join(getattr(got, 'names', ('?',)))}")


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
