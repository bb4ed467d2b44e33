"""The training loop: epochs, micro batches, accumulation windows and optimizer steps.

The path of one step is flat: `FitLoop` → `Strategy.training_step` → `TrainModule.training_step`,
then backward (inside `Strategy.no_sync` for non-final micro batches of a window), and at the
window's end one synced optimizer step. The loop owns the run's position (`FitProgress`), the
epoch's batch count and validation schedule, and the pre-emption save.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from trainer.accelerators.compilation import prepare_for_speed
from trainer.checkpointing.connector import (
    find_last_checkpoint,
    gather_rank_states,
    preemption_checkpoint_path,
    read_checkpoint,
    restore_checkpoint,
    restore_datamodule,
)
from trainer.checks import check_trainable
from trainer.checkpointing.resume import capture_epoch_state, check_global_batch, resumed_epoch
from trainer.data.datamodule import data_source
from trainer.data.global_batch_sampler import global_batch_sampler
from trainer.data.loaders import as_loader_list, check_loader, has_length, iterate_with_lookahead, num_batches
from trainer.data.overfit import without_shuffling
from trainer.data.prefetcher import prefetch_to_device
from trainer.launch.preemption import Preempted, PreemptionWatch, announce_preemption, leave_note_for_launcher
from trainer.loops.accumulation import AccumulationWindows
from trainer.loops.anomaly import NonFiniteLossCheck, check_finite_gradients
from trainer.loops.evaluation_loop import EvaluationLoop
from trainer.loops.loss_normalization import ItemMeanNormalizer
from trainer.loops.manual import ManualOptimization, check_manual_arguments
from trainer.distributed.rank_zero import rank_zero_info
from trainer.hyperparameters import merged_hparams
from trainer.loops.optimization import (
    SchedulerMetrics,
    clip_gradients,
    parse_optimizers,
    lr_scale_factor,
    optimizer_parameters,
    scale_learning_rates,
    step_schedulers,
)
from trainer.loops.progress import FitProgress
from trainer.model_setup import configure_model
from trainer.seed import install_worker_seeding, isolated_rng
from trainer.stage import Stage

if TYPE_CHECKING:
    from trainer.module import TrainModule
    from trainer.trainer import Trainer


class FitLoop:
    """Runs epochs until ``max_epochs``, ``max_steps`` or an agreed ``should_stop``."""

    def __init__(self, trainer: Trainer, detect_non_finite_loss: bool = True) -> None:
        self.trainer = trainer
        self.progress = FitProgress()
        self.loss_check = NonFiniteLossCheck(detect_non_finite_loss)
        self.num_training_batches: int | None = None  # this epoch's, agreed by every rank
        self.failed_fetch_idx: int | None = None  # the batch whose loading raised (errors name it)
        self.in_training = False  # inside `run`'s epochs (errors name the batch)
        self.epoch_state: dict[str, Any] | None = None  # RNG states that decide this epoch's order
        self.rank_states_at_end: list[dict[str, Any] | None] | None = None  # every rank's, after a DDP fit
        self.lr_scaled = False  # the optimizers' rates were scaled for W (checkpointed: never twice)
        self._resume_from: dict[str, Any] | None = None  # the rest of an interrupted epoch
        self._normalizer = ItemMeanNormalizer()
        self._preemption = PreemptionWatch()
        self._optimizer_params: list[list[torch.Tensor]] = []
        self._grad_check_params: list[tuple[str, torch.Tensor]] | None = None
        self._agree_each_batch = False  # some rank's loader has no length: agree on the last batch
        self._train_length_known = True
        self._agreed_stop = False  # `should_stop` as every rank agreed at the last agreement point
        self._validated = False  # a plateau scheduler's missing monitor may still come from validation
        self._move_batches = False
        self._convert_batches = False
        self.prefetching = False  # this epoch copies batches to the device on a side stream
        self.manual: ManualOptimization | None = None  # the module steps its optimizers itself
        self._data_sources: tuple[Any, Any] = (None, None)  # fit's loader arguments (None: the hooks)
        self._loaded_epoch = 0  # the epoch whose start last (re)loaded the data

    # -- the run's position (read by the Trainer's properties) ---------------------------------
    @property
    def batch_idx(self) -> int:
        """Index of the batch being trained."""
        return self.progress.batch_idx

    @property
    def batches_done(self) -> int:
        """Batches of the current epoch fully trained (the position a checkpoint records)."""
        return self.progress.batches_done

    @property
    def epoch_finished(self) -> bool:
        """Whether the current epoch has no batch left."""
        return self.progress.epoch_finished

    @property
    def done(self) -> bool:
        """Whether training is finished."""
        t, p = self.trainer, self.progress
        if t.max_steps != -1 and p.global_step >= t.max_steps:
            return True
        if t.max_epochs is not None and t.max_epochs != -1 and p.current_epoch >= t.max_epochs:
            return True
        return t.should_stop

    # -- set-up, called by `Trainer.fit` -------------------------------------------------------
    def fit(self, model: TrainModule, train: Any, val: Any, ckpt_path: Any, weights_only: bool) -> None:
        """`Trainer.fit`'s work: data, module and optimizers set up, a checkpoint restored, training."""
        t, strategy = self.trainer, self.trainer.strategy
        self._reset()
        configure_model(t, model)  # right after `setup`, as in Lightning
        if ckpt_path is None and strategy.cluster_environment.restart_count > 0:
            ckpt_path = "last" if strategy.broadcast(find_last_checkpoint(t)) else None
        path, checkpoint = "", None
        if ckpt_path is not None:
            path, checkpoint = read_checkpoint(t, ckpt_path, weights_only)
            restore_datamodule(t, checkpoint)  # before its loaders are asked for, as in Lightning
        self.setup_data(model, train, val)
        prepare_for_speed(model, t.channels_last, t.compile)
        check_trainable(model)
        strategy.setup_module(model)
        t.optimizers, t.lr_scheduler_configs = parse_optimizers(model.configure_optimizers())
        strategy.setup_optimizers(t.optimizers)
        self._optimizer_params = [optimizer_parameters(opt) for opt in t.optimizers]
        # Under fp16 the scaler skips steps with overflowed gradients itself: nothing to report.
        check_grads = t.detect_non_finite_grads and t.precision != "16-mixed"
        self._grad_check_params = list(model.named_parameters()) if check_grads else None
        self.manual = None if model.automatic_optimization else ManualOptimization(self, self._grad_check_params)
        if checkpoint is not None:
            restore_checkpoint(t, checkpoint, path)
        else:
            self.scale_learning_rates()
        summary = (
            f"world size {t.world_size} ({t.num_nodes} node(s)), micro batch {t.micro_batch_size}, "
            f"accumulation {t.accumulate_grad_batches}, global batch {t.global_batch_size}, "
            f"precision {t.precision}, strategy {strategy.name}"
        )
        hparams = merged_hparams(model.hparams, t.datamodule.hparams if t.datamodule is not None else None)
        t.metric_logger.log_run_start(hparams, summary, strategy)
        self.run()

    def setup_data(self, model: TrainModule, train: Any, val: Any) -> None:
        """The fit's loaders (given, or the DataModule's or module's hooks), sharded, seeded, pinned and counted."""
        t, strategy = self.trainer, self.trainer.strategy
        self._data_sources, self._loaded_epoch = (train, val), self.progress.current_epoch
        source = data_source(t, model)
        loader = train if train is not None else source.train_dataloader()
        if loader is None:
            raise ValueError(
                "No training data: pass train_dataloaders or a datamodule to trainer.fit(...) or define "
                f"{type(source).__name__}.train_dataloader()."
            )
        if isinstance(loader, (list, tuple)):
            raise TypeError("fit(train_dataloaders=...) takes one DataLoader (or iterable), not a list.")
        check_loader("fit(train_dataloaders=...)", loader)
        if t.overfit_batches:
            loader = without_shuffling(loader)
        t.train_dataloader = strategy.process_dataloader(loader, "fit")
        sampler = global_batch_sampler(t.train_dataloader)
        if sampler is not None:
            sampler.set_accumulation(t.accumulate_grad_batches)
        install_worker_seeding(t.train_dataloader, t.global_rank)
        self.count_training_batches()
        val_loaders = as_loader_list(val if val is not None else source.val_dataloader(), "fit(val_dataloaders=...)")
        if t.overfit_batches:
            val_loaders = [without_shuffling(dl) for dl in val_loaders]
        t.val_dataloaders = [strategy.process_dataloader(dl, "validate") for dl in val_loaders]
        if t.pin_memory:  # CUDA: pinned host batches are what make non-blocking copies asynchronous
            for dl in (t.train_dataloader, *t.val_dataloaders):
                strategy.accelerator.pin_loader_memory(dl)

    def scale_learning_rates(self) -> None:
        """``scale_lr``: multiply the fresh optimizers' rates for W, once per fit (never on resume)."""
        t = self.trainer
        factor = lr_scale_factor(t.scale_lr, t.world_size)
        scale_learning_rates(t.optimizers, t.lr_scheduler_configs, factor)
        self.lr_scaled = factor != 1.0
        if self.lr_scaled:
            # the schedules' base rates (the peak of a warmup), not a warmup's current start rate
            lrs = [group.get("initial_lr", group["lr"]) for opt in t.optimizers for group in opt.param_groups]
            rank_zero_info(
                f"[lockstep] scale_lr={t.scale_lr!r}: learning rate x{factor:g} for W={t.world_size} "
                f"-> base rates {lrs}"
            )

    def _reset(self) -> None:
        """A new fit: position zero, no losses seen, nothing agreed or scaled yet."""
        self.progress = FitProgress()
        self.loss_check.reset()
        self.lr_scaled = False
        self.in_training = False
        self.failed_fetch_idx = None
        self._validated = False
        self._agreed_stop = False
        self._resume_from = None

    def resume_mid_epoch(
        self,
        batches_done: int,
        epoch_state: dict[str, Any] | None,
        rng: dict[str, Any] | None,
        samples_done: int | None = None,
        global_batch_size: int | None = None,
    ) -> None:
        """The next epoch continues an interrupted one in its order: after ``samples_done``
        samples when the checkpoint recorded them (any world size), else after ``batches_done``
        batches. ``epoch_state=None``: the checkpoint is at an epoch boundary, the next epoch
        starts afresh; ``global_batch_size`` (the checkpoint's G) is checked against this run's."""
        self._resume_from = {
            "batches_done": batches_done, "epoch_state": epoch_state, "rng": rng,
            "samples_done": samples_done, "global_batch_size": global_batch_size,
        }

    def count_training_batches(self) -> None:
        """This epoch's batch count, agreed by every rank (one tiny all-gather per epoch)."""
        t = self.trainer
        self._train_length_known = has_length(t.train_dataloader)
        self.num_training_batches, self._agree_each_batch = t.strategy.agree_on_batch_count(
            num_batches(t.train_dataloader, t.limit_train_batches, "train")
        )
        if self.num_training_batches == 0:
            raise ValueError("limit_train_batches leaves no training batches: nothing to train.")

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        """The training part of fit: sanity check, epochs until done, and their hooks."""
        t = self.trainer
        hooks = t.hooks
        hooks.call("on_fit_start")
        if t.val_dataloaders and t.num_sanity_val_steps != 0 and self.validation_enabled():
            t.state.stage = Stage.SANITY_CHECK
            hooks.call("on_sanity_check_start")
            with isolated_rng():  # training draws the same random numbers with or without it
                EvaluationLoop(t, Stage.SANITY_CHECK).run(t.val_dataloaders)
            hooks.call("on_sanity_check_end")
            t.state.stage = Stage.FIT
        hooks.call("on_train_start")
        t.model.train()
        self.rank_states_at_end = None
        self._preemption.install()
        self.in_training = True  # stays True when the loop raises: errors name the batch
        try:
            while not self.done:
                with t.profiler.profile("run_training_epoch"):
                    self.run_epoch()
        except BaseException:
            self._preemption.uninstall(failing=True)  # its pending agreement must not hide this error
            raise
        self._preemption.uninstall()
        self.in_training = False
        if t.world_size > 1:
            # a save_checkpoint after fit runs when the process group is gone: keep every rank's
            # state as the loop leaves it, so that checkpoint resumes every rank exactly
            self.rank_states_at_end = gather_rank_states(t)
        hooks.call("on_train_end")
        hooks.call("on_fit_end")

    def run_epoch(self) -> None:
        """One training epoch, its validation runs, and the epoch-end hooks."""
        t, progress = self.trainer, self.progress
        every = t.reload_dataloaders_every_n_epochs
        if every and progress.current_epoch - self._loaded_epoch >= every:  # the loader hooks again
            self.setup_data(t.module, *self._data_sources)
        hooks, loader, strategy = t.hooks, t.train_dataloader, t.strategy
        strategy.on_epoch_start(loader, progress.current_epoch)
        t.metric_logger.start_training_epoch()
        hooks.call("on_train_epoch_start")
        # After the hook: a GradientAccumulationScheduler may have changed A for this epoch.
        sampler = global_batch_sampler(loader)
        if sampler is not None:
            sampler.set_accumulation(t.accumulate_grad_batches)
        resume, self._resume_from = self._resume_from, None
        by_samples = resume is not None and sampler is not None and resume["samples_done"] is not None
        if by_samples:
            check_global_batch(resume["global_batch_size"], sampler, t.allow_global_batch_change)  # type: ignore[arg-type]
            if resume["epoch_state"] is not None:
                sampler.start_at(resume["samples_done"])  # type: ignore[union-attr]
        self.count_training_batches()  # a sampler's length may change between epochs
        if self.manual is not None:
            check_manual_arguments(t)
        layout = sampler.layout() if sampler is not None else None
        windows = AccumulationWindows(
            t.accumulate_grad_batches, self.num_training_batches if self._train_length_known else None, layout
        )
        val_every, val_at_end = self._validation_schedule()
        if resume is None or resume["epoch_state"] is None:
            self.epoch_state = capture_epoch_state(loader)
            source, start = loader, 0
        elif by_samples:  # the sampler itself starts after the trained samples
            self.epoch_state = resume["epoch_state"]
            start = layout.first_batch  # type: ignore[union-attr]
            source = resumed_epoch(loader, 0, resume["epoch_state"], resume["rng"])
        else:
            self.epoch_state = resume["epoch_state"]
            start = resume["batches_done"]
            source = resumed_epoch(loader, start, resume["epoch_state"], resume["rng"])
        if layout is not None:
            progress.start_epoch(start, layout.offset, layout.global_batch_size)
        else:
            progress.start_epoch(start)
        self.failed_fetch_idx = None
        # CUDA: copy the next batch on a side stream while this one computes (trainer/data/prefetcher.py)
        remaining = None if self.num_training_batches is None else self.num_training_batches - start
        prefetcher = prefetch_to_device(source, strategy.root_device, remaining, t.channels_last)
        self.prefetching = prefetcher is not None
        source = prefetcher if prefetcher is not None else source
        # decided once per epoch: CPU batches already are where they train (unless channels_last)
        self._move_batches = prefetcher is None and (strategy.root_device.type != "cpu" or t.channels_last)
        self._convert_batches = t.precision_plugin.module_dtype is not None
        seen = 0
        rank = t.global_rank if t.world_size > 1 else None  # one process: a short loader just ends the epoch
        for batch_idx, batch, is_last in iterate_with_lookahead(
            source, self.num_training_batches, start, rank, progress.current_epoch, self._fetch_failed
        ):
            if self._agree_each_batch:  # some rank's loader has no length: stop when the first rank runs out
                is_last = strategy.reduce_boolean_decision(is_last, all=False)
            progress.batch_idx = batch_idx
            window_end = windows.is_window_end(batch_idx, is_last)
            with t.profiler.profile("run_training_batch"):
                self._train_batch(batch, batch_idx, is_last, window_end, windows)
            seen += 1
            if (val_every and (batch_idx + 1) % val_every == 0) or (is_last and val_at_end):
                self._validate()
            # Mid-epoch, only a stop every rank agreed on (after validation) may end the epoch:
            # a rank that stops alone leaves the others waiting in the next all-reduce.
            stop = t.should_stop if t.world_size == 1 else self._agreed_stop
            if is_last or (window_end and (stop or (t.max_steps != -1 and progress.global_step >= t.max_steps))):
                break
        if seen == 0:
            raise ValueError(
                "The train dataloader produced no batches this epoch. Check the dataset, the "
                "sampler and drop_last."
            )
        stopped = t.should_stop if t.world_size == 1 else self._agreed_stop
        if not progress.epoch_finished and not stopped:
            # max_steps ended the run inside the epoch: the epoch is not over (no epoch-end hooks,
            # same epoch and position), so a checkpoint written now resumes at the next batch.
            self.loss_check.check()
            return
        progress.epoch_finished = True  # also when should_stop ended it early
        self._epoch_end()

    def position(self) -> str:
        """The batch being trained (or loaded, when loading it failed), for error messages."""
        if not self.in_training:
            return ", in fit outside the training loop"
        if self.failed_fetch_idx is not None:
            return f", loading batch index {self.failed_fetch_idx}"
        return f", batch index {self.progress.batch_idx}"

    def _fetch_failed(self, batch_idx: int) -> None:
        # The loop fetches one batch ahead: the batch that failed to load is not the one last trained.
        self.failed_fetch_idx = batch_idx

    def _train_batch(
        self, batch: Any, batch_idx: int, is_last: bool, window_end: bool, windows: AccumulationWindows
    ) -> None:
        t, progress = self.trainer, self.progress
        hooks, strategy = t.hooks, t.strategy
        if self._move_batches:  # not when the prefetcher already moved it
            batch = strategy.accelerator.move_batch(batch, strategy.root_device, channels_last=t.channels_last)
        if self._convert_batches:  # "bf16-true": the module computes in bf16
            batch = t.precision_plugin.convert_input(batch)
        metrics = t.metric_logger.train
        metrics.set_batch(batch)
        metrics.in_step = True
        hooks.call("on_train_batch_start", batch, batch_idx)
        if self.manual is not None:  # accumulate_grad_batches is 1: every batch ends a window
            output = self.manual.training_step(batch, batch_idx)
            self.manual.batch_done()
        else:
            output = self._automatic_step(batch, batch_idx, window_end, windows)
        progress.batch_trained(batch_idx, is_last)  # the position a checkpoint written from here on records
        if window_end:
            progress.window_stepped(windows.samples_through(batch_idx))
            signum = self._preemption.agreed(t.world_size, strategy.control_group)
            if signum:
                self._save_and_exit_for_preemption(signum)
        hooks.call("on_train_batch_end", output, batch, batch_idx)
        metrics.in_step = False

    def _automatic_step(self, batch: Any, batch_idx: int, window_end: bool, windows: AccumulationWindows) -> Any:
        t, progress = self.trainer, self.progress
        hooks, strategy, precision, module = t.hooks, t.strategy, t.precision_plugin, t.module
        with strategy.no_sync(window_end):
            with precision.autocast():
                output = strategy.training_step(module, batch, batch_idx)
            loss = _loss_of(output, batch_idx)
            shown = loss.detach()
            self.loss_check.record(shown, progress.current_epoch, progress.global_step, batch_idx)
            padding = windows.is_padding(batch_idx)
            items = self._normalizer.observe(output, loss, batch_idx, counts=not padding)
            if padding:  # only joins the window's collectives: no gradient, no items
                scaled = loss * 0.0
            elif items is not None:
                scaled = loss  # a sum: normalised by the global item count at the step
                shown = shown / items.clamp_min(1.0)  # shown as this batch's mean
            else:
                divisor = windows.loss_divisor(batch_idx)
                scaled = loss / divisor if divisor != 1 else loss
            t.metric_logger.last_loss = shown
            hooks.call("on_before_backward", scaled)
            precision.backward(scaled)
        hooks.call("on_after_backward")
        if window_end:
            self._optimizer_step(windows.grad_correction(batch_idx))
        return output

    def _optimizer_step(self, grad_correction: float) -> None:
        t, progress = self.trainer, self.progress
        hooks, precision = t.hooks, t.precision_plugin
        t.strategy.after_backward_window()
        if self._normalizer.active:
            grad_correction = 1.0  # summed losses were never divided by the window size
        self._normalizer.finish_window(t.strategy, self._optimizer_params)
        for optimizer, params in zip(t.optimizers, self._optimizer_params):
            if grad_correction != 1.0:
                grads = [p.grad for p in params if p.grad is not None]
                torch._foreach_mul_(grads, grad_correction)
            precision.unscale(optimizer)
            if self._grad_check_params is not None:
                check_finite_gradients(
                    self._grad_check_params, progress.current_epoch, progress.global_step, progress.batch_idx, t.global_rank
                )
            hooks.call("on_before_optimizer_step", optimizer)
            if t.gradient_clip_val:  # None or 0: no clipping (as in Lightning)
                clip_gradients(params, t.gradient_clip_val, t.gradient_clip_algorithm)
            precision.optimizer_step(optimizer)
        precision.update()
        for optimizer in t.optimizers:
            hooks.call("on_before_zero_grad", optimizer)
            optimizer.zero_grad(set_to_none=True)
        progress.global_step += 1
        if t.lr_scheduler_configs:
            step_schedulers(t.lr_scheduler_configs, "step", progress.global_step, self._scheduler_metrics)
        if progress.global_step % t.log_every_n_steps == 0:
            self.loss_check.check()
            t.metric_logger.publish_step(t.strategy, progress.global_step, progress.current_epoch)

    def _epoch_end(self) -> None:
        t, progress = self.trainer, self.progress
        self.loss_check.check()
        # Lightning's order: every hook sees the epoch aggregates; metric monitors run last so
        # they see what the module logs in its hook (docs/callbacks.md).
        t.metric_logger.preview_epoch(t.metric_logger.train, t.strategy)
        t.hooks.call_callbacks("on_train_epoch_end", monitoring=False)
        t.hooks.call_module("on_train_epoch_end")
        t.metric_logger.publish_epoch(t.metric_logger.train, t.strategy, progress.global_step, progress.current_epoch)
        t.hooks.call_callbacks("on_train_epoch_end", monitoring=True)
        if t.lr_scheduler_configs and self.manual is None:  # manual optimization steps its own
            step_schedulers(t.lr_scheduler_configs, "epoch", progress.current_epoch + 1, self._scheduler_metrics)
        progress.finish_epoch()
        self.agree_on_stop()

    def agree_on_stop(self) -> None:
        """Collective (every rank calls it): every rank stops when any rank set ``should_stop``."""
        t = self.trainer
        t.should_stop = t.strategy.reduce_boolean_decision(t.should_stop, all=False)
        self._agreed_stop = t.should_stop

    # -- validation inside fit -------------------------------------------------------------------
    def validation_enabled(self) -> bool:
        """Whether fit has validation batches to run."""
        t = self.trainer
        if not t.val_dataloaders or t.limit_val_batches in (0, 0.0):
            return False
        return any(n != 0 for n in t.num_val_batches)

    def _validation_schedule(self) -> tuple[int | None, bool]:
        """(validate every n training batches, validate at the epoch's last batch) for this epoch."""
        if not self.validation_enabled():
            return None, False
        t, n = self.trainer, self.num_training_batches
        interval = t.val_check_interval
        if isinstance(interval, int):
            if n is not None and interval > n:  # validation would never run
                raise ValueError(
                    f"val_check_interval={interval} is more than the {n} training batches of an epoch "
                    "(after limit_train_batches), so validation would never run. Use an int <= "
                    f"{n}, a float fraction of the epoch, or limit_val_batches=0 to turn validation off."
                )
            return interval, False
        every_epoch = t.check_val_every_n_epoch
        if every_epoch is not None and (self.progress.current_epoch + 1) % every_epoch != 0:
            return None, False
        if interval == 1.0:
            return None, True
        if n is None:
            raise ValueError(
                f"val_check_interval={interval} is a fraction of the epoch, but the train loader has "
                "no length. Use an int (validate every n batches)."
            )
        return max(1, int(n * interval)), False

    def _validate(self) -> None:
        t = self.trainer
        t.state.stage = Stage.VALIDATE
        EvaluationLoop(t, Stage.VALIDATE).run(t.val_dataloaders)
        self._validated = True
        t.state.stage = Stage.FIT
        t.metric_logger.end_evaluation()
        self.agree_on_stop()

    def _scheduler_metrics(self) -> SchedulerMetrics:
        t = self.trainer
        return SchedulerMetrics(t.callback_metrics, not self._validated and self.validation_enabled())

    # -- pre-emption -----------------------------------------------------------------------------
    def _save_and_exit_for_preemption(self, signum: int) -> None:
        t = self.trainer
        path = preemption_checkpoint_path(t)
        t.save_checkpoint(path)
        preempted = Preempted(signum, path)
        if t.is_global_zero:
            announce_preemption(preempted)
        leave_note_for_launcher(preempted)
        raise preempted


