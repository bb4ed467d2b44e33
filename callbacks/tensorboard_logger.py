"""`TensorBoardLogger`: scalars, hyperparameters and the run summary as TensorBoard event files."""

from __future__ import annotations

import os
import weakref
from typing import TYPE_CHECKING, Any, Mapping

from callbacks._file_logger import _FileLogger
from callbacks._utils import _flatten_hparams, _to_float
from trainer.contracts import storage

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from trainer.contracts.protocols import ModuleView, TrainerView


class _NoOpExperiment:
    """Stands in for the ``SummaryWriter`` on ranks that must not write: every call does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None

    def __bool__(self) -> bool:
        return False


class TensorBoardLogger(_FileLogger):
    """Writes TensorBoard event files to ``<save_dir>/<name>/version_N`` (global rank 0 only).

    Args:
        save_dir: Root directory; defaults to the Trainer's ``default_root_dir``.
        name: Experiment directory under ``save_dir`` (``""`` or ``None``: none).
        version: ``None`` picks the next free ``version_N``; an int gives ``version_<int>``; a
            str is used as the directory name.

    A Trainer's calls (``fit``, then ``validate``/``test``) write into one event file, which
    stays open (flushed at the end of each call) until an exception or the logger's end: a new
    file per call could sort before the earlier ones (TensorBoard names files by the second and a
    per-process counter, so ``.10`` sorts before ``.9``) and show later points first. Hyperparameters are written into the
    event file (not ``add_hparams``, which makes a sub-run per call). A point equal to the last
    one written for its tag (same step, same value) is not written again. View with
    ``tensorboard --logdir <save_dir>/<name>``.
    """

    def __init__(
        self,
        save_dir: str | os.PathLike[str] | None = None,
        name: str | None = "logs",
        version: int | str | None = None,
    ) -> None:
        super().__init__(save_dir=save_dir, name=name, version=version)
        self._writer: SummaryWriter | None = None
        self._noop = _NoOpExperiment()
        # tag -> (step, value) last written: every record carries `epoch`, and a `validate()`
        # after `fit` repeats the last validation's values at the same step
        self._last_points: dict[str, tuple[int, float]] = {}

    @property
    def experiment(self) -> Any:
        """The ``SummaryWriter`` on global rank 0 (created on first use); a no-op object elsewhere."""
        if not self.is_global_zero:
            return self._noop
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter  # heavy: only when a run writes

            # a URL is written by TensorBoard's own file layer (fsspec or, for s3://, boto3)
            storage.makedirs(self.log_dir)
            self._writer = SummaryWriter(log_dir=self.log_dir)
            weakref.finalize(self, self._writer.close)  # at the logger's end or the interpreter's
        return self._writer

    # -- Logger API -------------------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Add each metric as a scalar at ``step``, unless it repeats the tag's last point."""
        if not self.is_global_zero:
            return
        points: dict[str, float] = {}
        for key, value in metrics.items():
            if isinstance(value, Mapping):  # a dict of scalars shares one chart
                points.update({f"{key}/{sub_key}": _to_float(v) for sub_key, v in value.items()})
            else:
                points[key] = _to_float(value)
        for tag, number in points.items():
            point = (int(step), number)
            if self._last_points.get(tag) != point:
                self.experiment.add_scalar(tag, number, global_step=step)
                self._last_points[tag] = point

    def log_hyperparams(self, params: Any, metrics: Mapping[str, float] | None = None) -> None:
        """Record ``params`` for TensorBoard's HParams tab (nested dicts are flattened with ``/``)."""
        if not self.is_global_zero:
            return
        flat = _flatten_hparams(self._hparams_to_plain(params))
        if not flat:
            return
        from torch.utils.tensorboard.summary import hparams

        experiment, session_start, session_end = hparams(flat, dict(metrics or {}))
        file_writer = self.experiment._get_file_writer()
        for summary in (experiment, session_start, session_end):
            file_writer.add_summary(summary)

    def log_text(self, tag: str, text: str) -> None:
        """Add ``text`` under ``tag`` (shown in the Text tab; rendered as Markdown)."""
        if not self.is_global_zero:
            return
        # Markdown joins single newlines: keep the summary's lines apart
        self.experiment.add_text(tag, text.replace("\n", "  \n"), global_step=0)

    def finalize(self, status: str) -> None:
        """Flush the event file; it stays open for a later ``validate``/``test`` of the Trainer."""
        self._flush()

    def state_dict(self) -> dict[str, Any]:
        """The last point of each tag, with the directory it is in.

        Under ``ddp_spawn`` each call runs in new processes: the launching process gets rank 0's
        state back, so the next call's workers know which points the directory already has.
        """
        if not self._last_points:
            return {}
        return {"log_dir": self.log_dir, "last_points": {t: list(p) for t, p in self._last_points.items()}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the last points back, if they are this logger's directory's (not another run's)."""
        if state_dict.get("log_dir") == self.log_dir:
            points = state_dict["last_points"]
            self._last_points = {tag: (int(step), float(value)) for tag, (step, value) in points.items()}

    def save(self) -> None:
        """Flush the event file (after each epoch's metrics: a live TensorBoard shows them)."""
        self._flush()

    # -- hooks ------------------------------------------------------------------------------
    # Loggers run before the other callbacks: what was logged so far is on disk for their
    # epoch-end hooks; the epoch aggregates follow with `save()` once they are published.
    def on_train_epoch_end(self, trainer: TrainerView, module: ModuleView) -> None:
        self._flush()

    def on_validation_epoch_end(self, trainer: TrainerView, module: ModuleView) -> None:
        self._flush()

    def on_exception(self, trainer: TrainerView, module: ModuleView, exception: BaseException) -> None:
        self._close()

    def teardown(self, trainer: TrainerView, module: ModuleView, stage: str) -> None:
        self._flush()

    def _flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def _close(self) -> None:
        # after an exception: a later call opens a new event file in the same directory
        if self._writer is not None:
            self._writer.close()
            self._writer = None
