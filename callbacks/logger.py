"""The `Logger` base class: a callback that receives metrics from the Trainer."""
from __future__ import annotations

from typing import Any

from trainer.contracts.rank import current_global_rank
from callbacks.callback import Callback


class Logger(Callback):
    """Base class of every logger.

    The Trainer calls ``log_metrics``, ``log_hyperparams``, ``log_graph`` and ``log_text`` on global rank 0
    only; a logger must create no files on other ranks.
    """

    _rank: int | None = None  # the Trainer's global rank, set by a subclass's ``setup``

    @property
    def is_global_zero(self) -> bool:
        """Whether this process writes: global rank 0 (before ``setup``: from the launch environment)."""
        return (self._rank if self._rank is not None else current_global_rank()) == 0

    @property
    def log_dir(self) -> str | None:
        """Directory this logger writes to (``None`` if it writes no files)."""
        return None

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Record scalar ``metrics`` at ``step`` (the optimizer step count; the Trainer always gives one)."""
        raise NotImplementedError

    def log_hyperparams(self, params: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        """Record the run's hyperparameters."""

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Called on global rank 0 after ``checkpoint_callback`` (a `ModelCheckpoint`) wrote a file,
        as Lightning calls it (a link to the newest file is no write)."""

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Record the module's computation graph (called at the start of each ``fit``)."""

    def log_text(self, tag: str, text: str) -> None:
        """Record a block of text (e.g. the run summary)."""

    def save(self) -> None:
        """Write buffered records out (the Trainer calls it after each epoch's or run's metrics)."""

    def finalize(self, status: str) -> None:
        """Flush and close; ``status`` is ``"success"`` or ``"failed"``."""

    # -- for subclasses ---------------------------------------------------------------------
    def _hparams_to_plain(self, params: Any) -> dict[str, Any]:
        """``params`` (a dict, Namespace or object with ``__dict__``) as a plain dict."""
        if params is None:
            return {}
        if not isinstance(params, dict):
            params = dict(vars(params)) if hasattr(params, "__dict__") else dict(params)
        return dict(params)