def _loss_of(output: Any, batch_idx: int) -> torch.Tensor:
    """The loss inside ``training_step``'s return value, checked for shape and autograd."""
    loss = output.get("loss") if isinstance(output, Mapping) else output
    if not isinstance(loss, torch.Tensor):
        raise TypeError(
            f"training_step must return a loss tensor or a dict with key 'loss'; at batch index "
            f"{batch_idx} it returned {_describe(output)}."
        )
    if loss.numel() != 1:
        raise ValueError(
            f"training_step must return a scalar loss; at batch index {batch_idx} it has shape "
            f"{tuple(loss.shape)}. Reduce it (e.g. loss.mean()) before returning."
        )
    if not loss.requires_grad:
        raise ValueError(
            f"The loss returned by training_step at batch index {batch_idx} does not require grad: "
            "it is detached from the model's parameters (was it computed under torch.no_grad(), "
            "or with .item()/.detach()?)."
        )
    return loss


def _describe(output: Any) -> str:
    if isinstance(output, Mapping) and "loss" in output:
        return f"a dict whose 'loss' is a {type(output['loss']).__name__}, not a tensor"
    if isinstance(output, Mapping):
        return f"a dict without 'loss' (keys {sorted(map(str, output))})"
    return f"an object of type {type(output).__name__}"
