"""``lightning.pytorch.loggers`` under Lockstep's name: ``pl.loggers.TensorBoardLogger`` after
``import trainer as pl``. Loggers are callbacks here: the classes are the `callbacks` package's own.

A namespace module for users only: nothing inside `trainer/` imports it (docs/architecture.md).
"""
from __future__ import annotations

import callbacks as _callbacks
from callbacks import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from trainer.lightning.unsupported import not_provided

__all__ = ["CSVLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger"]


def __getattr__(name: str) -> object:
    if name in _callbacks.NOT_PROVIDED:  # Lightning's, not Lockstep's: an error naming it
        raise not_provided(__name__, name, f"one of your own (Lightning's {_callbacks.NOT_PROVIDED[name]} is not part of Lockstep)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
