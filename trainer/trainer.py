"""`Trainer`: validates its arguments, then runs fit / validate / test / predict."""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping

import torch

from callbacks._file_logger import fix_log_versions
from callbacks.callback import Callback
from callbacks.logger import Logger
from trainer.accelerators.accelerator import Accelerator
from trainer.loops.anomaly import NonFiniteLossCheck
from trainer.arguments import check_bool, check_int, check_number, check_path, check_str
from trainer.checkpointing.checkpoint import (
    atomic_save,
    check_compatible,
    dump_checkpoint,
    find_last_checkpoint,
    preemption_checkpoint_path,
    load_checkpoint,
    resolve_checkpoint_path,
    restore_checkpoint,
)
from trainer.data.loaders import (
    as_loader_list,
    check_limit,
    check_loader,
    has_length,
    loader_batch_size,
    num_batches,
)
from trainer.loops.evaluation_loop import EvaluationLoop
from trainer.loops.fit_loop import FitLoop
from trainer.hooks import HookDispatcher
from trainer.metrics.metric_store import MetricStore
from trainer.module import TrainModule
from trainer.loops.optimization import (
    LRSchedulerConfig,
    SchedulerMetrics,
    lr_scale_factor,
    optimizer_parameters,
    parse_optimizers,
    scale_learning_rates,
)
from trainer.accelerators.precision import Precision, normalize_precision
from trainer.launch.preemption import Preempted, PreemptionWatch, announce_preemption, leave_note_for_launcher
from trainer.seed import install_worker_seeding
from trainer.strategies.strategy import Strategy
from trainer.strategies.selection import select_strategy


