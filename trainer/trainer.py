"""`Trainer`: its configuration, the entry points fit / validate / test / predict, read-only state.

The work is done by the loops (`trainer.loops`), the strategy (`trainer.strategies`), the
checkpoint connector (`trainer.checkpointing.connector`) and the `MetricLogger`.
"""
from __future__ import annotations

import datetime
import os
from typing import Any, Callable

import torch

from trainer.accelerators.accelerator import Accelerator
from trainer.accelerators.precision import Precision, normalize_precision
from trainer.checkpointing.connector import save_checkpoint
from trainer.checks import check_call, check_trainer_arguments
from trainer.configuration import configure
from trainer.data.datamodule import DataModule, attach_datamodule, prepare_and_set_up_data, tear_down_data
from trainer.data.loaders import loader_batch_size, num_batches
from trainer.contracts import storage
from trainer.default_callbacks import Callback, Logger, ModelCheckpoint, checkpoint_callbacks
from trainer.default_callbacks import first_log_dir, make_callbacks, make_loggers, share_log_versions
from trainer.hooks import HookDispatcher
from trainer.launch.failure_notes import record_for_elastic_agent
from trainer.loops.evaluation_loop import EvaluationLoop
from trainer.loops.fit_loop import FitLoop
from trainer.loops.optimization import LRSchedulerConfig
from trainer.metrics.metric_logger import MetricLogger
from trainer.module import TrainModule
from trainer.profiler import Profiler
from trainer.seed import use_deterministic_algorithms
from trainer.stage import Stage, TrainerState
from trainer.strategies.selection import select_strategy
from trainer.strategies.strategy import Strategy


