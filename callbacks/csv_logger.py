"""`CSVLogger`: metrics to ``metrics.csv`` and hyperparameters to ``hparams.json``."""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any, Mapping

from callbacks._file_logger import _FileLogger
from callbacks._utils import _flat_metrics
from trainer.contracts.arguments import check_int, hint_misspelled_arguments
from trainer.contracts import storage


class CSVLogger(_FileLogger):
    """Writes ``metrics.csv`` (one row per ``log_metrics`` call) under ``<save_dir>/<name>/version_N``.

    Args:
        save_dir: Root directory; defaults to the Trainer's ``default_root_dir``.
        name: Experiment directory under ``save_dir``.
        version: ``None`` picks the next free ``version_N``; an int or a str as in
            ``TensorBoardLogger``.
        prefix: Put in front of every metric key, joined with ``-`` (``"train-loss"``).
        flush_logs_every_n_steps: Buffered rows are written out when a row's ``step + 1`` is a
            multiple of it (Lightning's rule); the buffer is also written at every epoch end, on
            teardown and on an exception.

    The first column is ``step``; the others are every metric key seen so far, in order of first
    appearance. When a new key appears, the file is rewritten with the union of the columns
    (earlier rows get empty cells), as Lightning does. Global rank 0 only.
    """

    METRICS_FILE = "metrics.csv"
    HPARAMS_FILE = "hparams.json"

    @hint_misspelled_arguments
    def __init__(
        self,
        save_dir: str | os.PathLike[str] | None = None,
        name: str | None = "logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        super().__init__(save_dir=save_dir, name=name, version=version, prefix=prefix)
        check_int("CSVLogger(flush_logs_every_n_steps)", flush_logs_every_n_steps, 1)
        self._flush_every = flush_logs_every_n_steps
        self._rows: list[dict[str, Any]] = []
        self._columns: list[str] = []  # columns in the file on disk
        self._hparams: dict[str, Any] = {}

    @property
    def metrics_file_path(self) -> str:
        """Path of ``metrics.csv``."""
        return storage.join(self.log_dir, self.METRICS_FILE)

    # -- Logger API -------------------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Buffer one row ``{"step": step, **metrics}`` (no step: the count of rows so far, as Lightning's)."""
        step = len(self._rows) if step is None else step
        if not self.is_global_zero:
            return
        self._rows.append({"step": int(step), **_flat_metrics(metrics, self._prefix)})
        if (int(step) + 1) % self._flush_every == 0:
            self.save()

    def log_hyperparams(self, params: Any) -> None:
        """Merge ``params`` into ``hparams.json`` (values JSON cannot hold are written as strings)."""
        if not self.is_global_zero:
            return
        self._hparams.update(self._hparams_to_plain(params))
        text = json.dumps(self._hparams, indent=2, sort_keys=True, default=str)
        storage.write_bytes(storage.join(self.log_dir, self.HPARAMS_FILE), text.encode("utf-8"))

    def log_text(self, tag: str, text: str) -> None:
        """Write ``text`` to ``<log_dir>/<tag>.txt``."""
        if not self.is_global_zero:
            return
        path = storage.join(self.log_dir, f"{tag.replace(os.sep, '_')}.txt")
        storage.write_bytes(path, (text if text.endswith("\n") else text + "\n").encode("utf-8"))

    def save(self) -> None:
        """Write buffered rows to ``metrics.csv``."""
        if not self._rows or not self.is_global_zero:
            return
        new_columns = list(self._columns)
        for row in self._rows:
            new_columns.extend(key for key in row if key not in new_columns)
        storage.makedirs(self.log_dir)
        path = self.metrics_file_path
        # an object store cannot append: the file is rewritten whole
        if new_columns != self._columns or storage.is_url(path) or not storage.exists(path):
            self._rewrite(path, new_columns)
        else:
            with open(path, "a", newline="", encoding="utf-8") as f:
                csv.DictWriter(f, fieldnames=self._columns).writerows(self._rows)
        self._rows = []

    def finalize(self, status: str) -> None:
        """Write any buffered rows."""
        self.save()

    def _rewrite(self, path: str, columns: list[str]) -> None:
        """Rewrite the file with ``columns`` as header: old rows first, then the buffered ones."""
        old_rows: list[dict[str, str]] = []
        if self._columns and storage.exists(path):
            text = storage.read_bytes(path).decode("utf-8")
            old_rows = list(csv.DictReader(io.StringIO(text, newline="")))
        out = io.StringIO(newline="")
        writer = csv.DictWriter(out, fieldnames=columns)
        writer.writeheader()
        writer.writerows(old_rows)
        writer.writerows(self._rows)
        # written atomically: a crash mid-rewrite must not lose the rows already on disk
        storage.write_bytes(path, out.getvalue().encode("utf-8"))
        self._columns = columns