@dataclasses.dataclass
class TrainerState:
    """What the Trainer is doing: ``stage`` is fit/validate/test/predict/sanity_check or None."""

    fn: str | None = None
    stage: str | None = None
    failing: bool = False  # the run raised (set before on_exception, kept until the next run)


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
        detect_non_finite_loss: bool = True,
        detect_non_finite_grads: bool = False,
        compile: bool = False,
        channels_last: bool = False,
        pin_memory: bool = True,
    ) -> None:
        _check_arguments(locals())  # first statement: locals() holds exactly the arguments
        if max_epochs is None and max_steps == -1:
            max_epochs = 1000  # Lightning's default when neither limit is given
        self.compile = compile  # torch.compile the module (in place) before the strategy wraps it
        self.channels_last = channels_last  # module and 4-D batches in torch.channels_last
        self.pin_memory = pin_memory  # CUDA: pin train/val loaders that do not pin yet

        self.max_epochs = max_epochs
        self.max_steps = max_steps
        self.accumulate_grad_batches = accumulate_grad_batches
        self.sync_batchnorm = sync_batchnorm
        self.scale_lr = scale_lr
        self.gradient_clip_val = float(gradient_clip_val) if gradient_clip_val is not None else None
        self.gradient_clip_algorithm = gradient_clip_algorithm
        self.log_every_n_steps = log_every_n_steps
        self.val_check_interval = val_check_interval
        self.check_val_every_n_epoch = check_val_every_n_epoch
        self.limit_train_batches = limit_train_batches
        self.limit_val_batches = limit_val_batches
        self.limit_test_batches = limit_test_batches
        self.limit_predict_batches = limit_predict_batches
        self.num_sanity_val_steps = num_sanity_val_steps
        self.use_distributed_sampler = use_distributed_sampler
        self.default_root_dir = os.fspath(default_root_dir) if default_root_dir is not None else os.getcwd()

        self.precision = normalize_precision(precision)
        self._accelerator = Accelerator.from_flag(accelerator)
        self._strategy = select_strategy(
            strategy,
            accelerator=self._accelerator,
            devices=devices,
            num_nodes=num_nodes,
            sync_batchnorm=sync_batchnorm,
            use_distributed_sampler=use_distributed_sampler,
        )
        self._precision = Precision(self.precision, self._strategy.accelerator.kind)
        if deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=deterministic == "warn")

        self.loggers: list[Logger] = _make_loggers(logger, self.default_root_dir)
        self.callbacks: list[Callback] = _make_callbacks(
            callbacks, self.loggers, enable_progress_bar, enable_checkpointing
        )

        self.state = TrainerState()
        self.should_stop = False
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_scheduler_configs: list[LRSchedulerConfig] = []
        self.train_dataloader: Any = None
        self.val_dataloaders: list[Any] = []
        self.num_training_batches: int | None = None
        self._agree_each_batch = False
        self._train_length_known = True
        self._agreed_stop = False
        self.fit_loop = FitLoop(self)
        self._module: TrainModule | None = None
        self._current_epoch = 0
        self._global_step = 0
        self._callback_metrics: dict[str, torch.Tensor] = {}
        self._logged_metrics: dict[str, float] = {}
        self._train_metrics = MetricStore(training=True)
        self._active_metrics = self._train_metrics
        self._optimizer_params: list[list[torch.Tensor]] = []
        self._eval_progress_bar_keys: list[str] = []
        self.num_test_batches: list[int | None] = []
        self.num_predict_batches: list[int | None] = []
        self._last_loss: torch.Tensor | None = None
        self._loss_check = NonFiniteLossCheck(detect_non_finite_loss)
        self.detect_non_finite_grads = detect_non_finite_grads
        self._grad_check_params: list[tuple[str, torch.Tensor]] | None = None
        self._preemption = PreemptionWatch()
        self._in_training_loop = False
        self._eval_loop: EvaluationLoop | None = None  # the latest evaluation (errors name its batch)
        self._hooks: HookDispatcher = HookDispatcher(self, TrainModule(), [])
        self._lr_scaled = False
        self._validated_in_fit = False  # a plateau scheduler's missing monitor may still come

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
        return self._current_epoch

    @property
    def global_step(self) -> int:
        """Optimizer steps taken (one per accumulation window)."""
        return self._global_step

    @property
    def sanity_checking(self) -> bool:
        """Whether the sanity validation steps are running."""
        return self.state.stage == "sanity_check"

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """Latest step values and epoch aggregates of everything logged (tensors)."""
        return {**self._train_metrics.current_values(), **self._callback_metrics}

    @property
    def logged_metrics(self) -> dict[str, float]:
        """What was last sent to the loggers."""
        return dict(self._logged_metrics)

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """What the progress bar shows, read from the device now.

        During an evaluation run: that run's ``prog_bar=True`` values (latest batch, then the
        run's aggregate). Otherwise: the training loss as ``loss`` (unless the module shows its
        own ``loss`` or ``train_loss``), the training ``prog_bar=True`` values and the last
        evaluation's.
        """
        run = self._active_metrics
        if not run.training:
            values = {**run.current_values(), **run.aggregates}
            return {key: float(values[key]) for key in run.progress_bar_keys() if key in values}
        train_keys = self._train_metrics.progress_bar_keys()
        out: dict[str, float] = {}
        if self._last_loss is not None and not {"loss", "train_loss"} & set(train_keys):
            out["loss"] = float(self._last_loss)
        current = {**self._train_metrics.current_values(), **self._callback_metrics}
        for key in [*train_keys, *self._eval_progress_bar_keys]:
            if key in current:
                out[key] = float(current[key])
        return out

    @property
    def log_dir(self) -> str:
        """Where the first logger writes, else ``default_root_dir``."""
        for lg in self.loggers:
            if lg.log_dir is not None:
                return lg.log_dir
        return self.default_root_dir

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
    def checkpoint_callback(self) -> Callback | None:
        """The first ModelCheckpoint, if any."""
        cbs = self.checkpoint_callbacks
        return cbs[0] if cbs else None

    @property
    def checkpoint_callbacks(self) -> list[Callback]:
        """Every ModelCheckpoint callback."""
        return [cb for cb in self.callbacks if type(cb).__name__ == "ModelCheckpoint"]

    # -- entry points -------------------------------------------------------------------------
    def fit(
        self,
        model: TrainModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool = True,
    ) -> None:
        """Train ``model``; ``ckpt_path`` ("last", "best" or a path) resumes a checkpoint.

        Under torch's elastic agent, a restarted worker group (``TORCHELASTIC_RESTART_COUNT`` > 0)
        resumes from the last checkpoint when ``ckpt_path`` is None. ``weights_only=False``
        allows checkpoints with arbitrary pickled objects: only for files you trust.
        """
        _check_module(model, training=True)
        check_bool("weights_only", weights_only)  # torch.load would take "no" as True
        check_path("ckpt_path", ckpt_path)
        self._run(
            "fit",
            model,
            lambda: self._fit(model, train_dataloaders, val_dataloaders, ckpt_path, weights_only),
            (model, train_dataloaders, val_dataloaders, ckpt_path, weights_only),
        )

    def validate(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool = True,
    ) -> list[dict[str, float]]:
        """Run ``validation_step`` over the validation data; one metric dict per loader.

        ``ckpt_path`` loads the weights first; ``weights_only=False`` allows checkpoints with
        arbitrary pickled objects: only for files you trust.
        """
        return self._evaluate("validate", model, dataloaders, ckpt_path, weights_only)

    def test(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool = True,
    ) -> list[dict[str, float]]:
        """Run ``test_step`` over the test data; one metric dict per loader (see `validate`)."""
        return self._evaluate("test", model, dataloaders, ckpt_path, weights_only)

    def predict(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool = True,
    ) -> list[Any]:
        """Run ``predict_step`` and return its outputs (a list per loader when several; see `validate`)."""
        return self._evaluate("predict", model, dataloaders, ckpt_path, weights_only)

    def save_checkpoint(self, filepath: str | os.PathLike[str]) -> None:
        """Write a checkpoint of the run. Call it on every rank; global rank 0 writes, atomically.

        Raises `NonFiniteLossError` instead when a training loss since the last check was not
        finite: the weights that follow it are never saved.

        While a run with several processes is failing (from ``on_exception``), the other ranks may
        be gone, so no collective runs: global rank 0 checks its own losses and writes its own
        state (the other ranks' ``rank_states`` are None); every other rank returns without writing.
        """
        if self.state.failing and self.world_size > 1:
            if self.is_global_zero:
                self._loss_check.check_before_save(self._strategy, agree=False)
                atomic_save(dump_checkpoint(self, gather=False), filepath)
            return
        self._loss_check.check_before_save(self._strategy)
        checkpoint = self._dump_checkpoint()
        if self.is_global_zero:
            atomic_save(checkpoint, filepath)
        self._strategy.barrier("save_checkpoint")

    # -- the run --------------------------------------------------------------------------------
    def _run(self, fn: str, model: TrainModule, body: Callable[[], Any], args: tuple[Any, ...] = ()) -> Any:
        self._eval_loop = None  # an earlier call's evaluation says nothing about this one
        if self._strategy.launcher is not None:
            # spawned workers inherit the loggers: one version for every call of this Trainer
            fix_log_versions(self, self.loggers, broadcast=False)
            return self._strategy.launcher.launch(self, fn, args)
        self._module = model
        model._trainer = self
        self.state = TrainerState(fn=fn, stage=fn)
        self.should_stop = False
        self._agreed_stop = False
        self._in_training_loop = False
        self._hooks = HookDispatcher(self, model, self.callbacks)
        try:
            self._strategy.setup_environment()
            if fn == "fit":
                if self.local_rank == 0:
                    model.prepare_data()
                self._strategy.barrier("prepare_data")
            self._hooks.call("setup", fn)
            result = body()
        except BaseException as exc:
            self.state.failing = True  # from here on nothing may wait in a collective (save_checkpoint)
            clearer = self._strategy.on_failure(exc, self._position())
            _record_for_elastic_agent(clearer or exc, self.global_rank)
            try:
                self._hooks.call_callbacks("on_exception", exc)
            finally:  # a callback that raises must not keep this rank in the group
                self._finish(fn, "failed")
            if clearer is not None:
                raise clearer from exc
            raise
        self._finish(fn, "success")
        return result

    def _position(self) -> str:
        """Where the run is, for error messages: the epoch, global step and the batch (training,
        or of the evaluation stage), or the batch being loaded when loading it failed."""
        where = f"epoch {self.current_epoch}, global step {self.global_step}"
        stage = self.state.stage
        if stage == "fit" and self._in_training_loop:
            loading = self.fit_loop.failed_fetch_idx
            if loading is not None:
                return f"{where}, loading batch index {loading}"
            return f"{where}, batch index {self.fit_loop.batch_idx}"
        if stage == "fit":
            return f"{where}, in fit outside the training loop"
        batch = self._eval_loop.position() if self._eval_loop is not None and self._eval_loop.stage == stage else ""
        return f"{where}, in {stage}{batch}"

    def _finish(self, fn: str, status: str) -> None:
        try:
            if self.is_global_zero:
                for lg in self.loggers:
                    lg.finalize(status)
            self._hooks.call("teardown", fn)
            if status == "success":  # no rank leaves the group while another still uses it
                self._strategy.barrier("teardown")
        finally:
            self.state.stage = None
            self._strategy.teardown()

    def _fit(self, model: TrainModule, train: Any, val: Any, ckpt_path: Any, weights_only: bool) -> None:
        loader = train if train is not None else model.train_dataloader()
        if loader is None:
            raise ValueError(
                "No training data: pass train_dataloaders to trainer.fit(...) or define "
                f"{type(model).__name__}.train_dataloader()."
            )
        if isinstance(loader, (list, tuple)):
            raise TypeError("fit(train_dataloaders=...) takes one DataLoader (or iterable), not a list.")
        check_loader("fit(train_dataloaders=...)", loader)
        self.train_dataloader = self._strategy.process_dataloader(loader, "fit")
        install_worker_seeding(self.train_dataloader, self.global_rank)
        self._train_length_known = has_length(self.train_dataloader)
        self._count_training_batches()
        val_source = val if val is not None else model.val_dataloader()
        val_loaders = as_loader_list(val_source, "fit(val_dataloaders=...)")
        self.val_dataloaders = [self._strategy.process_dataloader(dl, "validate") for dl in val_loaders]
        if self.pin_memory:  # CUDA: pinned host batches are what make non-blocking copies asynchronous
            for dl in (self.train_dataloader, *self.val_dataloaders):
                self._strategy.accelerator.pin_loader_memory(dl)
        self._prepare_module_for_speed(model)
        _check_trainable(model)

        self._strategy.setup_module(model)
        self.optimizers, self.lr_scheduler_configs = parse_optimizers(model.configure_optimizers())
        self._strategy.setup_optimizers(self.optimizers)
        self._optimizer_params = [optimizer_parameters(opt) for opt in self.optimizers]
        # Under fp16 the scaler skips steps with overflowed gradients itself: nothing to report.
        check = self.detect_non_finite_grads and self.precision != "16-mixed"
        self._grad_check_params = list(model.named_parameters()) if check else None
        self._current_epoch = 0
        self._global_step = 0
        self._loss_check.reset()
        self._validated_in_fit = False
        if ckpt_path is None and self._strategy.cluster_environment.restart_count > 0:
            ckpt_path = "last" if self._strategy.broadcast(find_last_checkpoint(self)) else None
        if ckpt_path is not None:
            self._restore(ckpt_path, weights_only)
        else:
            self._scale_lr_once()
        self._log_run_start(model)

        self._hooks.call("on_fit_start")
        if self.val_dataloaders and self.num_sanity_val_steps != 0 and self._val_enabled():
            self.state.stage = "sanity_check"
            self._hooks.call("on_sanity_check_start")
            self._run_evaluation_loop("sanity_check", self.val_dataloaders, self.limit_val_batches)
            self._hooks.call("on_sanity_check_end")
            self.state.stage = "fit"
        self._hooks.call("on_train_start")
        self.model.train()
        self._preemption.install()
        self._in_training_loop = True  # stays True when the loop raises: errors name the batch
        try:
            self.fit_loop.run()
        finally:
            self._preemption.uninstall()
        self._in_training_loop = False
        self._hooks.call("on_train_end")
        self._hooks.call("on_fit_end")

    def _save_and_exit_for_preemption(self, signum: int) -> None:
        path = preemption_checkpoint_path(self)
        self.save_checkpoint(path)
        preempted = Preempted(signum, path)
        if self.is_global_zero:
            announce_preemption(preempted)
        leave_note_for_launcher(preempted)
        raise preempted

    def _evaluate(
        self, stage: str, model: TrainModule | None, loaders: Any, ckpt_path: Any, weights_only: bool
    ) -> Any:
        if model is None:
            if self._module is None:
                raise ValueError(f"trainer.{stage}() needs a model: pass one, or call fit first.")
            model = self._module
        _check_module(model, training=False, stage=stage)
        check_path("ckpt_path", ckpt_path)
        check_bool("weights_only", weights_only)  # torch.load would take "no" as True
        hook_stage = {"validate": "val", "test": "test", "predict": "predict"}[stage]

        def body() -> Any:
            source = loaders if loaders is not None else getattr(model, f"{hook_stage}_dataloader")()
            given = as_loader_list(source, f"trainer.{stage}(dataloaders=...)")
            dataloaders = [self._strategy.process_dataloader(dl, stage) for dl in given]
            if not dataloaders:
                raise ValueError(
                    f"No {stage} data: pass dataloaders to trainer.{stage}(...) or define "
                    f"{type(model).__name__}.{hook_stage}_dataloader()."
                )
            self._prepare_module_for_speed(model)
            self._strategy.setup_module(model)
            if ckpt_path is not None:
                self._load_weights(ckpt_path, weights_only)
            limit = {"validate": self.limit_val_batches, "test": self.limit_test_batches}.get(
                stage, self.limit_predict_batches
            )
            if stage == "validate":  # `num_val_batches` (the progress bar's total) reads them
                self.val_dataloaders = dataloaders
            else:
                counts = [num_batches(dl, limit, stage) for dl in dataloaders]
                setattr(self, f"num_{stage}_batches", counts)
            return self._run_evaluation_loop(stage, dataloaders, limit)

        return self._run(stage, model, body, (model, loaders, ckpt_path, weights_only))

    def _run_evaluation_loop(self, stage: str, dataloaders: list[Any], limit: int | float | None) -> list[Any]:
        self._eval_loop = EvaluationLoop(self, stage)
        return self._eval_loop.run(dataloaders, limit)

    def _run_validation_in_fit(self) -> None:
        self.state.stage = "validate"
        self._run_evaluation_loop("validate", self.val_dataloaders, self.limit_val_batches)
        self._validated_in_fit = True
        self.state.stage = "fit"
        self.should_stop = self._strategy.reduce_boolean_decision(self.should_stop, all=False)
        self._agreed_stop = self.should_stop

    def _count_training_batches(self) -> None:
        """This epoch's batch count, agreed by every rank (one tiny all-gather per epoch)."""
        self.num_training_batches, self._agree_each_batch = self._strategy.agree_on_batch_count(
            num_batches(self.train_dataloader, self.limit_train_batches, "train")
        )
        if self.num_training_batches == 0:
            raise ValueError("limit_train_batches leaves no training batches: nothing to train.")

    def _val_enabled(self) -> bool:
        if not self.val_dataloaders or self.limit_val_batches in (0, 0.0):
            return False
        return any(n != 0 for n in self.num_val_batches)

    def _val_check_schedule(self) -> tuple[int | None, bool]:
        """(validate every n training batches, validate at the epoch's last batch) for this epoch."""
        if not self._val_enabled():
            return None, False
        interval = self.val_check_interval
        if isinstance(interval, int):
            n = self.num_training_batches
            if n is not None and interval > n:  # validation would never run
                raise ValueError(
                    f"val_check_interval={interval} is more than the {n} training batches of an epoch "
                    "(after limit_train_batches), so validation would never run. Use an int <= "
                    f"{n}, a float fraction of the epoch, or limit_val_batches=0 to turn validation off."
                )
            return interval, False
        every_epoch = self.check_val_every_n_epoch
        if every_epoch is not None and (self.current_epoch + 1) % every_epoch != 0:
            return None, False
        if interval == 1.0:
            return None, True
        n = self.num_training_batches
        if n is None:
            raise ValueError(
                f"val_check_interval={interval} is a fraction of the epoch, but the train loader has "
                "no length. Use an int (validate every n batches)."
            )
        return max(1, int(n * interval)), False

    # -- per-step helpers used by the loops ---------------------------------------------------------
    def _move_batch(self, batch: Any) -> Any:
        device = self._strategy.root_device
        if device.type == "cpu" and not self.channels_last:  # loader batches already live on the CPU
            return batch
        return self._strategy.accelerator.move_batch(batch, device, channels_last=self.channels_last)

    def _prepare_module_for_speed(self, model: TrainModule) -> None:
        """``channels_last`` then ``compile``, in place, before the strategy moves and wraps it."""
        if self.channels_last:
            from trainer.accelerators.memory_format import to_channels_last

            to_channels_last(model)
        if self.compile:
            from trainer.accelerators.compilation import compile_module, is_compiled

            if not is_compiled(model):  # a second fit keeps the first compile's caches
                compile_module(model)

    def _metrics_for_schedulers(self) -> SchedulerMetrics:
        return SchedulerMetrics(self.callback_metrics, not self._validated_in_fit and self._val_enabled())

    def _log_step_metrics(self) -> None:
        if self.loggers:
            self._log_metrics(self._train_metrics.step_values(self._strategy))

    def _log_epoch_metrics(self, store: MetricStore) -> None:
        values = store.epoch_values(self._strategy)
        self._callback_metrics.update(values)
        self._log_metrics(values)

    def _log_metrics(self, values: Mapping[str, torch.Tensor]) -> None:
        if not values or not self.loggers or not self.is_global_zero:
            return
        numbers = {k: float(v) for k, v in values.items()}
        numbers["epoch"] = float(self.current_epoch)  # every record: CSV rows group by it
        self._logged_metrics.update(numbers)
        for lg in self.loggers:
            lg.log_metrics(numbers, step=self.global_step)

    def _log_run_start(self, model: TrainModule) -> None:
        if not self.loggers or not self.is_global_zero:
            return
        summary = (
            f"world size {self.world_size} ({self.num_nodes} node(s)), micro batch "
            f"{self.micro_batch_size}, accumulation {self.accumulate_grad_batches}, global batch "
            f"{self.global_batch_size}, precision {self.precision}, strategy {self._strategy.name}"
        )
        for lg in self.loggers:
            if model.hparams:
                lg.log_hyperparams(dict(model.hparams))
            lg.log_text("run_summary", summary)

    def _scale_lr_once(self) -> None:
        factor = lr_scale_factor(self.scale_lr, self.world_size)
        scale_learning_rates(self.optimizers, self.lr_scheduler_configs, factor)
        self._lr_scaled = factor != 1.0
        if self._lr_scaled and self.is_global_zero:
            # the schedules' base rates (the peak of a warmup), not a warmup's current start rate
            lrs = [group.get("initial_lr", group["lr"]) for opt in self.optimizers for group in opt.param_groups]
            print(
                f"[lockstep] scale_lr={self.scale_lr!r}: learning rate x{factor:g} for "
                f"W={self.world_size} -> base rates {lrs}"
            )

    # -- checkpoints ------------------------------------------------------------------------------
    def _dump_checkpoint(self) -> dict[str, Any]:
        return dump_checkpoint(self)

    def _load_weights(self, ckpt_path: Any, weights_only: bool = True) -> dict[str, Any]:
        path = self._strategy.broadcast(resolve_checkpoint_path(self, ckpt_path))
        checkpoint = load_checkpoint(path, map_location="cpu", weights_only=weights_only)
        check_compatible(checkpoint, path, self.module, [], [])
        self.module.load_state_dict(checkpoint["state_dict"])
        return checkpoint

    def _restore(self, ckpt_path: Any, weights_only: bool = True) -> None:
        path = self._strategy.broadcast(resolve_checkpoint_path(self, ckpt_path))
        checkpoint = load_checkpoint(path, map_location="cpu", weights_only=weights_only)
        restore_checkpoint(self, checkpoint, path)


