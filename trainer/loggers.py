"""``lightning.pytorch.loggers`` under Lockstep's name: ``pl.loggers.TensorBoardLogger`` after
``import trainer as pl``. Loggers are callbacks here: the classes are the `callbacks` package's own.

A namespace module for users only: nothing inside `trainer/` imports it (docs/architecture.md).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import callbacks as _callbacks
from callbacks import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from trainer.distributed.rank_zero import current_global_rank
from trainer.lightning.unsupported import not_provided

__all__ = ["CSVLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger", "rank_zero_experiment"]


class _DummyExperiment:
    """What a logger's ``experiment`` is off rank 0: every method call does nothing (Lightning's)."""

    def nop(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, _: Any) -> Callable[..., None]:
        return self.nop

    def __getitem__(self, index: int) -> "_DummyExperiment":
        return self  # ``logger.experiment[0].add_image(...)``

    def __setitem__(self, *args: Any, **kwargs: Any) -> None:
        pass


def rank_zero_experiment(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Decorator for a logger's ``experiment`` (``loggers.logger``): the real one on global rank 0, a
    `_DummyExperiment` elsewhere, as Lightning's (scvi-tools' ``SimpleLogger`` uses it)."""

    @functools.wraps(fn)
    def experiment(self: Any) -> Any:
        return fn(self) if current_global_rank() == 0 else _DummyExperiment()

    return experiment


def __getattr__(name: str) -> object:
    if name in _callbacks.NOT_PROVIDED:  # Lightning's, not Lockstep's: an error naming it
        raise not_provided(__name__, name, f"one of your own (Lightning's {_callbacks.NOT_PROVIDED[name]} is not part of Lockstep)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
