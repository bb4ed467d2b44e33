"""The training loop: epochs, micro batches, accumulation windows and optimizer steps.

The path of one step is flat: `FitLoop` → `Strategy.training_step` → `TrainModule.training_step`,
then backward (inside `Strategy.no_sync` for non-final micro batches of a window), and at the
window's end one synced optimizer step. The loop owns the run's position (`FitProgress`), the
epoch's batch count and validation schedule, and the pre-emption save.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from trainer.accelerators.compilation import prepare_for_speed
from trainer.checkpointing.checkpoint_paths import preemption_checkpoint_path, read_checkpoint, restart_checkpoint
from trainer.contracts.accumulation import GlobalBatchError, accumulation_for, global_batch_size
from trainer.checkpointing.connector import refuse_weights_only, restore_checkpoint, restore_datamodule
from trainer.checkpointing.resume import (
    ResumePlan,
    capture_epoch_state,
    check_dataset_size,
    check_global_batch,
    check_shuffle,
    gather_rank_states,
    plan_resume,
    restore_boundary_states,
    resumed_epoch,
)
from trainer.data.batch_transfer import BatchTransfer
from trainer.data.datamodule import data_source
from trainer.data.global_batch_sampler import EpochLayout, GlobalBatchSampler, global_batch_sampler
from trainer.data.loaders import (
    as_loader_list,
    check_loader,
    dataset_size,
    has_length,
    iterate_with_lookahead,
    num_batches,
)
from trainer.data.overfit import without_shuffling
from trainer.data.prefetcher import prefetch_to_device
from trainer.launch.preemption import Preempted, PreemptionWatch, announce_preemption, leave_note_for_launcher
from trainer.loops.accumulation import AccumulationWindows
from trainer.loops.anomaly import NonFiniteLossCheck
from trainer.loops.automatic import optimization_for
from trainer.loops.evaluation_loop import EvaluationLoop
from trainer.distributed.rank_zero import rank_zero_info, rank_zero_warn
from trainer.hyperparameters import hparams_for_loggers
from trainer.lightning.loop_views import lightning_fit_loop_attribute
from trainer.loops.optimization import SchedulerMetrics, lr_scale_factor, parse_optimizers, scale_learning_rates
from trainer.contracts.progress import FitProgress
from trainer.model_setup import check_trainable, configure_model
from trainer.module import TrainModule
from trainer.rng import capture_rng_state, isolated_rng, restore_rng_state
from trainer.data.iterator_draws import draw_ahead, iterate_from
from trainer.seed import install_worker_seeding
from trainer.stage import Stage
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.loops.optimization import Optimization
    from trainer.contracts.protocols import TrainerInternals as Trainer


class FitLoop:
    """Runs epochs until ``max_epochs``, ``max_steps`` or an agreed ``should_stop``."""

    def __init__(self, trainer: Trainer, detect_non_finite_loss: bool = True) -> None:
        self.trainer = trainer
        self.loss_check = NonFiniteLossCheck(detect_non_finite_loss)
        self.num_training_batches: int | None = None  # this epoch's, agreed by every rank
        self.epoch_state: dict[str, Any] | None = None  # RNG states that decide this epoch's order
        self.rank_states_at_end: list[dict[str, Any] | None] | None = None  # every rank's, after a DDP fit
        self._preemption = PreemptionWatch()
        self.is_last_batch = False
        self._grad_check_params: list[tuple[str, torch.Tensor]] | None = None
        self._agree_each_batch = False  # some rank's loader has no length: agree on the last batch
        self._train_length_known = True
        self._move_batches = False
        self.transfer: BatchTransfer = None  # type: ignore[assignment]  # set by `fit`
        self._convert_batches = False
        self.prefetching = False  # this epoch copies batches to the device on a side stream
        # automatic (the loop steps) or manual (the module steps): `Optimization`, set by `fit`
        self.optimization: Optimization = None  # type: ignore[assignment]
        self._data_sources: tuple[Any, Any] = (None, None)  # fit's loader arguments (None: the hooks)
        self._loaded_epoch = 0  # the epoch whose start last (re)loaded the data
        # fixed for a fit, read by every batch: taken once in `run` (not through the Trainer per step)
        self._world_size = 1
        self._max_steps = -1
        self._on_train_batch_start: list[Any] = []
        self._on_train_batch_end: list[Any] = []
        self._reset()

    # -- the run's position (read by the Trainer's properties) ---------------------------------
    @property
    def batches_done(self) -> int:
        """Batches of the current epoch fully trained (the position a checkpoint records)."""
        return self.progress.batches_done

    @property
    def epoch_finished(self) -> bool:
        """Whether the current epoch has no batch left."""
        return self.progress.epoch_finished

    @property
    def given_loaders(self) -> tuple[Any, Any]:
        """fit's train and validation loader arguments (None: the hooks make them)."""
        return self._data_sources

    def __getattr__(self, name: str) -> Any:
        # only for names the class lacks: Lightning's loop names (``fit_loop.epoch_loop``, ...), answered
        # by views in the Lightning layer (`trainer.lightning.loop_views`), not by Lightning's structure
        return lightning_fit_loop_attribute(self, name)

    def logged_steps(self) -> int:
        """The loggers' step scale, Lightning's ``_batches_that_stepped`` once the current batch
        ends: optimizer steps, or under manual optimization batches (Lightning counts each one).

        A record made while a batch is still running, after its step, is logged at one less
        (a training step's values, a validation after a window's step, an epoch's aggregates),
        as Lightning counts the batch only when it ends.
        """
        manual = self.optimization is not None and self.optimization.manual
        return self.progress.batches_total if manual else self.progress.global_step

    def _done(self) -> bool:
        """Whether training is finished (between epochs; Lightning's ``fit_loop.done`` is the view's)."""
        t, p = self.trainer, self.progress
        if t.max_steps != -1 and p.global_step >= t.max_steps:
            return True
        if t.max_epochs is not None and t.max_epochs != -1 and p.current_epoch >= t.max_epochs:
            return True
        return t.should_stop and self.can_stop_early()

    def _limit_reached(self) -> str:
        """The limit a previous fit of this Trainer reached ("" if none: a new Trainer, or stopped early)."""
        t, p = self.trainer, self.progress
        if t.max_steps != -1 and p.global_step >= t.max_steps > 0:
            return f"max_steps={t.max_steps}"
        if t.max_epochs not in (None, -1) and p.current_epoch >= t.max_epochs > 0:
            return f"max_epochs={t.max_epochs}"
        return ""

    def can_stop_early(self) -> bool:
        """Whether ``min_epochs`` and ``min_steps`` are reached: before, ``should_stop`` waits (as in Lightning)."""
        t, p = self.trainer, self.progress
        return (not t.min_epochs or p.current_epoch >= t.min_epochs) and (not t.min_steps or p.global_step >= t.min_steps)

    # -- set-up, called by `Trainer.fit` -------------------------------------------------------
    def fit(self, model: TrainModule, train: Any, val: Any, ckpt_path: Any, weights_only: bool) -> None:
        """`Trainer.fit`'s work: data, module and optimizers set up, a checkpoint restored, training."""
        t, strategy = self.trainer, self.trainer.strategy
        reached = self._limit_reached()
        if reached and ckpt_path is None:  # as Lightning: a finished Trainer does not train again
            rank_zero_info(
                f"[lockstep] fit stopped at once: this Trainer's last fit reached {reached}. Use a new "
                "Trainer, or one with a larger limit and ckpt_path, to train on."
            )
            return
        self._reset()
        configure_model(t, model)  # right after `setup`, as in Lightning
        restarted = ckpt_path is None and strategy.is_restart()
        if restarted:
            ckpt_path = restart_checkpoint(t)
        path, checkpoint = "", None
        if ckpt_path is not None:
            path, checkpoint = read_checkpoint(t, ckpt_path, weights_only)
            refuse_weights_only(checkpoint, path)
            restore_datamodule(t, checkpoint)  # before its loaders are asked for, as in Lightning
        self.setup_data(model, train, val)
        prepare_for_speed(model, t.channels_last, t.compile)
        check_trainable(model)
        strategy.setup_module(model)
        self.transfer = BatchTransfer(t, model)
        t.optimizers, t.lr_scheduler_configs = parse_optimizers(model.configure_optimizers())
        strategy.setup_optimizers(t.optimizers)
        # Under fp16 the scaler skips steps with overflowed gradients itself: nothing to report.
        check_grads = t.detect_non_finite_grads and t.precision != "16-mixed"
        self._grad_check_params = list(model.named_parameters()) if check_grads else None
        self.optimization = optimization_for(self, self._grad_check_params)
        finished = ""
        if checkpoint is not None:
            finished = self._restore(checkpoint, path, restarted)
        else:
            self.scale_learning_rates()
        if finished:
            # nothing logged or saved, no checkpoint directory claimed (so no fit hooks): the next
            # `ckpt_path="last"` finds the same checkpoint, and no version_N is left behind
            return
        summary = (
            f"world size {t.world_size} ({t.num_nodes} node(s)), micro batch {t.micro_batch_size}, "
            f"accumulation {t.accumulate_grad_batches}, global batch {t.global_batch_size}, "
            f"precision {t.precision}, strategy {strategy.name}"
        )
        hparams = hparams_for_loggers(model, t.datamodule)
        t.metric_logger.log_run_start(hparams if t.enable_autolog_hparams else {}, summary, strategy, model)
        with torch.autograd.set_detect_anomaly(t.config.debug.detect_anomaly):
            self.run()

    def _restore(self, checkpoint: dict[str, Any], path: str, restarted: bool) -> str:
        """Restore ``checkpoint``; the limit it had already reached ("" if none: there is training to do)."""
        restore_checkpoint(self.trainer, checkpoint, path)
        rank_zero_info(  # as Lightning's "Restored all states from the checkpoint at ..."
            f"[lockstep] Resumed from {path}: epoch {self.progress.current_epoch}, global step "
            f"{self.progress.global_step}."
        )
        if restarted:
            self._report_restart(checkpoint)
        finished = self._limit_reached()
        if finished:  # as Lightning's "`Trainer.fit` stopped: `max_epochs=3` reached."
            more = "max_epochs" if finished.startswith("max_epochs") else "max_steps"
            rank_zero_info(
                f"[lockstep] fit stopped at once: {path} already reached {finished}; nothing to "
                f"train. Pass a larger {more} to train on from it."
            )
        return finished

    def _report_restart(self, checkpoint: dict[str, Any]) -> None:
        """One line for a restart (torchrun's, elastic included; a SLURM requeue): the world size
        and accumulation before and now, the step resumed from, the steps computed again."""
        t, resumed = self.trainer, self.progress.global_step
        before = int(checkpoint.get("world_size", t.world_size))
        reached = t.strategy.steps_reached_before(before)
        if reached is None:
            again = "how many steps are computed again is not known (no rank before said how far it got)"
        else:
            again = f"{max(reached - resumed, 0)} step(s) computed again (the ranks before had reached step {reached})"
        rank_zero_info(
            f"[lockstep] Restart: world size {before} -> {t.world_size}, accumulation "
            f"{checkpoint.get('accumulate_grad_batches', '?')} -> {t.accumulate_grad_batches} (global batch "
            f"{t.global_batch_size}), resumed from global step {resumed}; {again}."
        )

    def setup_data(self, model: TrainModule, train: Any, val: Any) -> None:
        """The fit's loaders (given, or the DataModule's or module's hooks), sharded, seeded, pinned and counted."""
        t, strategy = self.trainer, self.trainer.strategy
        self._data_sources, self._loaded_epoch = (train, val), self.progress.current_epoch
        source = data_source(t, model)
        before_train = capture_rng_state()  # a sanity check's validation data are drawn from here (`_val_loaders`)
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
        self._take_accumulation(at_setup=True)
        install_worker_seeding(t.train_dataloader, t.global_rank)
        self.count_training_batches()
        val_loaders = self._val_loaders(model, source, val, before_train)
        if t.overfit_batches:
            val_loaders = [without_shuffling(dl) for dl in val_loaders]
        t.val_dataloaders = [strategy.process_dataloader(dl, "validate") for dl in val_loaders]
        if t.pin_memory:  # CUDA: pinned host batches are what make non-blocking copies asynchronous
            for dl in (t.train_dataloader, *t.val_dataloaders):
                strategy.accelerator.pin_loader_memory(dl)

    def _val_loaders(self, model: TrainModule, source: Any, val: Any, before_train: dict[str, Any]) -> list[Any]:
        """Fit's validation loaders, asked for as Lightning asks: not at all without a ``validation_step``;
        for a sanity check, inside it, so before the train loader and with the RNG isolated (a hook that
        draws, as ``BoringModel``'s datasets do, draws from the state the train loader's drew from)."""
        t = self.trainer
        if type(model).validation_step is TrainModule.validation_step:
            return []
        if val is not None:
            return as_loader_list(val, "fit(val_dataloaders=...)")
        if self.in_training or t.num_sanity_val_steps == 0 or t.limit_val_batches in (0, 0.0):
            return as_loader_list(source.val_dataloader(), "fit(val_dataloaders=...)")
        after_train = capture_rng_state()
        restore_rng_state(before_train)
        try:
            loaders = source.val_dataloader()
        finally:
            restore_rng_state(after_train)
        return as_loader_list(loaders, "fit(val_dataloaders=...)")

    def scale_learning_rates(self) -> None:
        """``scale_lr``: multiply the fresh optimizers' rates for W (for G / b with ``global_batch_size``),
        once per fit (never on resume)."""
        t = self.trainer
        fixed = t.config.loop.global_batch_size
        # With a fixed G the rate must not depend on W: it is scaled for the G / b micro batches of a
        # step (W when A = 1), the same on every world size a restart may bring.
        units = fixed // (t.micro_batch_size or 1) if fixed is not None else t.world_size
        factor = lr_scale_factor(t.scale_lr, units)
        scale_learning_rates(t.optimizers, t.lr_scheduler_configs, factor)
        self.lr_scaled = factor != 1.0
        if self.lr_scaled:
            # the schedules' base rates (the peak of a warmup), not a warmup's current start rate
            lrs = [group.get("initial_lr", group["lr"]) for opt in t.optimizers for group in opt.param_groups]
            basis = f"global batch {fixed} ({units} micro batches)" if fixed is not None else f"W={t.world_size}"
            rank_zero_info(f"[lockstep] scale_lr={t.scale_lr!r}: learning rate x{factor:g} for {basis} -> base rates {lrs}")

    def _reset(self) -> None:
        """A new loop or fit: position zero, no losses seen, nothing agreed or scaled yet."""
        self.progress = FitProgress()
        self.loss_check.reset()
        self.lr_scaled = False  # the optimizers' rates were scaled for W (checkpointed: never twice)
        self.in_training = False  # inside `run`'s epochs (errors name the batch)
        self.failed_fetch_idx: int | None = None  # the batch whose loading raised (errors name it)
        self._plan: ResumePlan | None = None  # how the first epoch of a restored fit continues
        self._new_order_start = 0  # the first epoch's first batch, in a new order (`ResumePlan.new_order_start`)
        # `should_stop` as every rank agreed at the last agreement point, and whether validation
        # ran (a plateau scheduler's missing monitor may still come from it)
        self._agreed_stop = self._validated = False
        self._ahead: dict[str, Any] | None = None  # the first epoch's iterator draws, made ahead
        self._reached_last = False  # the epoch trained its last batch (its schedulers step)
        self.validations_in_epoch = 0  # validation runs finished in this epoch (Lightning's view counts them)

    def state_dict(self) -> dict[str, Any]:
        """The loop's checkpoint entries: the position (`FitProgress`) and whether the rates were scaled."""
        return {**self.progress.state_dict(), "lr_scaled": self.lr_scaled}

    def load_state_dict(self, checkpoint: dict[str, Any], path: str = "") -> None:
        """Take a checkpoint's position and LR-scaling flag (saved rates are final: never rescaled)
        and plan how the fit continues (`plan_resume`): at an epoch boundary the states that decide
        the next epoch are restored now; an interrupted epoch continues when the first epoch starts."""
        t = self.trainer
        loaded = FitProgress.from_state_dict(checkpoint)
        self.lr_scaled = bool(checkpoint.get("lr_scaled", False))
        loader = t.train_dataloader
        by_samples = loaded.samples_done is not None and global_batch_sampler(loader) is not None
        plan = plan_resume(checkpoint, loaded, path, t.world_size, t.global_rank, by_samples)
        for message in plan.warnings:
            rank_zero_warn(message, stacklevel=user_stacklevel())
        # the first epoch starts where the plan says
        self.progress = loaded.next_epoch() if plan.finished_epoch else loaded.epoch_started(plan.new_order_start)
        if plan.restore_now and plan.rank_state is not None:
            restore_boundary_states(loader, plan.rank_state)
        self._plan = plan if plan.checks_first_epoch else None
        self._new_order_start = plan.new_order_start

    def adopt_progress(self, state: dict[str, Any]) -> None:
        """Take the position a spawned run's rank 0 ended at (`Trainer.adopt_spawned_run`)."""
        self.progress = FitProgress.from_state_dict(state)

    def optimizer_stepped(self) -> None:
        """An optimizer step was taken (called by the optimization path that took it)."""
        self.progress = self.progress.stepped()

    def _take_accumulation(self, at_setup: bool = False) -> int:
        """The Trainer's current ``accumulate_grad_batches`` (A), given to the train loader's
        `GlobalBatchSampler`: the one place the loop reads A, at set-up and at each epoch start
        (after ``on_train_epoch_start``: a GradientAccumulationScheduler may have changed it).
        With ``global_batch_size=G``, A is derived at set-up for this world size and stays."""
        t = self.trainer
        fixed = t.config.loop.global_batch_size
        if fixed is not None and at_setup:
            t.accumulate_grad_batches = self._accumulation_for(fixed)
        accumulate = t.accumulate_grad_batches
        if fixed is not None and global_batch_size(t.world_size, t.micro_batch_size or 0, accumulate) != fixed:
            raise GlobalBatchError(
                f"accumulate_grad_batches was set to {accumulate} during the fit (a GradientAccumulationScheduler?); "
                f"with global_batch_size={fixed} it is {self._accumulation_for(fixed)} on world size {t.world_size}: "
                "pass one or the other."
            )
        sampler = global_batch_sampler(t.train_dataloader)
        if sampler is not None:
            sampler.set_accumulation(accumulate)
        return accumulate

    def _accumulation_for(self, fixed: int) -> int:
        """A for ``global_batch_size=fixed`` on this world size; refused when it cannot be met, or
        when an ``accumulate_grad_batches`` given with it disagrees (its default 1 does not count)."""
        t = self.trainer
        b = t.micro_batch_size
        if b is None:
            raise GlobalBatchError(
                f"global_batch_size={fixed} needs the micro batch: the train loader has no batch_size "
                "(a batch_sampler or an iterable without one). No step was taken."
            )
        derived = accumulation_for(fixed, t.world_size, b)
        given = t.config.loop.accumulate_grad_batches
        if given not in (1, derived):
            raise GlobalBatchError(
                f"accumulate_grad_batches={given} disagrees with global_batch_size={fixed}: on world size "
                f"{t.world_size} with micro batch {b} it is {derived}. Pass one of them. No step was taken."
            )
        return derived

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
        self._world_size, self._max_steps = t.world_size, t.max_steps
        self._on_train_batch_start = hooks.callables("on_train_batch_start")
        self._on_train_batch_end = hooks.callables("on_train_batch_end")
        hooks.call("on_fit_start")
        if t.val_dataloaders and t.num_sanity_val_steps != 0 and self.validation_enabled():
            with isolated_rng():  # training draws the same random numbers with or without it (its hooks too, as Lightning)
                t.state.stage = Stage.SANITY_CHECK
                t.metric_logger.clear_shown()  # as Lightning: the check shows its own values only, then none
                hooks.call("on_sanity_check_start")
                EvaluationLoop(t, Stage.SANITY_CHECK, within_fit=True).run(t.val_dataloaders)
                hooks.call("on_sanity_check_end")
                t.metric_logger.end_evaluation()
                t.metric_logger.clear_shown()
                t.state.stage = Stage.TRAIN
        fresh = self._plan is None and self.progress.global_step == 0 and self.progress.current_epoch == 0
        # Lightning creates the first epoch's iterator here: its draws are made here (iterator_draws.py)
        self._ahead = draw_ahead(t.train_dataloader) if fresh else None
        hooks.call("on_train_start")
        t.model.train()
        self.rank_states_at_end = None
        self._preemption.install()
        self.in_training = True  # stays True when the loop raises: errors name the batch
        try:
            while not self._done():
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
        t = self.trainer
        windows, source, start = self._start_epoch()
        val_every, val_at_end = self._validation_schedule()
        seen = 0
        rank = t.global_rank if t.world_size > 1 else None  # one process: a short loader just ends the epoch
        profiler = t.profiler if t.profiler.active else None
        validates = bool(val_every or val_at_end)
        over_run = t.check_val_every_n_epoch is None  # the schedule counts batches over every epoch
        for batch_idx, batch, is_last in iterate_with_lookahead(
            source, self.num_training_batches, start, rank, self.progress.current_epoch, self._fetch_failed
        ):
            if self._agree_each_batch:  # some rank's loader has no length: stop when the first rank runs out
                is_last = t.strategy.reduce_boolean_decision(is_last, all=False)
            self.progress = self.progress.at_batch(batch_idx)
            self.is_last_batch = is_last  # Lightning's `trainer.is_last_batch`, during the batch's hooks
            window_end = windows.is_window_end(batch_idx, is_last)
            if profiler is None:
                self._train_batch(batch, batch_idx, is_last, window_end, windows)
            else:
                with profiler.profile("run_training_batch"):
                    self._train_batch(batch, batch_idx, is_last, window_end, windows)
            seen += 1
            if validates and _validation_due(val_every, val_at_end, self._validation_index(batch_idx, over_run), is_last):
                self._validate(window_end)
            if window_end:  # after validation: it may log their monitor
                self.optimization.step_schedulers("step", self.progress.global_step, plateau=True)
            self._reached_last = is_last
            if is_last or (window_end and self._stops_mid_epoch()):
                break
        _check_trained_some(seen)
        if not self.progress.epoch_finished and not self._stopped():
            # max_steps ended the run inside the epoch: the epoch is not over (no epoch-end hooks,
            # same epoch and position), so a checkpoint written now resumes at the next batch.
            self.loss_check.check()
            return
        self.progress = self.progress.epoch_ending()  # also when should_stop ended it early
        self._epoch_end()

    def _start_epoch(self) -> tuple[AccumulationWindows, Any, int]:
        """The epoch's data (reloaded, resumed, prefetched), its hooks and windows: (windows, batches, first index)."""
        t = self.trainer
        every = t.reload_dataloaders_every_n_epochs
        if every and self.progress.current_epoch - self._loaded_epoch >= every:  # the loader hooks again
            self.setup_data(t.module, *self._data_sources)
        loader = t.train_dataloader
        t.strategy.on_epoch_start(loader, self.progress.current_epoch)
        t.metric_logger.start_training_epoch()
        t.hooks.call("on_train_epoch_start")
        self.validations_in_epoch = 0
        accumulate = self._take_accumulation()
        sampler = global_batch_sampler(loader)
        size = sampler.dataset_size if sampler is not None else dataset_size(loader)
        plan, self._plan = self._plan, None
        resumed = None if plan is None else self._continued_epoch(plan, sampler, size)
        self.count_training_batches()  # a sampler's length may change between epochs
        layout = sampler.layout() if sampler is not None else None
        windows = self._epoch_windows(accumulate, layout)
        source, start = self._epoch_source(loader, resumed, layout)
        offset, per_step = (layout.offset, layout.global_batch_size) if layout is not None else (None, None)
        shuffle = sampler.shuffle if sampler is not None else None
        self.progress = self.progress.epoch_started(start, offset, per_step, size, shuffle)
        return windows, self._prefetched(source, start), start

    def _continued_epoch(self, plan: ResumePlan, sampler: GlobalBatchSampler | None, size: int | None) -> ResumePlan | None:
        """The restored fit's first epoch: ``plan`` when it continues the interrupted epoch (the
        dataset length and global batch checked against this run's), None when it starts afresh."""
        t = self.trainer
        if plan.epoch_state is not None and not check_dataset_size(
            plan.dataset_size, size, plan.path, t.allow_dataset_change
        ):
            if plan.rng is not None:  # the epoch restarts: its order drawn from the state saved
                restore_rng_state(plan.rng)
            return None
        if sampler is not None:
            check_shuffle(plan.shuffle, sampler.shuffle, plan.path, mid_epoch=plan.epoch_state is not None)
        if sampler is not None and plan.samples_done is not None:
            check_global_batch(plan.global_batch_size, sampler, t.allow_global_batch_change)
            if plan.epoch_state is not None:
                sampler.start_at(plan.samples_done)
        return plan if plan.epoch_state is not None else None

    def _epoch_windows(self, accumulate: int, layout: EpochLayout | None) -> AccumulationWindows:
        windows = AccumulationWindows(
            accumulate, self.num_training_batches if self._train_length_known else None, layout
        )
        self.optimization.start_epoch(windows)
        return windows

    def _epoch_source(self, loader: Any, resumed: ResumePlan | None, layout: EpochLayout | None) -> tuple[Any, int]:
        """The epoch's batches and the index of the first: the loader, or the rest of the interrupted epoch."""
        ahead, self._ahead = self._ahead, None
        if resumed is None and ahead is not None:  # the first epoch of a fresh fit: draws made ahead
            source, self.epoch_state = iterate_from(loader, ahead, lambda: capture_epoch_state(loader))
            return source, 0
        start, self._new_order_start = self._new_order_start, 0
        if resumed is None:
            self.epoch_state = capture_epoch_state(loader)
            return loader, start
        assert resumed.epoch_state is not None
        self.epoch_state = resumed.epoch_state
        if layout is not None and resumed.samples_done is not None:  # the sampler starts after the trained samples
            return resumed_epoch(loader, 0, resumed.epoch_state, resumed.rng), layout.first_batch
        start = resumed.batches_done
        return resumed_epoch(loader, start, resumed.epoch_state, resumed.rng), start

    def _prefetched(self, source: Any, start: int) -> Any:
        """CUDA: the batches copied to the device on a side stream while the previous one computes
        (trainer/data/prefetcher.py); else ``source`` itself."""
        t = self.trainer
        self.failed_fetch_idx = None
        remaining = None if self.num_training_batches is None else self.num_training_batches - start
        transfer = self.transfer if self.transfer.hooked else None
        prefetcher = prefetch_to_device(source, t.strategy.root_device, remaining, t.channels_last, transfer)
        self.prefetching = prefetcher is not None
        self._move_batches = prefetcher is None and self.transfer.moves
        self._convert_batches = t.precision_plugin.module_dtype is not None
        return prefetcher if prefetcher is not None else source

    def _stopped(self) -> bool:
        # Mid-epoch, only a stop every rank agreed on (after validation) may end the epoch:
        # a rank that stops alone leaves the others waiting in the next all-reduce.
        stop = self.trainer.should_stop if self.trainer.world_size == 1 else self._agreed_stop
        return stop and self.can_stop_early()

    def _stops_mid_epoch(self) -> bool:
        # `_stopped` inline: it runs after every optimizer step
        stop = self.trainer.run.should_stop if self._world_size == 1 else self._agreed_stop
        if stop and self.can_stop_early():
            return True
        return self._max_steps != -1 and self.progress.global_step >= self._max_steps

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
        t = self.trainer
        if self._move_batches:  # not when the prefetcher already moved it
            batch = self.transfer(batch)
        if self._convert_batches:  # "bf16-true": the module computes in bf16
            batch = t.precision_plugin.convert_input(batch)
        metrics = t.metric_logger.train
        metrics.set_batch(batch)
        metrics.in_step = True
        for hook in self._on_train_batch_start:
            hook(batch, batch_idx)
        output = self.optimization.run(batch, batch_idx, window_end)
        if is_last:  # Lightning's place for the epoch's schedulers but the plateau ones: before validation
            self.optimization.step_schedulers("epoch", self.progress.current_epoch + 1, plateau=False)
        samples = windows.samples_through(batch_idx) if window_end else self.progress.samples_done
        # the position a checkpoint written from here on records
        self.progress = self.progress.batch_trained(batch_idx, is_last, samples)
        if window_end:
            signum = self._preemption.agreed(self._world_size, t.strategy.control_group)
            if signum:
                self._save_and_exit_for_preemption(signum)
        for hook in self._on_train_batch_end:
            hook(output, batch, batch_idx)
        metrics.in_step = False

    def _epoch_end(self) -> None:
        t = self.trainer
        self.loss_check.check()
        # Lightning's order: every hook sees the epoch aggregates; metric monitors run last so
        # they see what the module logs in its hook (docs/callbacks.md).
        t.metric_logger.preview_epoch(t.metric_logger.train, t.strategy)
        t.hooks.call_callbacks("on_train_epoch_end", monitoring=False)
        t.hooks.call_module("on_train_epoch_end")
        # Lightning logs an epoch's aggregates at the step of its last batch's records
        t.metric_logger.publish_epoch(t.metric_logger.train, t.strategy, self.logged_steps() - 1, self.progress.current_epoch)
        t.hooks.call_callbacks("on_train_epoch_end", monitoring=True)
        # an epoch that should_stop cut short steps no scheduler (as Lightning)
        if self._reached_last:
            self.optimization.step_schedulers("epoch", self.progress.current_epoch + 1, plateau=True)
        self.progress = self.progress.next_epoch()
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
        """(validate every n training batches, validate at the epoch's last batch) for this epoch,
        as Lightning schedules it. With ``check_val_every_n_epoch=None`` the n batches are counted
        over the whole run (`_validation_index`), so an int ``val_check_interval`` may exceed an epoch."""
        if not self.validation_enabled():
            return None, False
        t, n = self.trainer, self.num_training_batches
        interval, every_epoch = t.val_check_interval, t.check_val_every_n_epoch
        if every_epoch is not None and (self.progress.current_epoch + 1) % every_epoch != 0:
            return None, False
        if isinstance(interval, int):
            if every_epoch is not None and n is not None and interval > n:  # validation would never run
                raise ValueError(
                    f"val_check_interval={interval} is more than the {n} training batches of an epoch "
                    "(after limit_train_batches), so validation would never run. Use an int <= "
                    f"{n}, a float fraction of the epoch, check_val_every_n_epoch=None to count the "
                    "batches over epochs, or limit_val_batches=0 to turn validation off."
                )
            return interval, False
        if interval == 1.0:
            return None, True
        if n is None:
            raise ValueError(
                f"val_check_interval={interval} is a fraction of the epoch, but the train loader has "
                "no length. Use an int (validate every n batches)."
            )
        return max(1, int(n * interval)), False

    def _validation_index(self, batch_idx: int, over_run: bool) -> int:
        """The index the validation schedule counts: the batch's in its epoch, or ``over_run``
        (``check_val_every_n_epoch=None``) its index over the whole run (Lightning's ``total_batch_idx``)."""
        if over_run:
            return self.progress.batches_total - 1  # the batch just trained is counted
        return batch_idx

    def _validate(self, window_end: bool) -> None:
        t = self.trainer
        if window_end:  # release the gradients' memory for validation (Lightning's hook)
            t.module.on_validation_model_zero_grad()
        t.state.stage = Stage.VALIDATE
        # logged at the step of the batch's own records: after its step, one less than the steps
        # taken; inside an accumulation window (no step yet) the steps taken
        steps = self.logged_steps()
        EvaluationLoop(t, Stage.VALIDATE, within_fit=True, log_step=steps - 1 if window_end else steps).run(
            t.val_dataloaders
        )
        self.validations_in_epoch += 1
        self._validated = True
        t.state.stage = Stage.TRAIN
        t.metric_logger.end_evaluation()
        self.agree_on_stop()

    def scheduler_metrics(self) -> SchedulerMetrics:
        """What a ``ReduceLROnPlateau`` reads now: the logged values, and whether validation may still log its monitor."""
        t = self.trainer
        return SchedulerMetrics(t.callback_metrics, not self._validated and self.validation_enabled())

    # -- pre-emption -----------------------------------------------------------------------------
    def _save_and_exit_for_preemption(self, signum: int) -> None:
        t = self.trainer
        with preemption_checkpoint_path(t) as path:
            t.save_checkpoint(path)
        preempted = Preempted(signum, path)
        if t.is_global_zero:
            announce_preemption(preempted)
        leave_note_for_launcher(preempted)
        raise preempted


def _validation_due(every: int | None, at_end: bool, batch_idx: int, is_last: bool) -> bool:
    """Whether validation runs after this batch (every ``every`` batches, or at the epoch's last)."""
    return bool(every and (batch_idx + 1) % every == 0) or (is_last and at_end)


def _check_trained_some(seen: int) -> None:
    if seen == 0:
        raise ValueError(
            "The train dataloader produced no batches this epoch. Check the dataset, the "
            "sampler and drop_last."
        )
