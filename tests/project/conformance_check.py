"""The real classes against the floor's protocols, for mypy only (never imported, never collected).

Each function returns a real object as the protocol a part of the trainer or a callback receives, or
calls a callback's hooks with what the trainer passes them: a member missing on the real class, or
typed differently from the protocol, is a mypy error here. `tests/project/test_types.py` runs mypy
(setup.cfg's configuration) on this file and expects no error.
"""
from __future__ import annotations

import torch

from callbacks import Callback, Logger, ModelCheckpoint, ProgressBar
from trainer.contracts.progress import FitProgress
from trainer.contracts.protocols import (
    CallbackView,
    CheckpointCallbackView,
    FitLoopView,
    FitPosition,
    LoggerView,
    ModuleView,
    ProgressBarView,
    StrategyView,
    TrainerInternals,
    TrainerView,
)
from trainer.loops.fit_loop import FitLoop
from trainer.module import TrainModule
from trainer.strategies.strategy import Strategy
from trainer.trainer import Trainer


def trainer_for_its_parts(trainer: Trainer) -> TrainerInternals:
    return trainer


def trainer_for_callbacks(trainer: Trainer) -> TrainerView:
    return trainer


def fit_loop_for_optimization(loop: FitLoop) -> FitLoopView:
    return loop


def strategy_for_callbacks(strategy: Strategy) -> StrategyView:
    return strategy


def module_for_callbacks(module: TrainModule) -> ModuleView:
    return module


def progress_for_callbacks(progress: FitProgress) -> FitPosition:
    return progress


def callback_for_the_trainer(callback: Callback) -> CallbackView:
    return callback


def logger_for_the_trainer(logger: Logger) -> LoggerView:
    return logger


def checkpoint_for_the_trainer(checkpoint: ModelCheckpoint) -> CheckpointCallbackView:
    return checkpoint


def progress_bar_for_the_module(bar: ProgressBar) -> ProgressBarView:
    return bar


def hooks_take_what_the_trainer_passes(
    callback: Callback, trainer: Trainer, module: TrainModule, batch: object, loss: torch.Tensor
) -> None:
    # the dispatcher (`trainer.hooks`) calls ``hook(trainer, module, *args)`` with the Trainer itself
    # and the user's TrainModule: each hook's TrainerView / ModuleView must accept them
    for hook in (
        callback.on_fit_start, callback.on_fit_end, callback.on_sanity_check_start, callback.on_sanity_check_end,
        callback.on_train_start, callback.on_train_end, callback.on_train_epoch_start, callback.on_train_epoch_end,
        callback.on_after_backward, callback.on_validation_start, callback.on_validation_end,
        callback.on_validation_epoch_start, callback.on_validation_epoch_end, callback.on_test_start,
        callback.on_test_end, callback.on_test_epoch_start, callback.on_test_epoch_end, callback.on_predict_start,
        callback.on_predict_end, callback.on_predict_epoch_start, callback.on_predict_epoch_end,
    ):
        hook(trainer, module)
    callback.setup(trainer, module, "fit")
    callback.teardown(trainer, module, "fit")
    callback.on_train_batch_start(trainer, module, batch, 0)
    callback.on_train_batch_end(trainer, module, {"loss": loss}, batch, 0)
    callback.on_before_backward(trainer, module, loss)
    optimizer = trainer.optimizers[0]
    callback.on_before_optimizer_step(trainer, module, optimizer)
    callback.on_before_zero_grad(trainer, module, optimizer)
    callback.on_validation_batch_start(trainer, module, batch, 0, 0)
    callback.on_validation_batch_end(trainer, module, loss, batch, 0, 0)
    callback.on_test_batch_start(trainer, module, batch, 0, 0)
    callback.on_test_batch_end(trainer, module, loss, batch, 0, 0)
    callback.on_predict_batch_start(trainer, module, batch, 0, 0)
    callback.on_predict_batch_end(trainer, module, loss, batch, 0, 0)
    callback.on_exception(trainer, module, RuntimeError())
    checkpoint: dict[str, object] = {}
    callback.on_save_checkpoint(trainer, module, checkpoint)
    callback.on_load_checkpoint(trainer, module, checkpoint)
