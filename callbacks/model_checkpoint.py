"""`ModelCheckpoint`: save the best k checkpoints by a monitored metric, and/or the latest."""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import time
from typing import TYPE_CHECKING, Any, Mapping

from callbacks._checkpoint_arguments import check_arguments
from callbacks._checkpoint_files import (
    DirectoryClaim, TemplateNames, checkpoint_name, default_dirpath, is_inside, link, tell_loggers, unique_path,
    writable_dirpath, yaml_text,
)
from callbacks._utils import (
    _decided_on_rank_zero, _monitor_value, _rank_zero_print, _rank_zero_warn, _to_float, _worst, _ValidationMetricTracker,
)
from callbacks.checkpoint import Checkpoint
from callbacks.checkpoint_policy import Policy, Save, TopK, decide, loaded_books, step_due, time_due
from trainer.contracts import run_lock, storage
from trainer.contracts.arguments import hint_misspelled_arguments

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


# What `ModelCheckpoint.state_dict` saves of its public attributes, in this order (then the step of its last save).
_SAVED = (
    "monitor", "mode", "dirpath", "best_model_path", "best_model_score", "current_score",
    "best_k_models", "kth_best_model_path", "kth_value", "last_model_path",
)


def _book_entry(name: str, doc: str) -> Any:
    """One of Lightning's names of `ModelCheckpoint`: a view of one entry of its book (`TopK`);
    an assignment (some libraries set ``best_model_path``, ``best_k_models``...) writes the book."""

    def read(self: ModelCheckpoint) -> Any:
        return getattr(self._book, name)

    def write(self: ModelCheckpoint, value: Any) -> None:
        self._book = dataclasses.replace(self._book, **{name: value})

    return property(read, write, doc=doc)