def _record_for_elastic_agent(exc: BaseException, rank: int) -> None:
    """Under torch's elastic agent, write the traceback where the agent reports it from."""
    if "TORCHELASTIC_ERROR_FILE" not in os.environ or not isinstance(exc, Exception):
        return
    import json
    import time
    import traceback

    # torch's ErrorHandler.record_exception writes the traceback of the exception being handled,
    # which for a RankFailedError is the broken collective's, not the error it reports: write
    # the same file (torch's documented format) with ``exc``'s own traceback and cause.
    from trainer.launch.failure_notes import is_consequence

    callstack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    info = {"py_callstack": callstack, "timestamp": str(int(time.time()))}
    # For the Trainer's launcher: a broken collective or an error about a peer is a consequence,
    # the rank's own error a cause.
    info["lockstep_consequence"] = is_consequence(exc, rank)
    data = {"message": {"message": f"{type(exc).__name__}: {exc}", "extraInfo": info}}
    try:
        with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
            json.dump(data, f)
    except Exception:  # the original exception matters more than its report
        pass


_FLAGS = (
    "sync_batchnorm",
    "enable_progress_bar",
    "enable_checkpointing",
    "use_distributed_sampler",
    "detect_non_finite_loss",
    "detect_non_finite_grads",
    "compile",
    "channels_last",
    "pin_memory",
)


