"""Validation inside fit: the sanity check before the first epoch, each epoch's schedule (as
Lightning schedules it), and a validation run after a training batch.

`FitValidation` belongs to one `FitLoop` (`fit_loop.validation`), which decides after each batch
whether the schedule is due (`validation_due`) and agrees on ``should_stop`` after each run.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.loops.evaluation_loop import EvaluationLoop
from trainer.rng import isolated_rng
from trainer.stage import Stage

if TYPE_CHECKING:
    from trainer.contracts.progress import FitProgress
    from trainer.contracts.internals import TrainerInternals as Trainer


class FitValidation:
    """The fit's validation runs: whether there are any, when they run, and how many ran."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.in_epoch = 0  # validation runs finished in this epoch (Lightning's view counts them)
        self.ran = False  # a validation ran in this fit (a plateau scheduler's monitor may come from it)

    def reset(self) -> None:
        """A new fit: no validation ran yet."""
        self.in_epoch, self.ran = 0, False

    def enabled(self) -> bool:
        """Whether fit has validation batches to run."""
        t = self.trainer
        if not t.val_dataloaders or t.limit_val_batches in (0, 0.0):
            return False
        return any(n != 0 for n in t.num_val_batches)

    def schedule(self, num_training_batches: int | None, epoch: int) -> tuple[int | None, bool]:
        """(validate every n training batches, validate at the epoch's last batch) for ``epoch``,
        as Lightning schedules it. With ``check_val_every_n_epoch=None`` the n batches are counted
        over the whole run (`validation_index`), so an int ``val_check_interval`` may exceed an epoch."""
        if not self.enabled():
            return None, False
        t, n = self.trainer, num_training_batches
        interval, every_epoch = t.val_check_interval, t.check_val_every_n_epoch
        if every_epoch is not None and (epoch + 1) % every_epoch != 0:
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

    def sanity_check(self) -> None:
        """``num_sanity_val_steps`` validation batches before training, when there are any."""
        t = self.trainer
        if t.val_dataloaders and t.num_sanity_val_steps != 0 and self.enabled():
            with isolated_rng():  # training draws the same random numbers with or without it (its hooks too, as Lightning)
                t.state.stage = Stage.SANITY_CHECK
                t.metric_logger.clear_shown()  # as Lightning: the check shows its own values only, then none
                t.hooks.call("on_sanity_check_start")
                EvaluationLoop(t, Stage.SANITY_CHECK, within_fit=True).run(t.val_dataloaders)
                t.hooks.call("on_sanity_check_end")
                t.metric_logger.end_evaluation()
                t.metric_logger.clear_shown()
                t.state.stage = Stage.TRAIN

    def run(self, window_end: bool, steps: int) -> None:
        """One validation run after a training batch; ``steps`` is the loggers' step scale now
        (`FitLoop.logged_steps`)."""
        t = self.trainer
        if window_end:  # release the gradients' memory for validation (Lightning's hook)
            t.module.on_validation_model_zero_grad()
        t.state.stage = Stage.VALIDATE
        # logged at the step of the batch's own records: after its step, one less than the steps
        # taken; inside an accumulation window (no step yet) the steps taken
        EvaluationLoop(t, Stage.VALIDATE, within_fit=True, log_step=steps - 1 if window_end else steps).run(
            t.val_dataloaders
        )
        self.in_epoch += 1
        self.ran = True
        t.state.stage = Stage.TRAIN
        t.metric_logger.end_evaluation()


def validation_index(batch_idx: int, over_run: bool, progress: FitProgress) -> int:
    """The index the validation schedule counts: the batch's in its epoch, or ``over_run``
    (``check_val_every_n_epoch=None``) its index over the whole run (Lightning's ``total_batch_idx``)."""
    if over_run:
        return progress.batches_total - 1  # the batch just trained is counted
    return batch_idx


def validation_due(every: int | None, at_end: bool, batch_idx: int, is_last: bool) -> bool:
    """Whether validation runs after this batch (every ``every`` batches, or at the epoch's last)."""
    return bool(every and (batch_idx + 1) % every == 0) or (is_last and at_end)
