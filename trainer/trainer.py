"""`Trainer`: its configuration (`trainer.contracts.config`), the entry points fit / validate / test /
predict, read-only state. The loops, the strategy, the checkpoint connector and the `MetricLogger` do the work."""
from __future__ import annotations

import datetime
import os
from typing import TYPE_CHECKING, Any, Callable

import torch

from trainer.accelerators.accelerator import Accelerator
from trainer.accelerators.precision import Precision, normalize_precision
from trainer.checkpointing.connector import save_checkpoint
from trainer.checks import check_call
from trainer.contracts.arguments import hint_misspelled_arguments
from trainer.configuration import TrainerSettings, configure
from trainer.contracts.config import CheckpointingConfig, DebugConfig, DistributedConfig, Limits, LoggingConfig, LoopConfig
from trainer.contracts.config import PrecisionConfig, TrainerConfig
from trainer.contracts.internals import ModuleInternals
from trainer.data.datamodule import DataModule, attach_datamodule, prepare_and_set_up_data, tear_down_data
from trainer.batch_counts import BatchCounts
from trainer.default_callbacks import Callback, Logger, ModelCheckpoint, checkpoint_callbacks
from trainer.default_callbacks import (
    attach_module_logging, first_log_dir, hook_receivers, make_callbacks, make_loggers, share_log_versions,
    with_module_callbacks,
)
from trainer.hooks import HookDispatcher
from trainer.metrics.results_table import print_results
from trainer.lightning.unsupported import check_supported
from trainer.launch.failure_notes import record_for_elastic_agent
from trainer.lightning.attributes import lightning_attribute
from trainer.lightning.plugins import connect_plugins
from trainer.loops.evaluation_loop import EvaluationLoop
from trainer.loops.fit_loop import FitLoop
from trainer.contracts.progress import FitProgress
from trainer.metrics.metric_logger import MetricLogger
from trainer.module import TrainModule
from trainer.profiler import Profiler, make_profiler
from trainer.run_state_fields import RunState, RunStateFields
from trainer.seed import seed_everything, set_torch_flags  # noqa: F401 - lightning.pytorch.trainer has both names
from trainer.stage import Stage, StageFlags, TrainerState
from trainer.strategies.placement import JobPlacement
from trainer.strategies.selection import select_strategy
from trainer.strategies.strategy import Strategy