class Trainer:
    """Runs a `TrainModule`: the loops, the devices, the processes, the callbacks.

    See ``docs/trainer.md`` for every argument. Arguments are checked here, before any work.
    """

    def __init__(
        self,
        max_epochs: int | None = None,
        max_steps: int = -1,
        accelerator: str = "auto",
        devices: int | str = "auto",
        num_nodes: int = 1,
        strategy: str | Strategy = "auto",
        precision: str | int = "32-true",
        accumulate_grad_batches: int = 1,
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
    ) -> None:
        args = dict(locals())  # first statement: exactly the arguments (and self)
        check_trainer_arguments(args)
        configure(self, args)  # the plain settings, as fast_dev_run / overfit_batches adjust them

        self.precision = normalize_precision(precision)
        self._strategy = select_strategy(
            strategy,
            accelerator=Accelerator.from_flag(accelerator),
            devices=devices,
            num_nodes=num_nodes,
            sync_batchnorm=sync_batchnorm,
            use_distributed_sampler=use_distributed_sampler,
            precision=self.precision,
        )
        self.precision_plugin = Precision(self.precision, self._strategy.accelerator.kind)  # autocast, scaling
        use_deterministic_algorithms(deterministic)

        self.loggers: list[Logger] = make_loggers(False if self.fast_dev_run else logger, self.default_root_dir)
        self.callbacks: list[Callback] = make_callbacks(callbacks, self.loggers, args)
        self.state = TrainerState()
        self.should_stop = False  # set by a callback or the module: the loop stops at the next agreement point
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_scheduler_configs: list[LRSchedulerConfig] = []
        self.train_dataloader: Any = None
        self.val_dataloaders: list[Any] = []
        self.datamodule: DataModule | None = None  # the current (or last) run's
        self.num_test_batches: list[int | None] = []
        self.num_predict_batches: list[int | None] = []
        self.fit_loop = FitLoop(self, detect_non_finite_loss)
        self.metric_logger = MetricLogger(self.loggers)  # where `self.log` records; what reaches the loggers
        self._module: TrainModule | None = None
        self.hooks = HookDispatcher(self, None, [], Callback)  # the current run's hooks (none before a run)

    # -- read-only state ----------------------------------------------------------------------
    @property
    def strategy(self) -> Strategy:
        """The strategy (processes, device, collectives)."""
        return self._strategy

    @property
    def module(self) -> TrainModule:
        """The user's module (unwrapped)."""
        if self._module is None:
            raise RuntimeError("No module yet: call trainer.fit(module) (or validate/test/predict) first.")
        return self._module

    @property
    def model(self) -> torch.nn.Module:
        """What the loop calls: the module, or its DDP wrapper under a distributed strategy."""
        return self._strategy.model if self._strategy.model is not None else self.module

    @property
    def global_rank(self) -> int:
        """Rank of this process among all processes."""
        return self._strategy.global_rank

    @property
    def local_rank(self) -> int:
        """Rank of this process on its node (selects its device)."""
        return self._strategy.local_rank

    @property
    def node_rank(self) -> int:
        """Rank of this node among the nodes."""
        return self._strategy.node_rank

    @property
    def world_size(self) -> int:
        """Number of processes, W."""
        return self._strategy.world_size

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return self._strategy.num_nodes

    @property
    def is_global_zero(self) -> bool:
        """Whether this is global rank 0 (the process that logs and writes files)."""
        return self._strategy.is_global_zero

    @property
    def current_epoch(self) -> int:
        """The current epoch, counting from 0."""
        return self.fit_loop.progress.current_epoch

    @property
    def global_step(self) -> int:
        """Optimizer steps taken (one per accumulation window)."""
        return self.fit_loop.progress.global_step

    @property
    def num_training_batches(self) -> int | None:
        """This epoch's training batches (after ``limit_train_batches``), as every rank agreed."""
        return self.fit_loop.num_training_batches

    @property
    def sanity_checking(self) -> bool:
        """Whether the sanity validation steps are running."""
        return self.state.stage == Stage.SANITY_CHECK

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """Latest step values and epoch aggregates of everything logged (tensors)."""
        return self.metric_logger.callback_metrics

    @property
    def logged_metrics(self) -> dict[str, float]:
        """What was last sent to the loggers."""
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
    def micro_batch_size(self) -> int | None:
        """b: samples per rank per forward (from the train loader)."""
        return loader_batch_size(self.train_dataloader) if self.train_dataloader is not None else None

    @property
    def global_batch_size(self) -> int | None:
        """W * b * A: samples per optimizer step over all ranks."""
        b = self.micro_batch_size
        return None if b is None else self.world_size * b * self.accumulate_grad_batches

    @property
    def num_val_batches(self) -> list[int | None]:
        """Batches per validation loader of ``fit`` or the last ``validate`` (after ``limit_val_batches``)."""
        return [num_batches(dl, self.limit_val_batches, "val") for dl in self.val_dataloaders]

    @property
    def checkpoint_callback(self) -> ModelCheckpoint | None:
        """The first ModelCheckpoint (or subclass), if any."""
        return next(iter(self.checkpoint_callbacks), None)

    @property
    def checkpoint_callbacks(self) -> list[ModelCheckpoint]:
        """Every ModelCheckpoint (subclasses included)."""
        return checkpoint_callbacks(self.callbacks)

    # -- entry points -------------------------------------------------------------------------
    def fit(
        self,
        model: TrainModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool = True,
        datamodule: DataModule | None = None,
    ) -> None:
        """Train ``model`` on the loaders or a ``datamodule``; ``ckpt_path`` ("last", "best", a path) resumes.

        A restarted run (``restart_count`` > 0 in the cluster environment: torch's elastic agent
        restarting the worker group, or SLURM requeueing the job) resumes from the last checkpoint
        when ``ckpt_path`` is None. ``weights_only=False`` allows checkpoints with arbitrary
        pickled objects: only for files you trust.
        """
        check_call(model, Stage.FIT, ckpt_path, weights_only)
        train_dataloaders, datamodule = attach_datamodule(self, Stage.FIT, train_dataloaders, datamodule, val_dataloaders)
        self._run(
            Stage.FIT,
            model,
            lambda: self.fit_loop.fit(model, train_dataloaders, val_dataloaders, ckpt_path, weights_only),
            (model, train_dataloaders, val_dataloaders, ckpt_path, weights_only, datamodule),
        )

    def validate(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool = True,
        datamodule: DataModule | None = None,
    ) -> list[dict[str, float]]:
        """Run ``validation_step`` over the loaders (or a ``datamodule``'s); one metric dict per loader.

        ``ckpt_path`` loads the weights first; ``weights_only=False`` allows checkpoints with
        arbitrary pickled objects: only for files you trust.
        """
        return self._evaluate(Stage.VALIDATE, model, dataloaders, ckpt_path, weights_only, datamodule)

    def test(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool = True,
        datamodule: DataModule | None = None,
    ) -> list[dict[str, float]]:
        """Run ``test_step`` over the test data; one metric dict per loader (see `validate`)."""
        return self._evaluate(Stage.TEST, model, dataloaders, ckpt_path, weights_only, datamodule)

    def predict(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool = True,
        datamodule: DataModule | None = None,
    ) -> list[Any]:
        """Run ``predict_step`` and return its outputs (a list per loader when several; see `validate`)."""
        return self._evaluate(Stage.PREDICT, model, dataloaders, ckpt_path, weights_only, datamodule)

    def save_checkpoint(self, filepath: str | os.PathLike[str]) -> None:
        """Write a checkpoint of the run. Call it on every rank; global rank 0 writes, atomically
        (under FSDP every rank writes its shards into the directory ``filepath``: docs/checkpointing.md).

        Raises `NonFiniteLossError` instead when a training loss since the last check was not
        finite: the weights that follow it are never saved.

        While a run with several processes is failing (from ``on_exception``), the other ranks may
        be gone, so no collective runs: global rank 0 checks its own losses and writes its own
        state (the other ranks' ``rank_states`` are None); every other rank returns without writing.
        """
        save_checkpoint(self, filepath)

    def adopt_spawned_run(self, model: TrainModule | None, outcome: dict[str, Any]) -> None:
        """Take rank 0's final state from spawned workers (`SpawnLauncher`), as if run here."""
        model = model if model is not None else self._module
        if model is not None:
            model.load_state_dict(outcome["state_dict"])
            self._module = model
            model.trainer = self
        self.fit_loop.progress.load_state_dict(outcome["progress"])
        self.metric_logger.restore(outcome["callback_metrics"], outcome["logged_metrics"])

    # -- the run --------------------------------------------------------------------------------
    def _run(self, stage: Stage, model: TrainModule, body: Callable[[], Any], args: tuple[Any, ...] = ()) -> Any:
        self.state = TrainerState()
        if self._strategy.launcher is not None:
            # spawned workers inherit the loggers: one version for every call of this Trainer
            share_log_versions(self)
            return self._strategy.launcher.launch(self, stage.value, args)
        self.state.stage = stage
        self._module = model
        model.trainer = self
        self.should_stop = False
        self.hooks = HookDispatcher(self, model, self.callbacks, Callback)
        self.profiler.start(stage.value)
        try:
            self._strategy.setup_environment()
            prepare_and_set_up_data(self, model, stage)
            self.hooks.call("setup", stage.value)
            result = body()
        except BaseException as exc:
            self.state.failing = True  # from here on nothing may wait in a collective (save_checkpoint)
            clearer = self._strategy.on_failure(exc, self._position())
            record_for_elastic_agent(clearer or exc, self.global_rank)
            try:
                self.hooks.call_callbacks("on_exception", exc)
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
        if stage == Stage.FIT:
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
        self, stage: Stage, model: TrainModule | None, loaders: Any, ckpt_path: Any, weights_only: bool, datamodule: Any
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

        return self._run(stage, model, body, (model, loaders, ckpt_path, weights_only, datamodule))
