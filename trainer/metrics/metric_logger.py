"""`MetricLogger`: where logged values go: callback metrics, the loggers, the progress bar.

The loops hand it a `MetricStore` (the training epoch's, or one evaluation run's) and tell it
when to publish step values and epoch aggregates; it keeps what the Trainer's read-only
``callback_metrics``, ``logged_metrics`` and ``progress_bar_metrics`` return.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import torch

from trainer.metrics.metric_store import MetricStore
from trainer.strategies.strategy import lightning_rules

if TYPE_CHECKING:
    from trainer.contracts.protocols import LoggerView as Logger
    from trainer.contracts.internals import MetricStoreView, StrategyInternals as Strategy


class MetricLogger:
    """The metrics of one Trainer: the training store, the active store and what was shown.

    The Trainer's ``callback_metrics``, ``logged_metrics`` and ``progress_bar_metrics`` work as
    Lightning's: each is one dict for the run that a read updates from the active store's view
    (`MetricStore.view`: step values within the batches, aggregates after them). The loops take in
    a view eagerly only where Lightning's would otherwise miss it (a switch of store or of phase),
    so nothing is computed per step that no one reads.
    """

    def __init__(self, loggers: Sequence[Logger]) -> None:
        self.loggers = loggers
        self.train = MetricStore(training=True)
        self.active: MetricStoreView = self.train  # where `self.log` records now: training, or the running evaluation
        self.last_loss: torch.Tensor | None = None  # the latest training loss
        self._shown: dict[str, dict[str, Any]] = {"callback": {}, "log": {}, "pbar": {}}
        self._eval_steps: dict[int, int] = {}  # evaluation batches published per loader this run (the loggers' step)
        self._step_sync: Callable[[torch.Tensor, str], torch.Tensor] | None = None  # this run's (`start_run`)

    # -- what the Trainer's properties return ---------------------------------------------------
    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """The run's callback metrics, updated with the active store's view (tensors).

        One dict for the whole run, as Lightning's: what a callback writes into it stays until the
        next run (Lightning's `LearningRateMonitor` writes its learning rates there, and so may users).
        """
        return self._read("callback")

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """Every ``logger=True`` value as Lightning's connector holds it (tensors), loggers or none."""
        return self._read("log")

    def progress_bar_metrics(self) -> dict[str, float]:
        """The ``prog_bar=True`` values (numbers read from the device now), as Lightning's: the last
        ones of each name this run, kept across the validation runs inside fit."""
        return self._read("pbar")

    def _read(self, kind: str) -> dict[str, Any]:
        shown = self._shown[kind]
        shown.update(self.active.view(kind))
        return shown

    def _take_in(self, store: MetricStoreView) -> None:
        """Lightning's eager update of its three dicts, where a later read could no longer see ``store``'s view."""
        for kind, shown in self._shown.items():
            shown.update(store.view(kind))

    # -- the loops' calls -----------------------------------------------------------------------
    def start_run(self, strategy: Strategy) -> None:
        """A new fit / validate / test / predict: the metrics shown are this run's only (as Lightning).

        Under the runner on several ranks every store of the run reduces a ``sync_dist`` step value as it
        is logged, as Lightning's (``strategy.reduce``); Lockstep's own reduces it when it is published."""
        rules = strategy.world_size > 1 and lightning_rules()
        self._step_sync = self.train.step_sync = strategy.reduce if rules else None
        self.train.reset()
        self.active = self.train
        self.clear_shown()
        self._eval_steps = {}

    def clear_shown(self) -> None:
        """Forget what the three dicts hold (Lightning's, around the sanity check)."""
        self._shown = {"callback": {}, "log": {}, "pbar": {}}

    def start_training_epoch(self) -> None:
        """A new training epoch: forget the last epoch's step values."""
        self.train.reset()
        self.active = self.train

    def start_evaluation(self, store: MetricStoreView) -> None:
        """An evaluation run records into ``store`` until `end_evaluation`."""
        self._take_in(self.active)  # the last training batch's values, as Lightning's batch end takes them
        store.step_sync = self._step_sync
        self.active = store

    def end_evaluation(self) -> None:
        """Back to training (after a validation run inside fit)."""
        self._take_in(self.active)
        self.active = self.train

    def publish_step(self, strategy: Strategy, step: int, epoch: int) -> None:
        """Send the training step values to the loggers (at ``log_every_n_steps``)."""
        if self.loggers:
            self._send(self.train.step_values(strategy), strategy, step, epoch)

    def publish_eval_step(self, store: MetricStoreView, strategy: Strategy, dataloader_idx: int) -> None:
        """An evaluation batch's on-step values to the loggers, at the loader's count of batches so far
        in this fit / validate / test (Lightning's evaluation step).

        Global rank 0's own values, unreduced: ranks may see different numbers of evaluation batches,
        so a collective per batch could wait forever (the run's aggregates are reduced exactly).
        """
        step = self._eval_steps.get(dataloader_idx, 0)
        self._eval_steps[dataloader_idx] = step + 1
        if not self.loggers or not strategy.is_global_zero:
            return
        values = store.step_values(strategy, local=True)
        if not values:
            return
        numbers = {k: float(v) for k, v in values.items()}
        for lg in self.loggers:
            lg.log_metrics(numbers, step=step)

    def preview_epoch(self, store: MetricStoreView, strategy: Strategy, sync_all: bool = False) -> None:
        """The end of ``store``'s batches: its views show epoch aggregates from here (for the epoch-end hooks).

        `publish_epoch` computes them again after the hooks (a reduction per epoch, not per step),
        so values the module logs in its epoch-end hook are included.
        """
        if store.stepping:
            self._take_in(store)  # the last batch's step values stay shown, as Lightning's
        store.epoch_values(strategy, sync_all=sync_all)
        store.stepping = False

    def finish_unpublished(self, store: MetricStoreView, strategy: Strategy, sync_all: bool = False) -> dict[str, torch.Tensor]:
        """The sanity check's end: its aggregates are shown (until `clear_shown`), never logged."""
        values = store.finish_epoch(strategy, sync_all=sync_all)
        self._take_in(store)
        return values

    def publish_epoch(
        self, store: MetricStoreView, strategy: Strategy, step: int, epoch: int, sync_all: bool = False
    ) -> dict[str, torch.Tensor]:
        """Publish ``store``'s epoch aggregates (the three dicts and the loggers); return what the loggers
        get (Lightning's ``validate`` / ``test`` results: no ``logger=False`` value, no bare forked name)."""
        values = store.finish_epoch(strategy, sync_all=sync_all)
        self._take_in(store)
        hidden = store.hidden_from_loggers()
        logged = {k: v for k, v in values.items() if k not in hidden}
        self._send(logged, strategy, step, epoch)
        if self.loggers and strategy.is_global_zero:  # the epoch's records are on disk when its hooks end
            for lg in self.loggers:
                lg.save()
        return logged

    def restore(self, callback_metrics: Mapping[str, torch.Tensor], logged: Mapping[str, torch.Tensor]) -> None:
        """Take another process's published metrics (rank 0's, after a spawned run)."""
        self.train.reset()
        self.active = self.train
        self._shown = {"callback": dict(callback_metrics), "log": dict(logged), "pbar": {}}

    def _send(self, values: Mapping[str, torch.Tensor], strategy: Strategy, step: int, epoch: int) -> None:
        if not values or not self.loggers or not strategy.is_global_zero:
            return
        numbers = {k: float(v) for k, v in values.items()}
        numbers["epoch"] = float(epoch)  # every record: CSV rows group by it; the loggers' only, as Lightning's
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
