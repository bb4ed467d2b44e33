"""The one place the trainer imports the `callbacks` package: defaults, roles and base types.

Callbacks depend on the trainer's public types (for annotations only), never the reverse at
import time of a callback; the trainer reaches callbacks through this module alone.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from callbacks._file_logger import fix_log_versions
from callbacks.callback import Callback
from callbacks.early_stopping import EarlyStopping
from callbacks.logger import Logger
from callbacks.lr_monitor import LearningRateMonitor
from callbacks.model_checkpoint import ModelCheckpoint
from callbacks.model_summary import ModelSummary
from callbacks.progress_bar import ProgressBar
from callbacks.timer import Timer, parse_duration

if TYPE_CHECKING:
    from trainer.trainer import Trainer

__all__ = [
    "Callback", "Logger", "ModelCheckpoint", "make_loggers", "make_callbacks", "checkpoint_callbacks",
    "parse_duration",
]


def make_loggers(logger: Any, root: str) -> list[Logger]:
    """The Trainer's ``logger`` argument as a list (``True``: one TensorBoard logger in ``root``)."""
    if logger is True:
        from callbacks.tensorboard_logger import TensorBoardLogger  # imports tensorboard: only when used

        return [TensorBoardLogger(save_dir=root)]
    if logger is False or logger is None:
        return []
    items = list(logger) if isinstance(logger, (list, tuple)) else [logger]
    for lg in items:
        if not isinstance(lg, Logger):
            raise TypeError(f"logger must be True/False, a Logger or a list of Loggers; got {type(lg).__name__}")
    return items


def make_callbacks(callbacks: Any, loggers: list[Logger], args: Mapping[str, Any]) -> list[Callback]:
    """The run's callbacks in calling order: loggers, the given and default ones, checkpoints last.

    ``args`` are the Trainer's arguments. A default is added only when no callback of its kind (a
    subclass included) was given. ``fast_dev_run`` removes every checkpoint callback: it writes nothing.
    """
    given = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    for cb in given:
        if not isinstance(cb, Callback):
            raise TypeError(f"callbacks must be Callback instances; got {type(cb).__name__}")

    def has(kind: type) -> bool:
        return any(isinstance(cb, kind) for cb in given)

    if loggers and not has(LearningRateMonitor):  # learning rates belong in every log
        given.append(LearningRateMonitor())
    if args["enable_progress_bar"] and not has(ProgressBar):
        given.append(ProgressBar())
    if args["enable_model_summary"] and not has(ModelSummary):
        given.append(ModelSummary())
    if args["max_time"] is not None and not has(Timer):
        given.append(Timer(args["max_time"], interval="step"))
    if args["fast_dev_run"]:
        given = [cb for cb in given if not isinstance(cb, ModelCheckpoint)]
    elif args["enable_checkpointing"] and not has(ModelCheckpoint):
        given.append(ModelCheckpoint())
    # Checkpoint callbacks run last so they save state every other callback already updated.
    ordinary = [cb for cb in given if not isinstance(cb, ModelCheckpoint)]
    return [*loggers, *ordinary, *checkpoint_callbacks(given)]


def first_log_dir(loggers: list[Logger], default: str) -> str:
    """Where the first logger that has a directory writes, else ``default``."""
    for lg in loggers:
        if lg.log_dir is not None:
            return lg.log_dir
    return default


def checkpoint_callbacks(callbacks: list[Callback]) -> list[ModelCheckpoint]:
    """Every `ModelCheckpoint` (subclasses included) among ``callbacks``, in order."""
    return [cb for cb in callbacks if isinstance(cb, ModelCheckpoint)]


def monitors_metrics(callback: Callback) -> bool:
    """Whether ``callback`` acts on monitored metrics (checkpointing, early stopping).

    These run their ``on_train_epoch_end`` after the module's, so they see what it logs there.
    """
    return isinstance(callback, (ModelCheckpoint, EarlyStopping))


def print_above_progress(trainer: Trainer | None, *args: Any, **kwargs: Any) -> None:
    """``print``, through the run's progress bar when it has one (a line above a drawn bar)."""
    bars = [cb for cb in (trainer.callbacks if trainer is not None else []) if isinstance(cb, ProgressBar)]
    if bars and bars[0].is_enabled and "file" not in kwargs:
        bars[0].print(*args, **kwargs)
    else:
        print(*args, **kwargs)


def share_log_versions(trainer: Trainer) -> None:
    """Fix the file loggers' shared version before workers are spawned (they inherit it)."""
    fix_log_versions(trainer, trainer.loggers, broadcast=False)
