"""`MetricLogger`: where logged values go: callback metrics, the loggers, the progress bar.

The loops hand it a `MetricStore` (the training epoch's, or one evaluation run's) and tell it
when to publish step values and epoch aggregates; it keeps what the Trainer's read-only
``callback_metrics``, ``logged_metrics`` and ``progress_bar_metrics`` return.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import torch

from trainer.metrics.metric_store import MetricStore

if TYPE_CHECKING:
    from trainer.contracts.protocols import LoggerView as Logger
    from trainer.contracts.internals import MetricStoreView, StrategyInternals as Strategy


class MetricLogger:
    """The metrics of one Trainer: the training store, the active store and what was published."""

    def __init__(self, loggers: Sequence[Logger]) -> None:
        self.loggers = loggers
        self.train = MetricStore(training=True)
        self.active: MetricStoreView = self.train  # where `self.log` records now: training, or the running evaluation
        self.last_loss: torch.Tensor | None = None  # the latest training loss (the progress bar's `loss`)
        self._callback_metrics: dict[str, torch.Tensor] = {}
        self._callback_view: dict[str, torch.Tensor] = {}  # what `callback_metrics` returns, for the run
        self._logged: dict[str, torch.Tensor] = {}
        self._eval_progress_bar_keys: list[str] = []
        self._eval_steps: dict[int, int] = {}  # evaluation batches published per loader this run (the loggers' step)

    # -- what the Trainer's properties return ---------------------------------------------------
    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """Latest training step values and every published aggregate (tensors).

        One dict for the whole run, as Lightning's: what a callback writes into it stays until the
        next run (Lightning's `LearningRateMonitor` writes its learning rates there, and so may users).
        """
        self._callback_view.update(self.train.current_values())
        self._callback_view.update(self._callback_metrics)
        return self._callback_view

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """What was last sent to the loggers, as tensors (the loggers get floats), as Lightning returns them."""
        return dict(self._logged)

    def progress_bar_metrics(self) -> dict[str, float]:
        """What the progress bar shows, read from the device now.

        During an evaluation run: that run's ``prog_bar=True`` values (latest batch, then the
        run's aggregate). Otherwise: the training loss as ``loss`` (unless the module shows its
        own ``loss`` or ``train_loss``), the training ``prog_bar=True`` values and the last
        evaluation's.
        """
        run = self.active
        if not run.training:
            values = {**run.current_values(), **run.aggregates}
            return {key: float(values[key]) for key in run.progress_bar_keys() if key in values}
        train_keys = self.train.progress_bar_keys()
        out: dict[str, float] = {}
        if self.last_loss is not None and not {"loss", "train_loss"} & set(train_keys):
            out["loss"] = float(self.last_loss)
        current = self.callback_metrics
        for key in [*train_keys, *self._eval_progress_bar_keys]:
            if key in current:
                out[key] = float(current[key])
        return out

    # -- the loops' calls -----------------------------------------------------------------------
    def start_run(self) -> None:
        """A new fit / validate / test / predict: the metrics shown are this run's only (as Lightning)."""
        self.train.reset()
        self.active = self.train
        self._callback_metrics, self._logged, self._eval_progress_bar_keys = {}, {}, []
        self._callback_view = {}
        self._eval_steps = {}

    def start_training_epoch(self) -> None:
        """A new training epoch: forget the last epoch's step values."""
        self.train.reset()
        self.active = self.train

    def start_evaluation(self, store: MetricStoreView) -> None:
        """An evaluation run records into ``store`` until `end_evaluation`."""
        self.active = store

    def end_evaluation(self) -> None:
        """Back to training (after a validation run inside fit)."""
        self.active = self.train

    def publish_step(self, strategy: Strategy, step: int, epoch: int) -> None:
        """Send the training step values to the loggers (at ``log_every_n_steps``)."""
        if self.loggers:
            self._send(self.train.step_values(strategy), strategy, step, epoch)

    def publish_eval_step(self, store: MetricStoreView, strategy: Strategy, dataloader_idx: int) -> None:
        """An evaluation batch's on-step values: into ``logged_metrics`` and to the loggers, at the
        loader's count of batches so far in this fit / validate / test (Lightning's evaluation step).

        Global rank 0's own values, unreduced: ranks may see different numbers of evaluation batches,
        so a collective per batch could wait forever (the run's aggregates are reduced exactly).
        """
        step = self._eval_steps.get(dataloader_idx, 0)
        self._eval_steps[dataloader_idx] = step + 1
        values = store.step_values(strategy, local=True) if strategy.is_global_zero else {}
        if not values:
            return
        self._logged.update({k: torch.as_tensor(v).detach().cpu() for k, v in values.items()})
        numbers = {k: float(v) for k, v in values.items()}
        for lg in self.loggers:
            lg.log_metrics(numbers, step=step)

    def preview_epoch(self, store: MetricStoreView, strategy: Strategy, sync_all: bool = False) -> None:
        """Put ``store``'s epoch aggregates so far into the callback metrics (for the epoch-end hooks).

        `publish_epoch` computes them again after the hooks (a reduction per epoch, not per step),
        so values the module logs in its epoch-end hook are included.
        """
        self._callback_metrics.update(store.epoch_values(strategy, sync_all=sync_all))

    def publish_epoch(
        self, store: MetricStoreView, strategy: Strategy, step: int, epoch: int, sync_all: bool = False
    ) -> dict[str, torch.Tensor]:
        """Publish ``store``'s epoch aggregates (callback metrics and loggers); return what the loggers
        get (Lightning's ``validate`` / ``test`` results: no ``logger=False`` value, no bare forked name).

        A training epoch's last step values join ``logged_metrics`` too, sent or not (a step between
        two ``log_every_n_steps``), as Lightning's do; the loggers get only what was sent.
        """
        unsent = store.step_values(strategy) if store.training and self.loggers else {}  # every rank: it may reduce
        values = store.finish_epoch(strategy, sync_all=sync_all)
        if strategy.is_global_zero:
            self._logged.update({k: torch.as_tensor(v).detach().cpu() for k, v in unsent.items()})
        self._callback_metrics.update(values)
        if not store.training:
            self._eval_progress_bar_keys = store.progress_bar_keys()
        hidden = store.hidden_from_loggers()
        logged = {k: v for k, v in values.items() if k not in hidden}
        if not store.training and strategy.is_global_zero:  # with or without loggers, as Lightning's evaluation
            self._logged.update({k: torch.as_tensor(v).detach().cpu() for k, v in logged.items()})
        self._send(logged, strategy, step, epoch)
        if self.loggers and strategy.is_global_zero:  # the epoch's records are on disk when its hooks end
            for lg in self.loggers:
                lg.save()
        return logged

    def restore(self, callback_metrics: Mapping[str, torch.Tensor], logged: Mapping[str, torch.Tensor]) -> None:
        """Take another process's published metrics (rank 0's, after a spawned run)."""
        self._callback_metrics = dict(callback_metrics)
        self._callback_view = {}
        self._logged = dict(logged)

    def _send(self, values: Mapping[str, torch.Tensor], strategy: Strategy, step: int, epoch: int) -> None:
        if not values or not self.loggers or not strategy.is_global_zero:
            return
        numbers = {k: float(v) for k, v in values.items()}
        numbers["epoch"] = float(epoch)  # every record: CSV rows group by it
        # read above: no new sync; "epoch" goes to the loggers only, as Lightning's
        self._logged.update({k: torch.as_tensor(v).detach().cpu() for k, v in values.items()})
        for lg in self.loggers:
            lg.log_metrics(numbers, step=step)

    def log_run_start(self, hparams: Mapping[str, Any], summary: str, strategy: Strategy, module: Any) -> None:
        """Hyperparameters, the module's graph and a one-line summary of the run's shape, once per fit."""
        if not self.loggers or not strategy.is_global_zero:
            return
        for lg in self.loggers:
            if hparams:
                lg.log_hyperparams(dict(hparams))
            lg.log_graph(module)
            lg.log_text("run_summary", summary)
