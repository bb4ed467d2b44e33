"""``lightning.pytorch.callbacks`` under Lockstep's name: ``pl.callbacks.ModelCheckpoint`` after
``import trainer as pl``. The classes are the `callbacks` package's own (the same objects).

A namespace module for users only: nothing inside `trainer/` imports it (the trainer reaches the
callbacks through `trainer/default_callbacks.py`; docs/architecture.md).
"""
from __future__ import annotations

import callbacks as _callbacks
from callbacks import *  # noqa: F401,F403 - the re-export is the point
from callbacks import __all__  # noqa: F401
from trainer.lightning.unsupported import not_provided


def __getattr__(name: str) -> object:
    if name in _callbacks.NOT_PROVIDED:  # Lightning's, not Lockstep's: an error naming it
        raise not_provided(__name__, name, f"one of your own (Lightning's {_callbacks.NOT_PROVIDED[name]} is not part of Lockstep)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