class Trainer(TrainerSettings, RunStateFields, BatchCounts, StageFlags, JobPlacement):
    """Runs a `TrainModule`: the loops, the devices, the processes, the callbacks (``docs/trainer.md``:
    every argument, checked before any work; each is then a read-only attribute of the same name)."""

    @hint_misspelled_arguments
    def __init__(
        self,
        max_epochs: int | None = None,
        max_steps: int = -1,
        accelerator: str | Any = "auto",
        devices: int | str = "auto",
        num_nodes: int = 1,
        strategy: str | Strategy = "auto",
        precision: str | int = "32-true",
        accumulate_grad_batches: int = 1,
        global_batch_size: int | None = None,
        sync_batchnorm: bool = False,
        scale_lr: bool | str = False,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
        callbacks: list[Callback] | Callback | None = None,
        logger: bool | Logger | list[Logger] | None = True,
        default_root_dir: str | os.PathLike[str] | None = None,
        enable_progress_bar: bool = True,
        enable_checkpointing: bool = True,
        log_every_n_steps: int = 50,
        val_check_interval: int | float = 1.0,
        check_val_every_n_epoch: int | None = 1,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        num_sanity_val_steps: int = 2,
        deterministic: bool | str = False,
        use_distributed_sampler: bool = True,
        allow_global_batch_change: bool = False,
        allow_dataset_change: bool = False,
        detect_non_finite_loss: bool = True,
        detect_non_finite_grads: bool = False,
        compile: bool = False,
        channels_last: bool = False,
        pin_memory: bool = True,
        fast_dev_run: bool | int = False,
        overfit_batches: int | float = 0.0,
        max_time: str | datetime.timedelta | dict[str, int] | None = None,
        enable_model_summary: bool = True,
        reload_dataloaders_every_n_epochs: int = 0,
        profiler: str | Profiler | None = None,
        min_epochs: int | None = None,
        min_steps: int | None = None,
        benchmark: bool | None = None,
        inference_mode: bool = True,
        detect_anomaly: bool = False,
        enable_autolog_hparams: bool = True,
        barebones: bool = False,
        plugins: Any = None,
        model_registry: str | None = None,
    ) -> None:
        self.config = configure(TrainerConfig(  # each section checks its arguments (in the fields' order)
            Limits(max_epochs, max_steps, min_epochs, min_steps, max_time, limit_train_batches,
                   limit_val_batches, limit_test_batches, limit_predict_batches),
            LoopConfig(accumulate_grad_batches, global_batch_size, gradient_clip_val, gradient_clip_algorithm, scale_lr,
                       val_check_interval, check_val_every_n_epoch, num_sanity_val_steps,
                       reload_dataloaders_every_n_epochs, inference_mode, compile, channels_last, pin_memory, callbacks),
            PrecisionConfig(precision, deterministic, benchmark),
            CheckpointingConfig(enable_checkpointing, default_root_dir, allow_global_batch_change, allow_dataset_change,
                                model_registry),
            LoggingConfig(logger, log_every_n_steps, enable_progress_bar, enable_model_summary, enable_autolog_hparams, profiler),
            DebugConfig(fast_dev_run, overfit_batches, detect_non_finite_loss, detect_non_finite_grads, detect_anomaly, barebones),
            DistributedConfig(accelerator, devices, num_nodes, strategy, sync_batchnorm, use_distributed_sampler, plugins),
        ))
        self.profiler = make_profiler(profiler)  # the argument as given; its section keeps it unbuilt
        self.precision = normalize_precision(self.config.precision.precision)
        self._strategy = select_strategy(self.config.distributed, Accelerator.from_flag(self.config.distributed.accelerator), self.precision)
        connect_plugins(self._strategy, self.config.distributed.plugins)  # a CheckpointIO, a ClusterEnvironment
        self.precision_plugin = Precision(self.precision, self._strategy.accelerator.kind)  # autocast, scaling
        self.precision = self.precision_plugin.precision  # "16-mixed" on CPU falls back to "bf16-mixed", as in Lightning
        set_torch_flags(self.config.precision.deterministic, self.config.precision.benchmark)
        self.loggers: list[Logger] = make_loggers(self.config)
        self.callbacks: list[Callback] = make_callbacks(self.config, self.loggers)
        self.state = TrainerState()
        self.run = RunState(self.config.loop.accumulate_grad_batches)  # what changes during a run: should_stop, optimizers, loaders
        self.fit_loop = FitLoop(self, self.config.debug.detect_non_finite_loss)
        self.metric_logger = MetricLogger(self.loggers)  # where `self.log` records; what reaches the loggers
        self._module: TrainModule | None = None
        self.hooks = HookDispatcher(self, None, [], Callback)  # the current run's hooks (none before a run)

    # -- read-only state ----------------------------------------------------------------------
    @property
    def strategy(self) -> Strategy:
        """The strategy (processes, device, collectives)."""
        return self._strategy

    _job_ranks = strategy  # JobPlacement's ranks are the strategy's (a strategy's own answer is the Trainer's)

    @property
    def module(self) -> TrainModule:
        """The user's module (unwrapped)."""
        if self._module is None:
            raise RuntimeError("No module yet: call trainer.fit(module) (or validate/test/predict) first.")
        return self._module

    @property
    def model(self) -> torch.nn.Module | None:
        """What the loop calls: the module or its DDP wrapper; None before the first run, as Lightning's."""
        return self._strategy.model if self._strategy.model is not None else self._module

    @property
    def lightning_module(self) -> TrainModule | None:
        """Lightning's name for the module: None before the first run (where `module` raises)."""
        return self._module

    @property
    def current_epoch(self) -> int:
        """The current epoch, counting from 0."""
        return self.fit_loop.progress.current_epoch

    @property
    def global_step(self) -> int:
        """Optimizer steps taken (one per accumulation window)."""
        return self.fit_loop.progress.global_step

    @property
    def fit_progress(self) -> FitProgress:
        """Where the fit stands: epoch, global step, batches done in the epoch (callbacks only read it)."""
        return self.fit_loop.progress

    @property
    def num_training_batches(self) -> int | None:
        """This epoch's training batches (after ``limit_train_batches``), as every rank agreed."""
        return self.fit_loop.num_training_batches

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """Latest step values and epoch aggregates of everything logged (tensors)."""
        return self.metric_logger.callback_metrics

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """What was last sent to the loggers (tensors, as Lightning's)."""
        return self.metric_logger.logged_metrics

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """What the progress bar shows, read from the device now (see `MetricLogger.progress_bar_metrics`)."""
        return self.metric_logger.progress_bar_metrics()

    @property
    def log_dir(self) -> str:
        """Where the first logger writes, else ``default_root_dir``."""
        return first_log_dir(self.loggers, self.default_root_dir)

    @property
    def logger(self) -> Logger | None:
        """The first logger, if any."""
        return self.loggers[0] if self.loggers else None

    @property
    def checkpoint_callback(self) -> ModelCheckpoint | None:
        """The first ModelCheckpoint (or subclass), if any."""
        return next(iter(self.checkpoint_callbacks), None)

    @property
    def checkpoint_callbacks(self) -> list[ModelCheckpoint]:
        """Every ModelCheckpoint (subclasses included)."""
        return checkpoint_callbacks(self.callbacks)

    # -- entry points -------------------------------------------------------------------------
    if not TYPE_CHECKING:
        # the type checker does not see it, so a name the class lacks is a type error and the
        # floor's protocols are checked against the real members (tests/project/conformance_check.py)
        def __getattr__(self, name: str) -> Any:
            # only for names the class lacks: Lightning's other Trainer attributes, answered by a view of
            # this Trainer in the Lightning layer (`trainer.lightning.attributes`), not by a base class
            return lightning_attribute(self, name)

    def fit(
        self,
        model: TrainModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool = True,
    ) -> None:
        """Train ``model`` on the loaders or a ``datamodule``; ``ckpt_path`` ("last", "best", a path) resumes.

        A restart (`Strategy.is_restart`: torchrun's, a SLURM requeue) resumes its own run's last checkpoint
        when ``ckpt_path`` is None. ``weights_only=False`` unpickles anything: only for files you trust."""
        check_call(model, Stage.FIT, ckpt_path, weights_only)
        train_dataloaders, datamodule = attach_datamodule(self, Stage.FIT, train_dataloaders, datamodule, val_dataloaders)
        args = (model, train_dataloaders, val_dataloaders, datamodule, ckpt_path, weights_only)
        body = lambda: self.fit_loop.fit(model, train_dataloaders, val_dataloaders, ckpt_path, weights_only)  # noqa: E731
        self._run(Stage.FIT, model, body, args)

    def validate(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        verbose: bool = True,
        datamodule: DataModule | None = None,
        weights_only: bool = True,
    ) -> list[dict[str, float]]:
        """Run ``validation_step`` over the loaders (or a ``datamodule``'s); one metric dict per loader.

        ``ckpt_path`` loads the weights first (``weights_only=False``: any pickled object, for files
        you trust); ``verbose``: global rank 0 prints the results table."""
        # `_evaluate` serves predict too (typed Any): validate's results are one metric dict per loader
        results: list[dict[str, float]] = self._evaluate(
            Stage.VALIDATE, model, dataloaders, ckpt_path, weights_only, datamodule, verbose)
        return results

    def test(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        verbose: bool = True,
        datamodule: DataModule | None = None,
        weights_only: bool = True,
    ) -> list[dict[str, float]]:
        """Run ``test_step`` over the test data; one metric dict per loader (see `validate`)."""
        results: list[dict[str, float]] = self._evaluate(
            Stage.TEST, model, dataloaders, ckpt_path, weights_only, datamodule, verbose)
        return results

    def predict(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        return_predictions: bool | None = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool = True,
    ) -> list[Any] | None:
        """Run ``predict_step``; its outputs (a list per loader when several), None if ``return_predictions=False``."""
        result = self._evaluate(Stage.PREDICT, model, dataloaders, ckpt_path, weights_only, datamodule, False)
        return None if return_predictions is False else result

    def request_stop(self) -> None:
        """Set ``should_stop``; with several processes every rank calls it, and the agreed stop may end the epoch early."""
        self.should_stop = True
        if self.world_size > 1:
            self.fit_loop.agree_on_stop()

    def save_checkpoint(self, filepath: str | os.PathLike[str], weights_only: bool = False) -> None:
        """Write a checkpoint of the run. Call it on every rank; global rank 0 writes, atomically
        (under FSDP every rank writes its shards into the directory ``filepath``: docs/checkpointing.md).
        ``weights_only=True``: no optimizer, scheduler or callback state (loads, cannot resume).

        Raises `NonFiniteLossError` instead when a training loss since the last check was not
        finite: the weights that follow it are never saved.

        While a run with several processes is failing (from ``on_exception``) no collective runs:
        global rank 0 writes its own state (the others' ``rank_states`` are None), other ranks nothing.
        """
        save_checkpoint(self, filepath, weights_only)

    def adopt_spawned_run(self, model: ModuleInternals | None, outcome: dict[str, Any]) -> None:
        """Take rank 0's final state from spawned workers (`SpawnLauncher`), as if run here."""
        model = model if model is not None else self._module
        if model is not None:
            assert isinstance(model, TrainModule)  # what `fit` was given (it refuses any other)
            model.load_state_dict(outcome["state_dict"])
            self._module = model
            model.trainer = self
        self.fit_loop.adopt_progress(outcome["progress"])
        self.metric_logger.restore(outcome["callback_metrics"], outcome["logged_metrics"])

    # -- the run --------------------------------------------------------------------------------
    def _run(self, stage: Stage, model: TrainModule, body: Callable[[], Any], args: tuple[Any, ...] = ()) -> Any:
        check_supported(model)  # a Lightning hook Lockstep does not call fails here, by name
        self.state = TrainerState()
        if self._strategy.launcher is not None:
            # spawned workers inherit the loggers: one version for every call of this Trainer
            share_log_versions(self)
            return self._strategy.launcher.launch(self, stage.value, args)
        self.state.start(stage)
        self._module = model
        model.trainer = self
        self.should_stop = False
        self._strategy.collectives.position = self._position  # what this rank's heartbeat says
        self.callbacks = with_module_callbacks(self.callbacks, model)  # kept, as in Lightning
        attach_module_logging(self.callbacks, model)
        self.hooks = HookDispatcher(self, model, hook_receivers(self.loggers, self.callbacks), Callback)
        self.profiler.start(stage.value)
        try:
            self._strategy.setup_environment()
            prepare_and_set_up_data(self, model, stage)
            self.hooks.call("setup", stage.value)
            self.metric_logger.start_run(self._strategy)
            result = body()
        except BaseException as exc:
            self.state.fail(exc)  # from here on nothing may wait in a collective (save_checkpoint)
            clearer = self._strategy.on_failure(exc, self._position(), self.global_step)
            record_for_elastic_agent(clearer or exc, self.global_rank)
            try:
                self.hooks.call_callbacks("on_exception", exc)
                if self.datamodule is not None:  # as Lightning: after the callbacks
                    self.datamodule.on_exception(exc)
            finally:  # a callback that raises must not keep this rank in the group
                self._finish(stage, "failed")
            if clearer is not None:
                raise clearer from exc
            raise
        self._finish(stage, "success")
        return result

    def _position(self) -> str:
        """Where the run is, for error messages: epoch, global step, and the batch of the stage."""
        where = f"epoch {self.current_epoch}, global step {self.global_step}"
        stage, evaluation = self.state.stage, self.state.evaluation
        if stage == Stage.TRAIN:
            return where + self.fit_loop.position()
        batch = evaluation.position() if evaluation is not None and evaluation.stage == stage else ""
        return f"{where}, in {stage}{batch}"

    def _finish(self, stage: Stage, status: str) -> None:
        try:
            if self.is_global_zero:
                for lg in self.loggers:
                    lg.finalize(status)
            tear_down_data(self, stage)
            self.hooks.call("teardown", stage.value)
            if status == "success":  # no rank leaves the group while another still uses it
                self._strategy.barrier("teardown")
        finally:
            self.profiler.stop(stage.value, self.log_dir, self.global_rank, write=not self.fast_dev_run)
            self.state.stage = None
            self._strategy.teardown()

    def _evaluate(
        self, stage: Stage, model: Any, loaders: Any, ckpt_path: Any, weights_only: bool, datamodule: Any, verbose: bool
    ) -> Any:
        if model is None:
            if self._module is None:
                raise ValueError(f"trainer.{stage}() needs a model: pass one, or call fit first.")
            model = self._module
        check_call(model, stage, ckpt_path, weights_only)
        loaders, datamodule = attach_datamodule(self, stage, loaders, datamodule)

        def body() -> Any:
            loop = EvaluationLoop(self, stage)
            return loop.run(loop.setup(model, loaders, ckpt_path, weights_only))

        predict = stage == Stage.PREDICT  # spawned workers get the entry point's arguments; this process prints
        args = (model, loaders, datamodule, True) if predict else (model, loaders, ckpt_path, False, datamodule)
        results = self._run(stage, model, body, (*args, *((ckpt_path,) if predict else ()), weights_only))
        if verbose and self.is_global_zero:
            print_results(results, stage.value)
        return results
