"""The real classes against the floor's protocols, for mypy only (never imported, never collected).

Each function returns a real object as the protocol a part of the trainer or a callback receives, or
calls a callback's hooks with what the trainer passes them: a member missing on the real class, or
typed differently from the protocol, is a mypy error here. `tests/project/test_types.py` runs mypy
(setup.cfg's configuration) on this file and expects no error.
"""
from __future__ import annotations

import torch

from callbacks import Callback, Logger, ModelCheckpoint, ProgressBar
from trainer.accelerators.accelerator import Accelerator
from trainer.accelerators.precision import Precision
from trainer.contracts.internals import (
    AcceleratorInternals,
    CollectivesView,
    FitLoopInternals,
    FitLoopView,
    HookCalls,
    LossCheckView,
    MetricLoggerView,
    MetricStoreView,
    ModuleInternals,
    OptimizationView,
    PlacementView,
    PrecisionView,
    ProfilerView,
    StrategyInternals,
    TrainerInternals,
)
from trainer.contracts.progress import FitProgress
from trainer.contracts.protocols import (
    CallbackView,
    CheckpointCallbackView,
    FitPosition,
    LoggerView,
    ModuleView,
    ProgressBarView,
    StrategyView,
    TrainerView,
)
from trainer.contracts.run_state import DataHooksView, DataModuleView
from trainer.contracts.trainer_state import EvaluationRun
from trainer.data.datamodule import DataModule
from trainer.distributed.cluster_environment import ClusterEnvironment
from trainer.distributed.stall import CollectiveProgress
from trainer.hooks import HookDispatcher
from trainer.loops.anomaly import NonFiniteLossCheck
from trainer.loops.automatic import AutomaticOptimization
from trainer.loops.evaluation_loop import EvaluationLoop
from trainer.loops.fit_loop import FitLoop
from trainer.loops.manual import ManualOptimization
from trainer.metrics.metric_logger import MetricLogger
from trainer.metrics.metric_store import MetricStore
from trainer.module import TrainModule
from trainer.profiler import Profiler
from trainer.strategies.strategy import Strategy
from trainer.trainer import Trainer


def trainer_for_its_parts(trainer: Trainer) -> TrainerInternals:
    return trainer


def trainer_for_callbacks(trainer: Trainer) -> TrainerView:
    return trainer


def fit_loop_for_optimization(loop: FitLoop) -> FitLoopView:
    return loop


def fit_loop_for_the_parts(loop: FitLoop) -> FitLoopInternals:
    return loop


def strategy_for_the_parts(strategy: Strategy) -> StrategyInternals:
    return strategy


def module_for_the_parts(module: TrainModule) -> ModuleInternals:
    return module


def data_hooks_of_a_module(module: TrainModule) -> DataHooksView:
    return module


def datamodule_for_the_parts(datamodule: DataModule) -> DataModuleView:
    return datamodule


def precision_for_the_parts(precision: Precision) -> PrecisionView:
    return precision


def hooks_for_the_parts(hooks: HookDispatcher) -> HookCalls:
    return hooks


def metric_logger_for_the_parts(metric_logger: MetricLogger) -> MetricLoggerView:
    return metric_logger


def metric_store_for_the_parts(store: MetricStore) -> MetricStoreView:
    return store


def profiler_for_the_parts(profiler: Profiler) -> ProfilerView:
    return profiler


def loss_check_for_the_parts(check: NonFiniteLossCheck) -> LossCheckView:
    return check


def optimizations_for_the_parts(automatic: AutomaticOptimization, manual: ManualOptimization) -> list[OptimizationView]:
    return [automatic, manual]


def accelerator_for_the_parts(accelerator: Accelerator) -> AcceleratorInternals:
    return accelerator


def placement_for_the_parts(environment: ClusterEnvironment) -> PlacementView:
    return environment


def collectives_for_the_parts(collectives: CollectiveProgress) -> CollectivesView:
    return collectives


def evaluation_for_the_trainer_state(evaluation: EvaluationLoop) -> EvaluationRun:
    return evaluation


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
