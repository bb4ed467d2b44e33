"""A fit's set-up, before its first epoch: the module, the loaders, the optimizers, a restored
checkpoint, the learning-rate scaling; and each epoch's data: the loaders again when an epoch
reloads them, the first epoch's draws made ahead or its resume (`plan_resume`'s plan checked).

`FitSetup` belongs to one `FitLoop` (`fit_loop.setup`), which runs the epochs. It reads the loop
through `SetUpLoop` (what the set-up gives the loop and asks of it), so this module does not
import the loop.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from trainer.accelerators.compilation import prepare_for_speed
from trainer.checkpointing.checkpoint_paths import read_checkpoint, restart_checkpoint
from trainer.checkpointing.connector import refuse_weights_only, restore_checkpoint, restore_datamodule
from trainer.checkpointing.resume import (
    ResumePlan, capture_epoch_state, check_dataset_size, check_global_batch, check_shuffle, plan_resume,
    restore_boundary_states, resumed_epoch,
)
from trainer.contracts.accumulation import GlobalBatchError, accumulation_for, global_batch_size
from trainer.contracts.internals import FitLoopView
from trainer.contracts.user_line import user_stacklevel
from trainer.data.batch_transfer import BatchTransfer
from trainer.data.datamodule import data_source
from trainer.data.global_batch_sampler import EpochLayout, GlobalBatchSampler, global_batch_sampler
from trainer.data.iterator_draws import draw_ahead, iterate_from
from trainer.data.loaders import as_loader_list, check_loader, has_length, num_batches
from trainer.data.overfit import without_shuffling
from trainer.distributed.rank_zero import rank_zero_info, rank_zero_warn
from trainer.hyperparameters import hparams_for_loggers
from trainer.loops.automatic import optimization_for
from trainer.loops.optimization import lr_scale_factor, parse_optimizers, scale_learning_rates
from trainer.model_setup import check_trainable, configure_model
from trainer.module import TrainModule
from trainer.rng import capture_rng_state, restore_rng_state
from trainer.seed import install_worker_seeding

if TYPE_CHECKING:
    from trainer.contracts.progress import FitProgress
    from trainer.contracts.internals import ModuleInternals, TrainerInternals as Trainer
    from trainer.loops.optimization import Optimization


class SetUpLoop(FitLoopView, Protocol):
    """What the set-up reads and writes on the fit loop it prepares."""

    in_training: bool
    lr_scaled: bool
    transfer: BatchTransfer
    optimization: Optimization

    def take_accumulation(self, at_setup: bool = False) -> int: ...

    def count_training_batches(self) -> None: ...


class FitSetup:
    """Prepares one `FitLoop`'s fits: what ``Trainer.fit`` does before the first epoch."""

    def __init__(self, trainer: Trainer, loop: SetUpLoop) -> None:
        self.trainer = trainer
        self.loop = loop
        self.given_loaders: tuple[Any, Any] = (None, None)  # fit's loader arguments (None: the hooks)
        self._loaded_epoch = 0  # the epoch whose start last (re)loaded the data
        self.reset()

    def reset(self) -> None:
        """A new fit: no resume planned, no draws made ahead."""
        self.plan: ResumePlan | None = None  # how the first epoch of a restored fit continues
        self._new_order_start = 0  # the first epoch's first batch, in a new order (`ResumePlan.new_order_start`)
        self._ahead: dict[str, Any] | None = None  # the first epoch's iterator draws, made ahead

    def limit_reached(self, progress: FitProgress) -> str:
        """The limit ``progress`` reached ("" if none: a new Trainer, or stopped early)."""
        t, p = self.trainer, progress
        if t.max_steps != -1 and p.global_step >= t.max_steps > 0:
            return f"max_steps={t.max_steps}"
        if t.max_epochs not in (None, -1) and p.current_epoch >= t.max_epochs > 0:
            return f"max_epochs={t.max_epochs}"
        return ""

    def prepare(self, model: TrainModule, train: Any, val: Any, ckpt_path: Any, weights_only: bool) -> bool:
        """Data, module and optimizers set up, a checkpoint restored, the run announced to the
        loggers; False when the restored checkpoint had already reached its limit (nothing to train)."""
        t, strategy, loop = self.trainer, self.trainer.strategy, self.loop
        configure_model(t, model)  # right after `setup`, as in Lightning
        restarted = ckpt_path is None and strategy.is_restart()
        if restarted:
            ckpt_path = restart_checkpoint(t)
        path, checkpoint = "", None
        if ckpt_path is not None:
            path, checkpoint = read_checkpoint(t, ckpt_path, weights_only)
            refuse_weights_only(checkpoint, path)
            restore_datamodule(t, checkpoint)  # before its loaders are asked for, as in Lightning
        self.setup_data(model, train, val, loop.progress.current_epoch)
        prepare_for_speed(model, t.channels_last, t.compile)
        check_trainable(model)
        strategy.setup_module(model)
        loop.transfer = BatchTransfer(t, model)
        t.optimizers, t.lr_scheduler_configs = parse_optimizers(model.configure_optimizers())
        strategy.setup_optimizers(t.optimizers)
        # Under fp16 the scaler skips steps with overflowed gradients itself: nothing to report.
        check_grads = t.detect_non_finite_grads and t.precision != "16-mixed"
        loop.optimization = optimization_for(loop, list(model.named_parameters()) if check_grads else None)
        if checkpoint is not None and self._restore(checkpoint, path, restarted):
            # nothing logged or saved, no checkpoint directory claimed (so no fit hooks): the next
            # `ckpt_path="last"` finds the same checkpoint, and no version_N is left behind
            return False
        if checkpoint is None:
            loop.lr_scaled = self.scale_learning_rates()
        summary = (
            f"world size {t.world_size} ({t.num_nodes} node(s)), micro batch {t.micro_batch_size}, "
            f"accumulation {t.accumulate_grad_batches}, global batch {t.global_batch_size}, "
            f"precision {t.precision}, strategy {strategy.name}"
        )
        hparams = hparams_for_loggers(model, t.datamodule)
        t.metric_logger.log_run_start(hparams if t.enable_autolog_hparams else {}, summary, strategy, model)
        return True

    def _restore(self, checkpoint: dict[str, Any], path: str, restarted: bool) -> str:
        """Restore ``checkpoint``; the limit it had already reached ("" if none: there is training to do)."""
        restore_checkpoint(self.trainer, checkpoint, path)
        progress = self.loop.progress
        rank_zero_info(  # as Lightning's "Restored all states from the checkpoint at ..."
            f"[lockstep] Resumed from {path}: epoch {progress.current_epoch}, global step {progress.global_step}."
        )
        if restarted:
            self._report_restart(checkpoint)
        finished = self.limit_reached(progress)
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
        t, resumed = self.trainer, self.loop.progress.global_step
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

    def reload_due(self, epoch: int) -> bool:
        """Whether ``reload_dataloaders_every_n_epochs`` asks the loader hooks again at ``epoch``'s start."""
        every = self.trainer.reload_dataloaders_every_n_epochs
        return bool(every) and epoch - self._loaded_epoch >= every

    def setup_data(self, model: ModuleInternals, train: Any, val: Any, epoch: int) -> None:
        """The fit's loaders (given, or the DataModule's or module's hooks), sharded, seeded, pinned and counted."""
        t, strategy = self.trainer, self.trainer.strategy
        self.given_loaders, self._loaded_epoch = (train, val), epoch
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
        self.loop.take_accumulation(at_setup=True)
        install_worker_seeding(t.train_dataloader, t.global_rank)
        self.loop.count_training_batches()
        val_loaders = self._val_loaders(model, source, val, before_train)
        if t.overfit_batches:
            val_loaders = [without_shuffling(dl) for dl in val_loaders]
        t.val_dataloaders = [strategy.process_dataloader(dl, "validate") for dl in val_loaders]
        if t.pin_memory:  # CUDA: pinned host batches are what make non-blocking copies asynchronous
            for dl in (t.train_dataloader, *t.val_dataloaders):
                strategy.accelerator.pin_loader_memory(dl)

    def _val_loaders(self, model: ModuleInternals, source: Any, val: Any, before_train: dict[str, Any]) -> list[Any]:
        """Fit's validation loaders, asked for as Lightning asks: not at all without a ``validation_step``;
        for a sanity check, inside it, so before the train loader and with the RNG isolated (a hook that
        draws, as ``BoringModel``'s datasets do, draws from the state the train loader's drew from)."""
        t = self.trainer
        if type(model).validation_step is TrainModule.validation_step:
            return []
        if val is not None:
            return as_loader_list(val, "fit(val_dataloaders=...)")
        if self.loop.in_training or t.num_sanity_val_steps == 0 or t.limit_val_batches in (0, 0.0):
            return as_loader_list(source.val_dataloader(), "fit(val_dataloaders=...)")
        after_train = capture_rng_state()
        restore_rng_state(before_train)
        try:
            loaders = source.val_dataloader()
        finally:
            restore_rng_state(after_train)
        return as_loader_list(loaders, "fit(val_dataloaders=...)")

    def batch_count(self) -> tuple[int | None, bool, bool]:
        """This epoch's training batch count, agreed by every rank (one tiny all-gather per epoch);
        whether ranks must agree batch by batch; whether the train loader has a length."""
        t = self.trainer
        known = has_length(t.train_dataloader)
        count, agree_each_batch = t.strategy.agree_on_batch_count(
            num_batches(t.train_dataloader, t.limit_train_batches, "train")
        )
        if count == 0:
            raise ValueError("limit_train_batches leaves no training batches: nothing to train.")
        return count, agree_each_batch, known

    def scale_learning_rates(self) -> bool:
        """``scale_lr``: multiply the fresh optimizers' rates for W (for G / b with ``global_batch_size``),
        once per fit (never on resume); whether they were scaled."""
        t = self.trainer
        fixed = t.config.loop.global_batch_size
        # With a fixed G the rate must not depend on W: it is scaled for the G / b micro batches of a
        # step (W when A = 1), the same on every world size a restart may bring.
        units = fixed // (t.micro_batch_size or 1) if fixed is not None else t.world_size
        factor = lr_scale_factor(t.scale_lr, units)
        scale_learning_rates(t.optimizers, t.lr_scheduler_configs, factor)
        if factor == 1.0:
            return False
        # the schedules' base rates (the peak of a warmup), not a warmup's current start rate
        lrs = [group.get("initial_lr", group["lr"]) for opt in t.optimizers for group in opt.param_groups]
        basis = f"global batch {fixed} ({units} micro batches)" if fixed is not None else f"W={t.world_size}"
        rank_zero_info(f"[lockstep] scale_lr={t.scale_lr!r}: learning rate x{factor:g} for {basis} -> base rates {lrs}")
        return True

    def accumulation(self, at_setup: bool) -> int:
        """The Trainer's ``accumulate_grad_batches`` (A) for the sampler (`FitLoop.take_accumulation`).
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

    # -- the first epoch: drawn ahead (a fresh fit) or continued from a checkpoint -----------------
    def plan_resume(self, checkpoint: dict[str, Any], loaded: FitProgress, path: str) -> ResumePlan:
        """How a restored fit continues (`plan_resume`), its warnings given; at an epoch boundary
        the states that decide the next epoch are restored now."""
        t = self.trainer
        loader = t.train_dataloader
        by_samples = loaded.samples_done is not None and global_batch_sampler(loader) is not None
        plan = plan_resume(checkpoint, loaded, path, t.world_size, t.global_rank, by_samples)
        for message in plan.warnings:
            rank_zero_warn(message, stacklevel=user_stacklevel())
        if plan.restore_now and plan.rank_state is not None:
            restore_boundary_states(loader, plan.rank_state)
        self.plan = plan if plan.checks_first_epoch else None
        self._new_order_start = plan.new_order_start
        return plan

    def draw_ahead(self, fresh: bool) -> None:
        """Lightning creates the first epoch's iterator before ``on_train_start``: a fresh fit's
        draws are made then (iterator_draws.py)."""
        self._ahead = draw_ahead(self.trainer.train_dataloader) if fresh else None

    def take_plan(self) -> ResumePlan | None:
        """The plan the first epoch's start applies, once."""
        plan, self.plan = self.plan, None
        return plan

    def epoch_continues(self, plan: ResumePlan, sampler: GlobalBatchSampler | None, size: int | None) -> bool:
        """Whether the restored fit's first epoch may continue the interrupted one: the dataset
        length, shuffling and global batch checked against this run's (False: it restarts, its
        order drawn from the state saved)."""
        t = self.trainer
        if plan.epoch_state is not None and not check_dataset_size(
            plan.dataset_size, size, plan.path, t.allow_dataset_change
        ):
            if plan.rng is not None:
                restore_rng_state(plan.rng)
            return False
        if sampler is not None:
            check_shuffle(plan.shuffle, sampler.shuffle, plan.path, mid_epoch=plan.epoch_state is not None)
        if sampler is not None and plan.samples_done is not None:
            check_global_batch(plan.global_batch_size, sampler, t.allow_global_batch_change)
        return True

    def epoch_source(
        self, loader: Any, resumed: ResumePlan | None, layout: EpochLayout | None
    ) -> tuple[Any, int, dict[str, Any] | None]:
        """The epoch's batches, the index of the first, and the RNG states that decide its order:
        the loader, or the rest of the interrupted epoch."""
        ahead, self._ahead = self._ahead, None
        if resumed is None and ahead is not None:  # the first epoch of a fresh fit: draws made ahead
            source, state = iterate_from(loader, ahead, lambda: capture_epoch_state(loader))
            return source, 0, state
        start, self._new_order_start = self._new_order_start, 0
        if resumed is None:
            return loader, start, capture_epoch_state(loader)
        saved = resumed.epoch_state
        assert saved is not None
        if layout is not None and resumed.samples_done is not None:  # the sampler starts after the trained samples
            return resumed_epoch(loader, 0, saved, resumed.rng), layout.first_batch, saved
        start = resumed.batches_done
        return resumed_epoch(loader, start, saved, resumed.rng), start, saved
