"""`TensorBoardLogger`: scalars, hyperparameters and the run summary as TensorBoard event files."""

from __future__ import annotations

import os
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Mapping

import torch

from callbacks._file_logger import _FileLogger
from callbacks._utils import _flat_metrics, _flatten_hparams
from trainer.contracts import storage
from trainer.contracts.arguments import check_bool, check_path
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


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
        log_graph: Add the module's graph (traced on ``module.example_input_array``) at the
            start of each ``fit``.
        default_hp_metric: ``log_hyperparams(params)`` without metrics also logs
            ``hp_metric=-1`` (at step 0) and writes the HPARAMS summary with it; ``False``:
            hyperparameters without metrics write no HPARAMS summary, as in Lightning.
        prefix: Put in front of every metric key, joined with ``-`` (``"train-loss"``).
        sub_dir: Write to ``version_N/<sub_dir>``; the default checkpoints stay in
            ``version_N/checkpoints``.
        **kwargs: Passed to ``SummaryWriter`` (``max_queue``, ``flush_secs``, ...).

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
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(save_dir=save_dir, name=name, version=version, prefix=prefix)
        check_bool("TensorBoardLogger(log_graph)", log_graph)
        check_bool("TensorBoardLogger(default_hp_metric)", default_hp_metric)
        check_path("TensorBoardLogger(sub_dir)", sub_dir)
        self._log_graph = log_graph
        self._default_hp_metric = default_hp_metric
        self._sub_dir = None if sub_dir is None else os.fspath(sub_dir)
        self._writer_kwargs = kwargs
        self._writer: SummaryWriter | None = None
        self._noop = _NoOpExperiment()
        # tag -> (step, value) last written: every record carries `epoch`, and a `validate()`
        # after `fit` repeats the last validation's values at the same step
        self._last_points: dict[str, tuple[int, float]] = {}

    @property
    def sub_dir(self) -> str | None:
        """The directory under ``version_N`` this logger writes to, if any."""
        return self._sub_dir

    @property
    def log_dir(self) -> str:
        """``<save_dir>/<name>/version_N[/<sub_dir>]``: where the event files go."""
        if self._sub_dir is None:
            return self.version_dir
        return storage.join(self.version_dir, self._sub_dir)

    @property
    def experiment(self) -> Any:
        """The ``SummaryWriter`` on global rank 0 (created on first use); a no-op object elsewhere."""
        if not self.is_global_zero:
            return self._noop
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter  # heavy: only when a run writes

            # a URL is written by TensorBoard's own file layer (fsspec or, for s3://, boto3)
            storage.makedirs(self.log_dir)
            self._writer = SummaryWriter(log_dir=self.log_dir, **self._writer_kwargs)
            weakref.finalize(self, self._writer.close)  # at the logger's end or the interpreter's
        return self._writer

    # -- Logger API -------------------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Add each metric as a scalar at ``step``, unless it repeats the tag's last point."""
        step = 0 if step is None else step  # the Trainer always gives one; a direct call may not
        if not self.is_global_zero:
            return
        writer = None  # `experiment`, read once per call
        for tag, number in _flat_metrics(metrics, self._prefix).items():
            point = (int(step), number)
            if self._last_points.get(tag) != point:
                if writer is None:
                    writer = self.experiment
                writer.add_scalar(tag, number, global_step=step)
                self._last_points[tag] = point

    def log_hyperparams(self, params: Any, metrics: Mapping[str, float] | float | None = None) -> None:
        """Record ``params`` for TensorBoard's HParams tab (nested dicts are flattened with ``/``).

        ``metrics`` (a dict, or one number logged as ``hp_metric``) are logged at step 0 and shown
        with the hyperparameters; without them see ``default_hp_metric``.
        """
        if not self.is_global_zero:
            return
        if metrics is None:
            metrics = {"hp_metric": -1} if self._default_hp_metric else {}
        elif not isinstance(metrics, Mapping):
            metrics = {"hp_metric": metrics}
        if not metrics:  # TensorBoard shows no hyperparameters without a metric: Lightning writes none
            return
        self.log_metrics(metrics, step=0)
        from torch.utils.tensorboard.summary import hparams

        flat = _flatten_hparams(self._hparams_to_plain(params))
        experiment, session_start, session_end = hparams(flat, dict(_flat_metrics(metrics, self._prefix)))
        file_writer = self.experiment._get_file_writer()
        for summary in (experiment, session_start, session_end):
            file_writer.add_summary(summary)

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Add ``model``'s graph, traced on ``input_array`` (default ``model.example_input_array``).

        Does nothing unless ``log_graph=True``; warns when there is no input to trace.
        """
        if not self._log_graph or not self.is_global_zero:
            return
        inputs = getattr(model, "example_input_array", None) if input_array is None else input_array
        if not isinstance(inputs, (torch.Tensor, tuple)):
            warnings.warn(
                "TensorBoardLogger(log_graph=True) could not log the graph: set `example_input_array` on the "
                f"module (a tensor or a tuple of forward's arguments), got {type(inputs).__name__}.",
                stacklevel=user_stacklevel(),
            )
            return
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        on_device = tuple(v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs) \
            if isinstance(inputs, tuple) else inputs.to(device)
        was_training = model.training
        try:
            self.experiment.add_graph(model, on_device)
        finally:
            model.train(was_training)

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

    def _after_failure(self) -> None:
        self._close()

    def _flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def _close(self) -> None:
        # after an exception: a later call opens a new event file in the same directory
        if self._writer is not None:
            self._writer.close()
            self._writer = None
