"""The training loop: epochs, micro batches, accumulation windows and optimizer steps.

The path of one step is flat: `FitLoop` → `Strategy.training_step` → `TrainModule.training_step`,
then backward (inside `Strategy.no_sync` for non-final micro batches of a window), and at the
window's end one synced optimizer step. The loop owns the run's position (`FitProgress`), the
epoch's batch count, when to stop, and the pre-emption save. Its set-up (the module, loaders,
optimizers, a restored checkpoint, the first epoch's resume) is `FitSetup` (fit_setup.py), and
the validation inside fit (the sanity check, the schedule, the runs) is `FitValidation`
(fit_validation.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from trainer.checkpointing.checkpoint_paths import preemption_checkpoint_path
from trainer.checkpointing.resume import ResumePlan, gather_rank_states
from trainer.contracts.progress import FitProgress
from trainer.data.global_batch_sampler import GlobalBatchSampler, global_batch_sampler
from trainer.data.loaders import check_trained_some, dataset_size, iterate_with_lookahead
from trainer.data.prefetcher import prefetch_to_device
from trainer.distributed.rank_zero import rank_zero_info
from trainer.launch.preemption import Preempted, PreemptionWatch, announce_preemption, leave_note_for_launcher
from trainer.lightning.loop_views import lightning_fit_loop_attribute
from trainer.loops.accumulation_windows import AccumulationWindows
from trainer.loops.anomaly import NonFiniteLossCheck
from trainer.loops.fit_setup import FitSetup
from trainer.loops.fit_validation import FitValidation, validation_due, validation_index
from trainer.contracts.schedulers import SchedulerMetrics
from trainer.module import TrainModule

if TYPE_CHECKING:
    from trainer.data.batch_transfer import BatchTransfer
    from trainer.loops.optimization import Optimization
    from trainer.contracts.internals import ModuleInternals, TrainerInternals as Trainer


class FitLoop:
    """Runs epochs until ``max_epochs``, ``max_steps`` or an agreed ``should_stop``."""

    def __init__(self, trainer: Trainer, detect_non_finite_loss: bool = True) -> None:
        self.trainer = trainer
        self.loss_check = NonFiniteLossCheck(detect_non_finite_loss)
        self.setup = FitSetup(trainer, self)  # what a fit prepares before its first epoch
        self.validation = FitValidation(trainer)  # the sanity check and the validation runs inside fit
        self.num_training_batches: int | None = None  # this epoch's, agreed by every rank
        self.epoch_state: dict[str, Any] | None = None  # RNG states that decide this epoch's order
        self.rank_states_at_end: list[dict[str, Any] | None] | None = None  # every rank's, after a DDP fit
        self._preemption = PreemptionWatch()
        self.is_last_batch = False
        self._agree_each_batch = False  # some rank's loader has no length: agree on the last batch
        self._train_length_known = True
        self._move_batches = False
        self.transfer: BatchTransfer = None  # type: ignore[assignment]  # set by `FitSetup.prepare`
        self._convert_batches = False
        self.prefetching = False  # this epoch copies batches to the device on a side stream
        # automatic (the loop steps) or manual (the module steps): `Optimization`, set by `FitSetup.prepare`
        self.optimization: Optimization = None  # type: ignore[assignment]
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
        return self.setup.given_loaders

    if not TYPE_CHECKING:
        # the type checker does not see it, so a name the class lacks is a type error and the
        # floor's protocols are checked against the real members (tests/project/conformance_check.py)
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

    def can_stop_early(self) -> bool:
        """Whether ``min_epochs`` and ``min_steps`` are reached: before, ``should_stop`` waits (as in Lightning)."""
        t, p = self.trainer, self.progress
        return (not t.min_epochs or p.current_epoch >= t.min_epochs) and (not t.min_steps or p.global_step >= t.min_steps)

    # -- set-up (`FitSetup`), called by `Trainer.fit` --------------------------------------------
    def fit(self, model: TrainModule, train: Any, val: Any, ckpt_path: Any, weights_only: bool) -> None:
        """`Trainer.fit`'s work: the set-up (`FitSetup.prepare`), then training."""
        reached = self.setup.limit_reached(self.progress)
        if reached and ckpt_path is None:  # as Lightning: a finished Trainer does not train again
            rank_zero_info(
                f"[lockstep] fit stopped at once: this Trainer's last fit reached {reached}. Use a new "
                "Trainer, or one with a larger limit and ckpt_path, to train on."
            )
            return
        self._reset()
        if self.setup.prepare(model, train, val, ckpt_path, weights_only):
            with torch.autograd.set_detect_anomaly(self.trainer.config.debug.detect_anomaly):
                self.run()

    def _reset(self) -> None:
        """A new loop or fit: position zero, no losses seen, nothing agreed or scaled yet."""
        self.progress = FitProgress()
        self.loss_check.reset()
        self.lr_scaled = False  # the optimizers' rates were scaled for W (checkpointed: never twice)
        self.in_training = False  # inside `run`'s epochs (errors name the batch)
        self.failed_fetch_idx: int | None = None  # the batch whose loading raised (errors name it)
        self.setup.reset()
        # `should_stop` as every rank agreed at the last agreement point, and whether validation
        # ran (a plateau scheduler's missing monitor may still come from it)
        self._agreed_stop = False
        self.validation.reset()
        self._reached_last = False  # the epoch trained its last batch (its schedulers step)

    def state_dict(self) -> dict[str, Any]:
        """The loop's checkpoint entries: the position (`FitProgress`) and whether the rates were scaled."""
        return {**self.progress.state_dict(), "lr_scaled": self.lr_scaled}

    def load_state_dict(self, checkpoint: dict[str, Any], path: str = "") -> None:
        """Take a checkpoint's position and LR-scaling flag (saved rates are final: never rescaled)
        and plan how the fit continues (`plan_resume`): at an epoch boundary the states that decide
        the next epoch are restored now; an interrupted epoch continues when the first epoch starts."""
        loaded = FitProgress.from_state_dict(checkpoint)
        self.lr_scaled = bool(checkpoint.get("lr_scaled", False))
        plan = self.setup.plan_resume(checkpoint, loaded, path)
        # the first epoch starts where the plan says
        self.progress = loaded.next_epoch() if plan.finished_epoch else loaded.epoch_started(plan.new_order_start)

    def adopt_progress(self, state: dict[str, Any]) -> None:
        """Take the position a spawned run's rank 0 ended at (`Trainer.adopt_spawned_run`)."""
        self.progress = FitProgress.from_state_dict(state)

    def optimizer_stepped(self) -> None:
        """An optimizer step was taken (called by the optimization path that took it)."""
        self.progress = self.progress.stepped()

    def take_accumulation(self, at_setup: bool = False) -> int:
        """The Trainer's current ``accumulate_grad_batches`` (A), given to the train loader's
        `GlobalBatchSampler`: the one place the loop reads A, at set-up and at each epoch start
        (after ``on_train_epoch_start``: a GradientAccumulationScheduler may have changed it)."""
        accumulate = self.setup.accumulation(at_setup)
        sampler = global_batch_sampler(self.trainer.train_dataloader)
        if sampler is not None:
            sampler.set_accumulation(accumulate)
        return accumulate

    def count_training_batches(self) -> None:
        """This epoch's batch count, agreed by every rank (one tiny all-gather per epoch)."""
        self.num_training_batches, self._agree_each_batch, self._train_length_known = self.setup.batch_count()

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        """The training part of fit: sanity check, epochs until done, and their hooks."""
        t = self.trainer
        hooks = t.hooks
        self._world_size, self._max_steps = t.world_size, t.max_steps
        self._on_train_batch_start = hooks.callables("on_train_batch_start")
        self._on_train_batch_end = hooks.callables("on_train_batch_end")
        hooks.call("on_fit_start")
        self.validation.sanity_check()
        p = self.progress
        self.setup.draw_ahead(self.setup.plan is None and p.global_step == 0 and p.current_epoch == 0)
        hooks.call("on_train_start")
        (t.model or t.module).train()  # the DDP wrapper where there is one
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
        val_every, val_at_end = self.validation.schedule(self.num_training_batches, self.progress.current_epoch)
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
            window_end = is_last | ((batch_idx + 1) % windows.accumulate == 0)  # `windows.is_window_end`, inline
            if profiler is None:
                self._train_batch(batch, batch_idx, is_last, window_end, windows)
            else:
                with profiler.profile("run_training_batch"):
                    self._train_batch(batch, batch_idx, is_last, window_end, windows)
            seen += 1
            if validates and validation_due(val_every, val_at_end, validation_index(batch_idx, over_run, self.progress), is_last):
                self._validate(window_end)
            if window_end & self.optimization.has_schedulers:  # after validation: it may log their monitor
                self.optimization.step_schedulers("step", self.progress.global_step, plateau=True)
            self._reached_last = is_last
            if is_last or (window_end and self._stops_mid_epoch()):
                break
        check_trained_some(seen)
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
        if self.setup.reload_due(self.progress.current_epoch):  # the loader hooks again
            self.setup.setup_data(t.module, *self.setup.given_loaders, self.progress.current_epoch)
        loader = t.train_dataloader
        t.strategy.on_epoch_start(loader, self.progress.current_epoch)
        t.metric_logger.start_training_epoch()
        t.hooks.call("on_train_epoch_start")
        self.validation.in_epoch = 0
        accumulate = self.take_accumulation()
        sampler = global_batch_sampler(loader)
        size = sampler.dataset_size if sampler is not None else dataset_size(loader)
        plan = self.setup.take_plan()
        resumed = None if plan is None else self._continued_epoch(plan, sampler, size)
        self.count_training_batches()  # a sampler's length may change between epochs
        layout = sampler.layout() if sampler is not None else None
        windows = AccumulationWindows(accumulate, self.num_training_batches if self._train_length_known else None, layout)
        self.optimization.start_epoch(windows)
        source, start, self.epoch_state = self.setup.epoch_source(loader, resumed, layout)
        offset, per_step = (layout.offset, layout.global_batch_size) if layout is not None else (None, None)
        shuffle = sampler.shuffle if sampler is not None else None
        self.progress = self.progress.epoch_started(start, offset, per_step, size, shuffle)
        return windows, self._prefetched(source, start), start

    def _continued_epoch(self, plan: ResumePlan, sampler: GlobalBatchSampler | None, size: int | None) -> ResumePlan | None:
        """The restored fit's first epoch: ``plan`` when it continues the interrupted epoch (checked
        against this run's: `FitSetup.epoch_continues`), None when it starts afresh."""
        if not self.setup.epoch_continues(plan, sampler, size) or plan.epoch_state is None:
            return None
        if sampler is not None and plan.samples_done is not None:
            sampler.start_at(plan.samples_done)
        return plan

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
        if window_end and (self._world_size > 1 or self._preemption.signum):  # one process: only on a signal
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

    # -- validation inside fit (`FitValidation`) ------------------------------------------------
    def validation_enabled(self) -> bool:
        """Whether fit has validation batches to run."""
        return self.validation.enabled()

    def _validate(self, window_end: bool) -> None:
        self.validation.run(window_end, self.logged_steps())
        self.agree_on_stop()

    def scheduler_metrics(self) -> SchedulerMetrics:
        """What a ``ReduceLROnPlateau`` reads now: the logged values, and whether validation may still log its monitor."""
        t = self.trainer
        return SchedulerMetrics(t.callback_metrics, not self.validation.ran and self.validation.enabled())

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

