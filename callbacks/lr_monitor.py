"""`LearningRateMonitor`: log every parameter group's learning rate through the Trainer's loggers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from callbacks.callback import Callback
from trainer.contracts.arguments import check_bool, hint_misspelled_arguments

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


class LearningRateMonitor(Callback):
    """Logs ``lr-<OptimizerName>`` (one param group) or ``lr-<OptimizerName>/pg<i>`` (several,
    1-based; a group with a ``"name"`` entry uses that name instead of ``pg<i>``).

    Args:
        logging_interval: ``"step"``: every ``log_every_n_steps`` optimizer steps; ``"epoch"``:
            at each epoch start; ``None``: each optimizer at its scheduler's interval (step for
            optimizers without a scheduler).

    Values are logged at Lightning's step, the steps taken before the batch the learning rate is
    about to be used for: ``trainer.global_step``, or under manual optimization the batches
    trained (the loggers' scale there, `FitLoop.logged_steps`). A second optimizer of the same class gets a ``-1`` suffix (``lr-Adam-1``). The loggers
    get them from global rank 0; every rank also puts them into ``trainer.callback_metrics`` (as
    Lightning's do), where a `ModelCheckpoint` or `EarlyStopping` may monitor them, unless
    ``to_callback_metrics=False``: the Trainer's default monitor (one Lightning does not add) keeps
    them out, so that ``callback_metrics`` holds what it holds under Lightning.
    """

    role = "lr_monitor"

    @hint_misspelled_arguments
    def __init__(self, logging_interval: str | None = None, *, to_callback_metrics: bool = True) -> None:
        if logging_interval is not None and not isinstance(logging_interval, str):
            raise TypeError(
                f"LearningRateMonitor(logging_interval={logging_interval!r}): use None, 'step' or 'epoch'."
            )
        if logging_interval not in (None, "step", "epoch"):
            raise ValueError(
                f"LearningRateMonitor(logging_interval={logging_interval!r}): use None, 'step' or 'epoch'."
            )
        check_bool("to_callback_metrics", to_callback_metrics)
        self.logging_interval = logging_interval
        self.to_callback_metrics = to_callback_metrics
        self.lrs: dict[str, list[float]] = {}
        self._last_step_logged = -1
        self._every = 0  # the Trainer's log_every_n_steps, read once per fit
        self._manual = False  # the module steps its optimizers: the loggers count batches

    def on_train_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if not trainer.loggers:
            raise ValueError("LearningRateMonitor needs a logger: the Trainer has none (logger=False).")
        self.lrs = {name: [] for name, _, _ in self._groups(trainer)}
        self._last_step_logged = -1
        self._every = trainer.log_every_n_steps
        self._manual = not pl_module.automatic_optimization

    def on_train_batch_start(self, trainer: TrainerView, pl_module: ModuleView, batch: Any, batch_idx: int) -> None:
        if self.logging_interval == "epoch":
            return
        # a comparison or two per batch; the learning rates are read only when they are logged
        step = trainer.fit_progress.batches_total if self._manual else trainer.global_step
        every = self._every
        # every micro batch of an accumulation window sees the same step: log once. As Lightning,
        # before the step that completes `every` steps (step + 1), and whenever the run is stopping
        if step == self._last_step_logged or every == 0 or ((step + 1) % every != 0 and not trainer.should_stop):
            return
        self._last_step_logged = step
        self._log(trainer, "step", step)

    def on_train_epoch_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if self.logging_interval != "step":
            self._log(trainer, "epoch", trainer.fit_progress.batches_total if self._manual else trainer.global_step)

    def _log(self, trainer: TrainerView, interval: str, step: int) -> None:
        stats: dict[str, float] = {}
        for name, group, sched_interval in self._groups(trainer):
            wanted = self.logging_interval or sched_interval
            if wanted == interval:
                stats[name] = float(group["lr"])
        if not stats:
            return
        if self.to_callback_metrics:
            device = trainer.strategy.root_device
            trainer.callback_metrics.update({k: torch.tensor(v, device=device) for k, v in stats.items()})
        if not trainer.is_global_zero:
            return
        for name, value in stats.items():
            self.lrs.setdefault(name, []).append(value)
        for logger in trainer.loggers:
            logger.log_metrics(stats, step=step)

    @staticmethod
    def _groups(trainer: TrainerView) -> list[tuple[str, dict[str, Any], str]]:
        """``(metric name, param group, interval)`` for every param group of every optimizer."""
        intervals: dict[int, str] = {}
        for config in trainer.lr_scheduler_configs:
            optimizer = getattr(config.scheduler, "optimizer", None)
            if optimizer is not None:
                intervals[id(optimizer)] = config.interval
        seen: dict[str, int] = {}
        out: list[tuple[str, dict[str, Any], str]] = []
        for optimizer in trainer.optimizers:
            base = f"lr-{type(optimizer).__name__}"
            count = seen.get(base, 0)
            seen[base] = count + 1
            name = base if count == 0 else f"{base}-{count}"
            groups = optimizer.param_groups
            for i, group in enumerate(groups):
                if len(groups) == 1:
                    key = name
                else:
                    key = f"{name}/{group.get('name') or f'pg{i + 1}'}"
                out.append((key, group, intervals.get(id(optimizer), "step")))
        return out
