"""The training loop: epochs, micro batches, accumulation windows and optimizer steps.

The path of one step is flat: `FitLoop` → `Strategy.training_step` → `TrainModule.training_step`,
then backward (inside `Strategy.no_sync` for non-final micro batches of a window), and at the
window's end one synced optimizer step.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from trainer.loops.accumulation import AccumulationWindows
from trainer.loops.anomaly import check_finite_gradients
from trainer.checkpointing.checkpoint import gather_rank_states
from trainer.data.loaders import iterate_with_lookahead
from trainer.loops.loss_normalization import ItemMeanNormalizer
from trainer.checkpointing.resume import capture_epoch_state, resumed_epoch
from trainer.loops.optimization import clip_gradients, step_schedulers
from trainer.data.prefetcher import prefetch_to_device

if TYPE_CHECKING:
    from trainer.trainer import Trainer


class FitLoop:
    """Runs epochs until ``max_epochs``, ``max_steps`` or an agreed ``should_stop``."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.batch_idx = 0  # index of the batch being trained
        self.batches_done = 0  # batches of the current epoch fully trained (checkpoint position)
        self.failed_fetch_idx: int | None = None  # the batch whose loading raised (errors name it)
        self.epoch_finished = False  # the current epoch has no batch left (its end hooks may run)
        self._normalizer = ItemMeanNormalizer()
        self.epoch_state: dict[str, Any] | None = None  # RNG states that decide this epoch's order
        self.resume_from: dict[str, Any] | None = None  # set by a mid-epoch checkpoint restore
        self.rank_states_at_end: list[dict[str, Any] | None] | None = None  # every rank's, after a DDP fit

    @property
    def done(self) -> bool:
        """Whether training is finished."""
        t = self.trainer
        if t.max_steps != -1 and t.global_step >= t.max_steps:
            return True
        if t.max_epochs is not None and t.max_epochs != -1 and t.current_epoch >= t.max_epochs:
            return True
        return t.should_stop

    def run(self) -> None:
        """Train until done."""
        self.rank_states_at_end = None
        while not self.done:
            self.run_epoch()
        if self.trainer.world_size > 1:
            # a save_checkpoint after fit runs when the process group is gone: keep every rank's
            # state as the loop leaves it, so that checkpoint resumes every rank exactly
            self.rank_states_at_end = gather_rank_states(self.trainer)

    def run_epoch(self) -> None:
        """One training epoch, its validation runs, and the epoch-end hooks."""
        t = self.trainer
        hooks, loader = t._hooks, t.train_dataloader
        t.strategy.on_epoch_start(loader, t.current_epoch)
        t._train_metrics.reset()
        t._active_metrics = t._train_metrics
        hooks.call("on_train_epoch_start")
        t._count_training_batches()  # a sampler's length may change between epochs
        # After the hook: a GradientAccumulationScheduler may have changed A for this epoch.
        windows = AccumulationWindows(
            t.accumulate_grad_batches, t.num_training_batches if t._train_length_known else None
        )
        val_every, val_at_end = t._val_check_schedule()
        resume, self.resume_from = self.resume_from, None
        if resume is None:
            self.epoch_state = capture_epoch_state(loader)
            source, start = loader, 0
        else:
            self.epoch_state = resume["epoch_state"]
            start = resume["batches_done"]
            source = resumed_epoch(loader, start, resume["epoch_state"], resume["rng"])
        self.batch_idx = self.batches_done = start
        self.failed_fetch_idx = None
        # CUDA: copy the next batch on a side stream while this one computes (trainer/data/prefetcher.py)
        remaining = None if t.num_training_batches is None else t.num_training_batches - start
        prefetcher = prefetch_to_device(source, t.strategy.root_device, remaining, t.channels_last)
        self._prefetching = prefetcher is not None
        source = prefetcher if prefetcher is not None else source
        # decided once per epoch: CPU batches already are where they train (unless channels_last)
        self._move_batches = prefetcher is None and (t.strategy.root_device.type != "cpu" or t.channels_last)
        seen = 0
        rank = t.global_rank if t.world_size > 1 else None  # one process: a short loader just ends the epoch
        for batch_idx, batch, is_last in iterate_with_lookahead(
            source, t.num_training_batches, start, rank, t.current_epoch, self._fetch_failed
        ):
            if t._agree_each_batch:  # some rank's loader has no length: stop when the first rank runs out
                is_last = t.strategy.reduce_boolean_decision(is_last, all=False)
            self.batch_idx = batch_idx
            window_end = windows.is_window_end(batch_idx, is_last)
            self._train_batch(batch, batch_idx, is_last, window_end, windows)
            seen += 1
            if (val_every and (batch_idx + 1) % val_every == 0) or (is_last and val_at_end):
                t._run_validation_in_fit()
                t._active_metrics = t._train_metrics
            # Mid-epoch, only a stop every rank agreed on (after validation) may end the epoch:
            # a rank that stops alone leaves the others waiting in the next all-reduce.
            stop = t.should_stop if t.world_size == 1 else t._agreed_stop
            if is_last or (window_end and (stop or (t.max_steps != -1 and t.global_step >= t.max_steps))):
                break
        if seen == 0:
            raise ValueError(
                "The train dataloader produced no batches this epoch. Check the dataset, the "
                "sampler and drop_last."
            )
        stopped = t.should_stop if t.world_size == 1 else t._agreed_stop
        if not self.epoch_finished and not stopped:
            # max_steps ended the run inside the epoch: the epoch is not over (no epoch-end hooks,
            # same epoch and position), so a checkpoint written now resumes at the next batch.
            t._loss_check.check()
            return
        self.epoch_finished = True  # also when should_stop ended it early
        self._epoch_end()

    def _fetch_failed(self, batch_idx: int) -> None:
        # The loop fetches one batch ahead: the batch that failed to load is not the one last trained.
        self.failed_fetch_idx = batch_idx

    def _train_batch(
        self, batch: Any, batch_idx: int, is_last: bool, window_end: bool, windows: AccumulationWindows
    ) -> None:
        t = self.trainer
        hooks, strategy, precision, module = t._hooks, t.strategy, t._precision, t.module
        if self._move_batches:  # not when the prefetcher already moved it
            batch = t._move_batch(batch)
        metrics = t._train_metrics
        metrics.set_batch(batch)
        metrics.in_step = True
        hooks.call("on_train_batch_start", batch, batch_idx)
        with strategy.no_sync(window_end):
            with precision.autocast():
                output = strategy.training_step(module, batch, batch_idx)
            loss = _loss_of(output, batch_idx)
            t._last_loss = loss.detach()
            t._loss_check.record(t._last_loss, t.current_epoch, t.global_step, batch_idx)
            items = self._normalizer.observe(output, loss, batch_idx)
            if items is not None:
                scaled = loss  # a sum: normalised by the global item count at the step
                t._last_loss = t._last_loss / items.clamp_min(1.0)  # shown as this batch's mean
            else:
                divisor = windows.loss_divisor(batch_idx)
                scaled = loss / divisor if divisor != 1 else loss
            hooks.call("on_before_backward", scaled)
            precision.backward(scaled)
        hooks.call("on_after_backward")
        if window_end:
            self._optimizer_step(windows.grad_correction(batch_idx))
        # the position a checkpoint written from here on records
        self.batches_done = batch_idx + 1
        self.epoch_finished = is_last
        if window_end:
            signum = t._preemption.agreed(t.world_size, t.strategy.control_group)
            if signum:
                t._save_and_exit_for_preemption(signum)
        hooks.call("on_train_batch_end", output, batch, batch_idx)
        metrics.in_step = False

    def _optimizer_step(self, grad_correction: float) -> None:
        t = self.trainer
        hooks, precision = t._hooks, t._precision
        t.strategy.after_backward_window()
        if self._normalizer.active:
            grad_correction = 1.0  # summed losses were never divided by the window size
        self._normalizer.finish_window(t.strategy, t._optimizer_params)
        for optimizer, params in zip(t.optimizers, t._optimizer_params):
            if grad_correction != 1.0:
                grads = [p.grad for p in params if p.grad is not None]
                torch._foreach_mul_(grads, grad_correction)
            precision.unscale(optimizer)
            if t._grad_check_params is not None:
                check_finite_gradients(
                    t._grad_check_params, t.current_epoch, t.global_step, self.batch_idx, t.global_rank
                )
            hooks.call("on_before_optimizer_step", optimizer)
            if t.gradient_clip_val:  # None or 0: no clipping (as in Lightning)
                clip_gradients(params, t.gradient_clip_val, t.gradient_clip_algorithm)
            precision.optimizer_step(optimizer)
        precision.update()
        for optimizer in t.optimizers:
            hooks.call("on_before_zero_grad", optimizer)
            optimizer.zero_grad(set_to_none=True)
        t._global_step += 1
        if t.lr_scheduler_configs:
            step_schedulers(t.lr_scheduler_configs, "step", t.global_step, t._metrics_for_schedulers)
        if t.global_step % t.log_every_n_steps == 0:
            t._loss_check.check()
            t._log_step_metrics()


    def _epoch_end(self) -> None:
        t = self.trainer
        t._loss_check.check()
        t._hooks.call_module("on_train_epoch_end")
        t._log_epoch_metrics(t._train_metrics)
        t._hooks.call_callbacks("on_train_epoch_end")
        if t.lr_scheduler_configs:
            step_schedulers(t.lr_scheduler_configs, "epoch", t.current_epoch + 1, t._metrics_for_schedulers)
        t._current_epoch += 1
        self.batch_idx = 0
        self.batches_done = 0
        self.epoch_finished = False
        t.should_stop = t.strategy.reduce_boolean_decision(t.should_stop, all=False)
        t._agreed_stop = t.should_stop


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