def _check_arguments(args: Mapping[str, Any]) -> None:
    """The checks of `Trainer`'s own arguments (devices, strategy, accelerator and precision are
    checked where they are parsed)."""
    check_int("max_steps", args["max_steps"], minimum=-1)
    if args["max_epochs"] is not None:
        check_int("max_epochs", args["max_epochs"], minimum=-1)
    check_int("accumulate_grad_batches", args["accumulate_grad_batches"], minimum=1)
    check_int("log_every_n_steps", args["log_every_n_steps"], minimum=1)
    check_int("num_sanity_val_steps", args["num_sanity_val_steps"], minimum=-1)
    if args["check_val_every_n_epoch"] is not None:
        check_int("check_val_every_n_epoch", args["check_val_every_n_epoch"], minimum=1)
    _check_val_check_interval(args["val_check_interval"])
    for name in ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches"):
        check_limit(name, args[name])
    # a NaN clip value turns every gradient into NaN at the first step
    check_number("gradient_clip_val", args["gradient_clip_val"], minimum=0, allow_none=True)
    algorithm = args["gradient_clip_algorithm"]
    check_str("gradient_clip_algorithm", algorithm)
    if algorithm not in ("norm", "value"):
        raise ValueError(f"gradient_clip_algorithm must be 'norm' or 'value', got {algorithm!r}")
    lr_scale_factor(args["scale_lr"], 1)  # validates the flag
    for name in _FLAGS:
        check_bool(name, args[name])
    deterministic = args["deterministic"]
    if not isinstance(deterministic, (bool, str)):
        raise TypeError(f"deterministic must be True, False or 'warn', got {deterministic!r}")
    if deterministic not in (True, False, "warn"):
        raise ValueError(f"deterministic must be True, False or 'warn', got {deterministic!r}")
    check_path("default_root_dir", args["default_root_dir"])