class ModelCheckpoint(Checkpoint):
    """Saves checkpoints during ``fit`` and keeps the ``save_top_k`` best ones.

    Lightning's arguments, names and saving schedule.

    Args:
        dirpath: Directory for the checkpoints. Default: ``<trainer.log_dir>/checkpoints``, or
            ``<default_root_dir>/checkpoints`` when the Trainer has no logger.
        filename: Template of the file name without ``.ckpt`` (default ``"{epoch}-{step}"``).
            ``{epoch}``, ``{step}`` and any logged metric can appear, with an optional format spec:
            ``"{epoch}-{val_loss:.2f}"`` gives ``epoch=3-val_loss=0.12.ckpt``. A ``/`` in a metric
            name (``{val/loss}``) makes a sub-directory, as in Lightning.
        monitor: Metric (a key of ``trainer.callback_metrics``) that ranks checkpoints. ``None``:
            the latest checkpoint is the best one.
        verbose: Print a line for each save decision (global rank 0).
        save_last: Also write ``last.ckpt`` whenever a checkpoint is saved (``True``), or make it
            a symbolic link to the newest checkpoint (``"link"``, local directories only).
        save_top_k: How many checkpoints to keep (``-1``: all, ``0``: none but ``last``). Files
            that fall out of the top k are deleted. Without ``monitor`` only -1, 0 and 1 make sense.
        save_on_exception: Save a checkpoint when fit raises (from ``on_exception``).
        save_weights_only: Write only the weights, the position and the hyperparameters: the file
            loads with ``load_from_checkpoint`` (and ``validate(ckpt_path=...)``) but cannot resume
            a fit (``fit(ckpt_path=...)`` refuses it).
        mode: ``"min"`` or ``"max"``: which direction of ``monitor`` is better.
        auto_insert_metric_name: Write ``name=`` before each value in the file name.
        every_n_train_steps: Save every this many optimizer steps (``None``/``0``: off).
        train_time_interval: Save when this much time passed since the last save by time
            (checked after each training batch; global rank 0's clock decides).
        every_n_epochs: Save every this many epochs (``0``: off). When none of the three
            schedules is given, every epoch; they exclude each other.
        save_on_train_epoch_end: Force saving at train epoch end (``True``) or at validation end
            (``False``). ``None``: at validation end when ``monitor`` is a validation metric,
            otherwise at train epoch end.
        enable_version_counter: A run never overwrites a checkpoint it did not write: with
            ``True`` a name taken by an earlier run's file gets a ``-v<n>`` suffix
            (``last-v1.ckpt``); with ``False`` a fit whose directory holds another run's
            checkpoints refuses to start, naming them. A run resumed from a checkpoint goes on
            writing the files it wrote before.

    One run at a time per directory (global rank 0 holds ``.lockstep-run.lock`` for the whole
    fit; a second live run is refused with `RunLockedError`); atomic writes; under ``strategy="fsdp"``
    each checkpoint is a directory of every rank's shards. Global rank 0 decides (which file, which
    to delete) and broadcasts it: log ``monitor`` with ``sync_dist=True`` to rank by the global
    value. The details: docs/checkpointing.md.
    """

    role = "checkpoint"
    monitors_metrics = True

    CHECKPOINT_NAME_LAST = "last"
    FILE_EXTENSION = ".ckpt"

    @hint_misspelled_arguments
    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: bool | str | None = None,
        save_top_k: int = 1,
        save_on_exception: bool = False,
        save_weights_only: bool = False,
        mode: str = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: int | None = None,
        train_time_interval: datetime.timedelta | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
    ) -> None:
        flags = {
            "auto_insert_metric_name": auto_insert_metric_name, "verbose": verbose, "save_weights_only": save_weights_only,
            "save_on_exception": save_on_exception, "enable_version_counter": enable_version_counter,
            "save_on_train_epoch_end": save_on_train_epoch_end,
        }
        schedule = (every_n_train_steps, every_n_epochs, train_time_interval)
        self.dirpath: str | None
        self.dirpath, every_n_epochs = check_arguments(dirpath, filename, monitor, mode, save_top_k, save_last, schedule, flags)
        self.filename = filename or "{epoch}-{step}"
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.save_on_exception = save_on_exception
        self.save_weights_only = save_weights_only
        self.every_n_train_steps = every_n_train_steps or 0
        self.every_n_epochs = every_n_epochs or 0
        self.train_time_interval = train_time_interval
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.auto_insert_metric_name = auto_insert_metric_name
        self.verbose = verbose
        self.enable_version_counter = enable_version_counter

        # the book of kept checkpoints, once: Lightning's names below are views of it
        self._book = TopK(kth_value=_worst(mode))
        self._last_global_step_saved = -1
        self._last_checkpoint_saved = ""  # the newest file written: what save_last="link" points to
        self._last_time_checked: float | None = None
        self._missing_fields_warned: set[str] = set()
        self._in_fit = False
        self._pending_state: dict[str, Any] | None = None
        self._claim = DirectoryClaim()  # its directory's lock, held during fit (global rank 0)
        self._tracker = _ValidationMetricTracker(monitor) if monitor is not None else None

    # Lightning's names for the book: views of it, assignable as in Lightning (a write goes to the book)
    best_k_models: dict[str, float] = _book_entry("best_k_models", "The kept checkpoints and their scores.")
    best_model_path: str = _book_entry("best_model_path", "The best kept checkpoint (without ``monitor``: the latest).")
    best_model_score: float | None = _book_entry("best_model_score", "The best kept checkpoint's score.")
    current_score: float | None = _book_entry("current_score", "The monitored value at the latest save.")
    kth_best_model_path: str = _book_entry("kth_best_model_path", "The worst kept checkpoint: replaced next.")
    kth_value: float = _book_entry("kth_value", "The worst kept checkpoint's score: a new one must beat it.")
    last_model_path: str = _book_entry("last_model_path", "The ``last.ckpt`` this callback wrote (or resumed).")

    @property
    def state_key(self) -> str:
        # two checkpoint callbacks with different settings must not share one state entry
        return f"ModelCheckpoint{{monitor={self.monitor!r}, mode={self.mode!r}, filename={self.filename!r}}}"

    @property
    def last_save(self) -> tuple[int, str]:
        """The global step and file of the newest checkpoint this callback wrote (``(-1, "")``
        before the first of a fit), the same on every rank: rank 0 decides, every rank applies it."""
        return self._last_global_step_saved, self._last_checkpoint_saved

    # -- hooks ------------------------------------------------------------------------------
    def on_fit_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        # after every `setup`: the logger has fixed its version, so `trainer.log_dir` is final
        self._in_fit = True
        if self.dirpath is None:
            self.dirpath = default_dirpath(trainer)
        if self.save_last == "link" and storage.is_url(self.dirpath):
            raise ValueError(f"ModelCheckpoint(save_last='link') needs a local dirpath, got {self.dirpath!r}.")
        self.dirpath = writable_dirpath(trainer, self.dirpath)
        if self._pending_state is not None:
            self._apply_state(self._pending_state)
            self._pending_state = None
        refusal = self._claim_directory(trainer) if trainer.is_global_zero else None
        if trainer.world_size > 1:
            refusal = trainer.strategy.broadcast(refusal, src=0)
        if refusal is not None:
            kind, message = refusal
            raise (run_lock.RunLockedError if kind == "locked" else FileExistsError)(message)

    def _claim_directory(self, trainer: TrainerView) -> tuple[str, str] | None:
        """Global rank 0: take the run lock, and refuse or warn about an earlier run's files."""
        assert self.dirpath is not None
        siblings = [cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath == self.dirpath]
        mine = set().union(*(cb._files() for cb in [self, *siblings]))
        return self._claim.claim(self.dirpath, trainer, mine, self.FILE_EXTENSION, self.enable_version_counter)

    def _files(self) -> set[str]:
        """The files this callback wrote (or resumed), its state not applied yet included."""
        state = self._pending_state or {}
        pending = set(state.get("best_k_models", {})) | {state.get("last_model_path", "")} if state else set()
        return (set(self.best_k_models) | {self.last_model_path} | pending) - {""}

    def on_fit_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self._in_fit = False

    def teardown(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        self._in_fit = False
        if stage == "fit":
            self._claim.release()
            # a later `fit` counts steps from 0 again (or from its checkpoint, restored before it)
            self._last_global_step_saved = -1

    def on_train_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self._last_time_checked = time.monotonic()

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: ModuleView, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self.every_n_train_steps and self.train_time_interval is None:  # no schedule within an epoch
            return
        step = trainer.global_step
        # with accumulation several micro batches share one global step: save once
        if not self._in_fit or step == 0 or step == self._last_global_step_saved:
            return
        due_by_steps = step_due(step, self.every_n_train_steps)
        due_by_time = False
        if self.train_time_interval is not None:
            now = time.monotonic()
            due_by_time = time_due(now, self._last_time_checked, self.train_time_interval.total_seconds())
            if trainer.world_size > 1:  # clocks differ between ranks: rank 0 decides
                due_by_time = trainer.strategy.broadcast(due_by_time, src=0)
            if due_by_time:
                self._last_time_checked = now
        if due_by_steps or due_by_time:
            self._save(trainer, top_k=True, last="always")

    def on_validation_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if self._tracker is not None and self._in_fit:
            self._tracker.on_validation_start(trainer)

    def on_validation_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if not self._in_fit or trainer.sanity_checking:
            return
        from_validation = self._tracker.on_validation_end(trainer) if self._tracker is not None else False
        if self.save_on_train_epoch_end is None:
            if not from_validation:
                return
        elif self.save_on_train_epoch_end:
            return
        self._save_at_epoch_end(trainer)

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if not self._in_fit:
            return
        if self.save_on_train_epoch_end is None:
            if self._tracker is not None and self._tracker.is_validation_metric:
                return
        elif not self.save_on_train_epoch_end:
            return
        self._save_at_epoch_end(trainer)

    def on_train_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        # max_steps stopped the run inside an epoch: the epoch is not over, so its end hooks did
        # not run. Without a monitor, save what that epoch end would have (the latest state; it
        # resumes at the next batch). A monitored metric's epoch value is not final there.
        position = trainer.fit_progress
        if self.monitor is None and position.batches_done and not position.epoch_finished:
            self.on_train_epoch_end(trainer, pl_module)
        if self.save_last and not self._last_checkpoint_saved and trainer.global_step > 0:
            self._save(trainer, top_k=False, last="always")  # as Lightning: save_last always leaves one

    def on_exception(self, trainer: TrainerView, pl_module: ModuleView, exception: BaseException) -> None:
        if (
            not self.save_on_exception
            or not self._in_fit
            or trainer.sanity_checking
            or trainer.global_step == self._last_global_step_saved
        ):
            return
        path = self.format_checkpoint_name(self._metrics(trainer))
        trainer.save_checkpoint(path, weights_only=self.save_weights_only)
        self._last_checkpoint_saved = path
        tell_loggers(trainer, self)
        if self.save_last:
            self._write_last(trainer, self.last_checkpoint_path())
        _rank_zero_print(
            trainer, f"A {type(exception).__name__} was raised ({exception}): saved a checkpoint to {path}"
        )

    def to_yaml(self, filepath: str | os.PathLike[str] | None = None) -> None:
        """Write ``best_k_models`` (path: score) as YAML, by default to ``<dirpath>/best_k_models.yaml``."""
        if filepath is None:
            if not self.dirpath:
                raise ValueError("ModelCheckpoint.to_yaml(): no dirpath yet (it is set at fit start); pass filepath.")
            filepath = storage.join(self.dirpath, "best_k_models.yaml")
        storage.write_bytes(os.fspath(filepath), yaml_text(self.best_k_models.items()))

    # -- checkpoint state -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Best path/score, the top-k dict and the last path, for resuming."""
        state = {name: getattr(self, name) for name in _SAVED}
        state["best_k_models"] = dict(self.best_k_models)  # a copy: later saves change ours
        state["last_global_step_saved"] = self._last_global_step_saved
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the bookkeeping. If the checkpoint directory changed, only ``best_model_path``
        is restored (the old top-k files are not in the new directory)."""
        if self.dirpath is None and state_dict.get("dirpath") is not None and not self._in_fit:
            # the default directory is only known at fit start: compare then
            self._pending_state = dict(state_dict)
            return
        self._apply_state(state_dict)

    def _apply_state(self, state: Mapping[str, Any]) -> None:
        self._last_global_step_saved = int(state.get("last_global_step_saved", self._last_global_step_saved))
        if state.get("dirpath") != self.dirpath:
            _rank_zero_warn(
                f"ModelCheckpoint: the checkpoint directory changed from {state.get('dirpath')!r} to "
                f"{self.dirpath!r}; only best_model_path is restored.",
            )
            self.best_model_path = state.get("best_model_path", self.best_model_path)
            return
        # the top-k files are deleted from and last_model_path overwritten: a loaded state (a file
        # anyone may have written) must name nothing but checkpoint files in this directory
        own = lambda path: is_inside(path, self.dirpath, self.FILE_EXTENSION)  # noqa: E731
        self._book, foreign = loaded_books(state, self.mode, self.best_model_path, own)
        if foreign:
            _rank_zero_warn(
                f"ModelCheckpoint: the checkpoint's state names paths outside its directory {self.dirpath!r}: "
                f"{', '.join(foreign)}; they are dropped (a checkpoint callback deletes and overwrites only "
                "checkpoint files in its own directory).",
            )

    # -- names ------------------------------------------------------------------------------
    def format_checkpoint_name(
        self,
        metrics: Mapping[str, Any],
        filename: str | None = None,
        ver: int | None = None,
        prefix: str | None = None,
    ) -> str:
        """The checkpoint path for ``metrics`` from ``filename`` (default: the callback's template).

        ``{"epoch": 3, "val_loss": 0.1234}`` with ``"{epoch}-{val_loss:.2f}"`` gives
        ``<dirpath>/epoch=3-val_loss=0.12.ckpt``; ``ver=1`` appends ``-v1``, ``prefix`` goes in
        front with a ``-``. As in Lightning, a ``/`` in a metric name (``{val/loss}``) makes a
        sub-directory, and a field missing from ``metrics`` is written as 0 (with a warning).
        """
        name = checkpoint_name(filename or self.filename, metrics, self.auto_insert_metric_name, self._missing_fields_warned)
        return self._named(f"{prefix}-{name}" if prefix else name, ver)

    # -- saving -----------------------------------------------------------------------------
    def _metrics(self, trainer: TrainerView) -> dict[str, Any]:
        metrics: dict[str, Any] = dict(trainer.callback_metrics)
        metrics["epoch"] = trainer.current_epoch
        metrics["step"] = trainer.global_step
        return metrics

    def _save_at_epoch_end(self, trainer: TrainerView) -> None:
        if trainer.global_step == self._last_global_step_saved:
            return  # this step is saved already (by the step schedule, or another hook)
        n = self.every_n_epochs
        due = bool(n) and (trainer.current_epoch + 1) % n == 0
        if due or (self.save_last == "link" and self._last_checkpoint_saved):
            # as Lightning: last.ckpt follows a top-k save (or re-links to the newest file)
            self._save(trainer, top_k=due, last="if_saved")

    def _save(self, trainer: TrainerView, top_k: bool, last: str) -> None:
        """Decide on rank 0, agree by broadcast, then save on all ranks (rank 0 writes).

        ``top_k``: consider a top-k checkpoint; ``last``: write ``last.ckpt`` ``"always"`` (when
        ``save_last``) or ``"if_saved"`` (only when this call wrote a checkpoint, or links).
        """
        decision = _decided_on_rank_zero(trainer, lambda: self._decide(trainer, top_k, last), "ModelCheckpoint")
        self._apply_decision(trainer, decision)

    def _decide(self, trainer: TrainerView, top_k: bool, last: str) -> Save:
        """Rank 0: which files to write and delete, and the books after this save (`checkpoint_policy`)."""
        metrics = self._metrics(trainer)
        score = self._score(trainer, metrics) if self.monitor is not None and top_k else None
        policy = Policy(self.monitor, self.mode, self.save_top_k, self.save_last)
        return decide(self._book, policy, score, top_k, last, self._last_checkpoint_saved, TemplateNames(
            lambda ver: self.format_checkpoint_name(metrics, ver=ver), self.last_checkpoint_path
        ))

    def _score(self, trainer: TrainerView, metrics: Mapping[str, Any]) -> float | None:
        """The monitored value to rank by (NaN is the worst), or None while validation has not logged it yet."""
        assert self.monitor is not None
        if self.monitor not in metrics and self._tracker is not None and self._tracker.missing_is_expected(trainer):
            return None
        score = _to_float(_monitor_value(metrics, self.monitor, "ModelCheckpoint"))
        return _worst(self.mode) if math.isnan(score) else score

    def _apply_decision(self, trainer: TrainerView, decision: Save) -> None:
        before = self._book
        # the book first: the checkpoint being written records itself as saved
        self._book = decision.books
        if decision.save_path is not None or decision.last_path is not None:
            self._last_global_step_saved = trainer.global_step
        if self.verbose and decision.message:
            _rank_zero_print(
                trainer, f"Epoch {trainer.current_epoch}, global step {trainer.global_step}: {decision.message}"
            )
        try:
            if decision.save_path is not None:
                trainer.save_checkpoint(decision.save_path, weights_only=self.save_weights_only)
                self._last_checkpoint_saved = decision.save_path
                tell_loggers(trainer, self)
        except BaseException:
            # the write failed: keep pointing at the files that exist
            self._book = before
            raise
        if decision.link_to is not None:
            if trainer.is_global_zero:
                assert decision.last_path is not None
                link(decision.link_to, decision.last_path)
        elif decision.last_path is not None:
            self._write_last(trainer, decision.last_path)
        if decision.delete:
            trainer.strategy.wait_for_checkpoint()  # an asynchronous save must be on disk first
        # only after the new file is safely on disk; the strategy removes on global rank 0 (through a
        # library's own checkpoint I/O when the Trainer has one, as in Lightning)
        for path in decision.delete:
            trainer.strategy.remove_checkpoint(path)

    def _write_last(self, trainer: TrainerView, path: str) -> None:
        self.last_model_path = path
        trainer.save_checkpoint(path, weights_only=self.save_weights_only)
        self._last_checkpoint_saved = path
        tell_loggers(trainer, self)

    def last_checkpoint_path(self, taken: Mapping[str, Any] | None = None) -> str:
        """Where this run writes its last checkpoint: the one it wrote (or resumed) before, else
        ``last.ckpt``, versioned (``last-v1.ckpt``) when an earlier run's file has that name."""
        if self.last_model_path:
            return self.last_model_path
        if not self.enable_version_counter:  # the fit refused to start beside another run's files
            return self._named(self.CHECKPOINT_NAME_LAST)
        taken = self.best_k_models if taken is None else taken
        return unique_path(lambda ver: self._named(self.CHECKPOINT_NAME_LAST, ver), taken, None)

    def _named(self, name: str, ver: int | None = None) -> str:
        name = name if ver is None else f"{name}-v{ver}"
        return storage.join(self.dirpath or "", name + self.FILE_EXTENSION)


