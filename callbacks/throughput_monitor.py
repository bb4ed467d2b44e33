"""`ThroughputMonitor`: training samples/s, optimizer steps/s and time spent waiting for data."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from callbacks.callback import Callback
from trainer.contracts.arguments import check_int, hint_misspelled_arguments

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


class ThroughputMonitor(Callback):
    """Logs, every ``log_every_n_steps`` optimizer steps, over the interval since the last log:

    - ``throughput/samples_per_sec``: global samples per second (this rank's samples times
      ``world_size``: the distributed sampler gives every rank equally many),
    - ``throughput/steps_per_sec``: optimizer steps per second,
    - ``throughput/data_wait_ms``: mean time per micro batch between the end of one batch
      (``on_train_batch_end``) and the start of the next: the data pipeline plus the loop's own
      work between batches,
    - ``throughput/data_wait_fraction``: that waiting as a fraction of the interval's time.

    Time spent in validation is left out. Measured with the host clock, no device sync: the
    figures are exact over intervals of several steps. Logged through the Trainer's loggers on
    global rank 0.

    Args:
        log_every_n_steps: Logging cadence; default: the Trainer's ``log_every_n_steps``.
    """

    @hint_misspelled_arguments
    def __init__(self, log_every_n_steps: int | None = None) -> None:
        expected = "None or an int >= 1"
        check_int("ThroughputMonitor(log_every_n_steps)", log_every_n_steps, 1, allow_none=True)
        self.log_every_n_steps = log_every_n_steps
        self.last_metrics: dict[str, float] = {}
        self._reset_interval(time.perf_counter(), step=0)
        self._batch_end: float | None = None
        self._validation_start: float | None = None

    def _reset_interval(self, now: float, step: int) -> None:
        self._interval_start = now
        self._interval_step = step
        self._samples = 0
        self._batches = 0
        self._wait = 0.0
        self._excluded = 0.0

    # -- hooks ------------------------------------------------------------------------------
    def on_train_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self._reset_interval(time.perf_counter(), trainer.global_step)
        self._batch_end = None

    def on_train_epoch_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        # the first batch's wait includes creating the epoch's data iterator (worker start-up)
        self._batch_end = time.perf_counter()

    def on_train_batch_start(self, trainer: TrainerView, pl_module: ModuleView, batch: Any, batch_idx: int) -> None:
        if self._batch_end is not None:
            self._wait += time.perf_counter() - self._batch_end
            self._batch_end = None

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: ModuleView, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        size = trainer.train_batch_size  # the size `self.log` weights this batch by
        self._samples += size if size is not None else trainer.micro_batch_size or 0
        self._batches += 1
        step = trainer.global_step
        n = self.log_every_n_steps or trainer.log_every_n_steps
        now = time.perf_counter()
        if step > self._interval_step and step % n == 0:
            self._log(trainer, now, step)
        self._batch_end = time.perf_counter()

    def on_validation_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self._validation_start = time.perf_counter()

    def on_validation_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if self._validation_start is not None:
            self._excluded += time.perf_counter() - self._validation_start
            self._validation_start = None
        if self._batch_end is not None:
            self._batch_end = time.perf_counter()  # validation is not waiting for training data

    # -- internals --------------------------------------------------------------------------
    def _log(self, trainer: TrainerView, now: float, step: int) -> None:
        elapsed = max(now - self._interval_start - self._excluded, 1e-9)
        steps = step - self._interval_step
        metrics = {
            "throughput/samples_per_sec": self._samples * trainer.world_size / elapsed,
            "throughput/steps_per_sec": steps / elapsed,
            "throughput/data_wait_ms": 1000.0 * self._wait / max(self._batches, 1),
            "throughput/data_wait_fraction": min(self._wait / elapsed, 1.0),
        }
        self.last_metrics = metrics
        self._reset_interval(now, step)
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)