def _check_val_check_interval(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"val_check_interval must be an int (batches) or a float fraction, got {value!r}")
    if isinstance(value, int) and value < 1:
        raise ValueError(f"val_check_interval as an int must be >= 1, got {value}")
    if isinstance(value, float) and not 0.0 < value <= 1.0:
        raise ValueError(f"val_check_interval as a fraction must be in (0.0, 1.0], got {value}")


def _check_module(model: Any, training: bool, stage: str = "fit") -> None:
    if not isinstance(model, TrainModule):
        raise TypeError(f"trainer.{stage}() needs a TrainModule subclass instance, got {type(model).__name__}.")
    required = ["training_step", "configure_optimizers"] if training else [
        {"validate": "validation_step", "test": "test_step", "predict": "predict_step"}[stage]
    ]
    for name in required:
        if name == "predict_step":
            continue  # it has a default (self(batch))
        if getattr(type(model), name) is getattr(TrainModule, name):
            raise NotImplementedError(
                f"{type(model).__name__} does not define {name}(), which trainer.{stage}() needs."
            )


def _check_trainable(model: TrainModule) -> None:
    """Before any step: a model with nothing to train fails later with a misleading message."""
    params = list(model.parameters())
    if not any(p.requires_grad for p in params):
        what = f"all {len(params)} of its parameters have requires_grad=False" if params else "it has none"
        raise ValueError(
            f"No parameter of {type(model).__name__} requires grad ({what}): there is nothing to train. "
            "Unfreeze the parameters to train (p.requires_grad_(True)) before trainer.fit."
        )


def _make_loggers(logger: Any, root: str) -> list[Logger]:
    if logger is True:
        from callbacks.tensorboard_logger import TensorBoardLogger

        return [TensorBoardLogger(save_dir=root)]
    if logger is False or logger is None:
        return []
    items = list(logger) if isinstance(logger, (list, tuple)) else [logger]
    for lg in items:
        if not isinstance(lg, Logger):
            raise TypeError(f"logger must be True/False, a Logger or a list of Loggers; got {type(lg).__name__}")
    return items


def _make_callbacks(
    callbacks: Any, loggers: list[Logger], progress_bar: bool, checkpointing: bool
) -> list[Callback]:
    given = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    for cb in given:
        if not isinstance(cb, Callback):
            raise TypeError(f"callbacks must be Callback instances; got {type(cb).__name__}")
    names = {type(cb).__name__ for cb in given}
    if loggers and "LearningRateMonitor" not in names:  # learning rates belong in every log
        from callbacks.lr_monitor import LearningRateMonitor

        given.append(LearningRateMonitor())
    if progress_bar and "ProgressBar" not in names:
        from callbacks.progress_bar import ProgressBar

        given.append(ProgressBar())
    if checkpointing and "ModelCheckpoint" not in names:
        from callbacks.model_checkpoint import ModelCheckpoint

        given.append(ModelCheckpoint())
    # Checkpoint callbacks run last so they save state every other callback already updated.
    ordinary = [cb for cb in given if type(cb).__name__ != "ModelCheckpoint"]
    checkpoints = [cb for cb in given if type(cb).__name__ == "ModelCheckpoint"]
    return [*loggers, *ordinary, *checkpoints]
