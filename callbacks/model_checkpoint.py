"""`ModelCheckpoint`: save the best k checkpoints by a monitored metric, and/or the latest."""

from __future__ import annotations

import datetime
import json
import math
import os
import posixpath
import re
import shutil
import tempfile
import time
import warnings
from typing import TYPE_CHECKING, Any, Mapping

from callbacks._utils import (
    _monitor_value,
    _rank_zero_print,
    _rank_zero_warn,
    _to_float,
    _validate_mode,
    _ValidationMetricTracker,
    _worst,
)
from callbacks.checkpoint import Checkpoint
from callbacks.checkpoint_policy import Policy, Save, TopK, decide, step_due, time_due
from trainer.contracts import run_lock
from trainer.contracts.errors import MonitorKeyError
from trainer.contracts.arguments import check_bool, check_int, check_path, hint_misspelled_arguments
from trainer.contracts import storage
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView

# "{name}" or "{name:fmt}" in a filename template
_FIELD = re.compile(r"\{([^{}:!]+)((?:![rsa])?(?::[^{}]*)?)\}")


# What `ModelCheckpoint.state_dict` saves of its public attributes, in this order (then the step of its last save).
_SAVED = (
    "monitor", "mode", "dirpath", "best_model_path", "best_model_score", "current_score",
    "best_k_models", "kth_best_model_path", "kth_value", "last_model_path",
)


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

    One run at a time per directory: global rank 0 holds a lock file (``.lockstep-run.lock``,
    naming the run id, host and pid) for the whole fit, and a second run that finds it held by a
    live run refuses to start (`RunLockedError`). A lock left by a run that
    died, or by this job before its restart, is taken over.

    Checkpoints are written by ``trainer.save_checkpoint``, which every rank calls and global
    rank 0 writes atomically (temporary file, fsync, rename). Under ``strategy="fsdp"`` each
    checkpoint is a directory of the same name holding every rank's shards (also ``last.ckpt``);
    a checkpoint that falls out of the top k is deleted with its directory. Global rank 0 makes
    every decision (which file, which to delete) and broadcasts it, so all ranks keep the same
    bookkeeping even when their values of ``monitor`` differ: log it with ``sync_dist=True`` to
    rank by the global value.
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
        _validate_mode(mode, "ModelCheckpoint")
        check_path("ModelCheckpoint(dirpath)", dirpath)
        _check_ranking(monitor, save_top_k, save_last)
        every_n_epochs = _check_schedule(every_n_train_steps, every_n_epochs, train_time_interval)
        for arg, value in (
            ("auto_insert_metric_name", auto_insert_metric_name),
            ("verbose", verbose),
            ("save_weights_only", save_weights_only),
            ("save_on_exception", save_on_exception),
            ("enable_version_counter", enable_version_counter),
        ):
            check_bool(f"ModelCheckpoint({arg})", value)
        check_bool("ModelCheckpoint(save_on_train_epoch_end)", save_on_train_epoch_end, allow_none=True)
        if filename is not None and not isinstance(filename, str):
            raise TypeError(f"ModelCheckpoint(filename={filename!r}): expected a str template.")
        self.dirpath: str | None = (
            None if dirpath is None else storage.normalize(os.path.expanduser(os.fspath(dirpath)), "dirpath")
        )
        if save_last == "link" and self.dirpath is not None and storage.is_url(self.dirpath):
            raise ValueError(f"ModelCheckpoint(save_last='link') needs a local dirpath, got {self.dirpath!r}.")
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

        self.best_k_models: dict[str, float] = {}
        self.kth_best_model_path = ""
        self.kth_value: float = _worst(mode)
        self.best_model_path = ""
        self.best_model_score: float | None = None
        self.current_score: float | None = None
        self.last_model_path = ""
        self._last_global_step_saved = -1
        self._last_checkpoint_saved = ""  # the newest file written: what save_last="link" points to
        self._last_time_checked: float | None = None
        self._missing_fields_warned: set[str] = set()
        self._in_fit = False
        self._pending_state: dict[str, Any] | None = None
        self._lock: run_lock.RunLock | None = None  # its directory's lock, held during fit (global rank 0)
        self._tracker = _ValidationMetricTracker(monitor) if monitor is not None else None

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
    def on_fit_start(self, trainer: TrainerView, module: ModuleView) -> None:
        # after every `setup`: the logger has fixed its version, so `trainer.log_dir` is final
        self._in_fit = True
        if self.dirpath is None:
            self.dirpath = self._default_dirpath(trainer)
        if self.save_last == "link" and storage.is_url(self.dirpath):
            raise ValueError(f"ModelCheckpoint(save_last='link') needs a local dirpath, got {self.dirpath!r}.")
        # an unwritable directory fails the fit now, not at the first save an epoch later
        problem = None
        if trainer.is_global_zero:
            problem = storage.unwritable(self.dirpath) if storage.is_url(self.dirpath) else _unwritable(self.dirpath)
        if trainer.world_size > 1:
            self.dirpath, problem = trainer.strategy.broadcast((self.dirpath, problem), src=0)
        if problem is not None:
            raise OSError(
                f"ModelCheckpoint cannot write checkpoints to {self.dirpath!r}: {problem}. Pass a writable "
                f"default_root_dir (now {os.fspath(trainer.default_root_dir)!r}) or ModelCheckpoint(dirpath=...)."
            )
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
        lock = run_lock.RunLock(self.dirpath)
        try:
            taken_over = lock.acquire(owner=trainer)  # this fit's other checkpoint callbacks share it
        except run_lock.RunLockedError as err:
            return "locked", str(err)
        self._lock = lock
        if taken_over is not None:
            warnings.warn(taken_over, stacklevel=user_stacklevel())
        siblings = [cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath == self.dirpath]
        mine = set().union(*(cb._files() for cb in [self, *siblings]))
        foreign = sorted(
            name for name in storage.listdir(self.dirpath)
            if name.endswith(self.FILE_EXTENSION) and storage.join(self.dirpath, name) not in mine
        )
        if not foreign:
            return None
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        if not self.enable_version_counter:
            self._release()
            return "exists", (
                f"ModelCheckpoint(enable_version_counter=False): {self.dirpath!r} holds checkpoints of "
                f"another run ({shown}), which this run could overwrite. Use another dirpath, delete "
                "them, resume from one (ckpt_path=...), or enable the version counter."
            )
        warnings.warn(
            f"Checkpoint directory {self.dirpath} holds checkpoints of another run ({shown}): they are "
            "kept, and this run's names that collide with them get a -v<n> suffix (last-v1.ckpt).",
            stacklevel=user_stacklevel(),
        )
        return None

    def _files(self) -> set[str]:
        """The files this callback wrote (or resumed), its state not applied yet included."""
        state = self._pending_state or {}
        pending = set(state.get("best_k_models", {})) | {state.get("last_model_path", "")} if state else set()
        return (set(self.best_k_models) | {self.last_model_path} | pending) - {""}

    def _release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def on_fit_end(self, trainer: TrainerView, module: ModuleView) -> None:
        self._in_fit = False

    def teardown(self, trainer: TrainerView, module: ModuleView, stage: str) -> None:
        self._in_fit = False
        if stage == "fit":
            self._release()
            # a later `fit` counts steps from 0 again (or from its checkpoint, restored before it)
            self._last_global_step_saved = -1

    def on_train_start(self, trainer: TrainerView, module: ModuleView) -> None:
        self._last_time_checked = time.monotonic()

    def on_train_batch_end(
        self, trainer: TrainerView, module: ModuleView, outputs: Any, batch: Any, batch_idx: int
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

    def on_validation_start(self, trainer: TrainerView, module: ModuleView) -> None:
        if self._tracker is not None and self._in_fit:
            self._tracker.on_validation_start(trainer)

    def on_validation_end(self, trainer: TrainerView, module: ModuleView) -> None:
        if not self._in_fit or trainer.sanity_checking:
            return
        from_validation = self._tracker.on_validation_end(trainer) if self._tracker is not None else False
        if self.save_on_train_epoch_end is None:
            if not from_validation:
                return
        elif self.save_on_train_epoch_end:
            return
        self._save_at_epoch_end(trainer)

    def on_train_epoch_end(self, trainer: TrainerView, module: ModuleView) -> None:
        if not self._in_fit:
            return
        if self.save_on_train_epoch_end is None:
            if self._tracker is not None and self._tracker.is_validation_metric:
                return
        elif not self.save_on_train_epoch_end:
            return
        self._save_at_epoch_end(trainer)

    def on_train_end(self, trainer: TrainerView, module: ModuleView) -> None:
        # max_steps stopped the run inside an epoch: the epoch is not over, so its end hooks did
        # not run. Without a monitor, save what that epoch end would have (the latest state; it
        # resumes at the next batch). A monitored metric's epoch value is not final there.
        position = trainer.fit_progress
        if self.monitor is None and position.batches_done and not position.epoch_finished:
            self.on_train_epoch_end(trainer, module)
        if self.save_last and not self._last_checkpoint_saved and trainer.global_step > 0:
            self._save(trainer, top_k=False, last="always")  # as Lightning: save_last always leaves one

    def on_exception(self, trainer: TrainerView, module: ModuleView, exception: BaseException) -> None:
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
        self._tell_loggers(trainer)
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
        # JSON strings are YAML strings; YAML spells infinities and NaN its own way
        lines = [f"{json.dumps(path)}: {_yaml_float(score)}\n" for path, score in self.best_k_models.items()]
        storage.write_bytes(os.fspath(filepath), ("".join(lines) or "{}\n").encode("utf-8"))

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
        if state.get("dirpath") == self.dirpath:
            state = self._own_files_only(state)
            self.best_k_models = dict(state.get("best_k_models", {}))
            self.kth_best_model_path = state.get("kth_best_model_path", "")
            self.kth_value = state.get("kth_value", _worst(self.mode))
            self.best_model_score = state.get("best_model_score")
            self.current_score = state.get("current_score")
            self.last_model_path = state.get("last_model_path", "")
        else:
            _rank_zero_warn(
                f"ModelCheckpoint: the checkpoint directory changed from {state.get('dirpath')!r} to "
                f"{self.dirpath!r}; only best_model_path is restored.",
            )
        self.best_model_path = state.get("best_model_path", self.best_model_path)

    def _own_files_only(self, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """``state`` without the paths that are not checkpoint files in this callback's directory.

        The top-k list is deleted from and ``last_model_path`` overwritten, so a loaded state
        (a file anyone may have written) must not name anything else; what is dropped is warned
        about, and the ranking is rebuilt from the files that remain.
        """
        best_k = dict(state.get("best_k_models", {}))
        named = [*best_k, state.get("kth_best_model_path", ""), state.get("best_model_path", ""),
                 state.get("last_model_path", "")]
        foreign = sorted({str(p) for p in named if p and not self._is_own_file(p)})
        if not foreign:
            return state
        _rank_zero_warn(
            f"ModelCheckpoint: the checkpoint's state names paths outside its directory {self.dirpath!r}: "
            f"{', '.join(foreign)}; they are dropped (a checkpoint callback deletes and overwrites only "
            "checkpoint files in its own directory).",
        )
        kept = {p: v for p, v in best_k.items() if str(p) not in foreign}
        ranked = sorted(kept.items(), key=lambda kv: _to_float(kv[1]), reverse=self.mode == "min")
        own = dict(state)
        own["best_k_models"] = kept
        own["kth_best_model_path"], own["kth_value"] = ranked[0] if ranked else ("", _worst(self.mode))
        own["best_model_path"], own["best_model_score"] = ranked[-1] if ranked else ("", None)
        if own.get("last_model_path") in foreign:
            own["last_model_path"] = ""
        return own

    def _is_own_file(self, path: Any) -> bool:
        """Whether ``path`` is a checkpoint file (``*.ckpt``) inside this callback's directory."""
        if not isinstance(path, str) or not path.endswith(self.FILE_EXTENSION) or not self.dirpath:
            return False
        directory = os.fspath(self.dirpath)
        if storage.is_url(directory) or storage.is_url(path):
            inside = posixpath.normpath(path).startswith(posixpath.normpath(directory) + "/")
            return inside and ".." not in path.split("/")
        real = os.path.realpath(directory)
        return os.path.commonpath([real, os.path.realpath(path)]) == real and os.path.realpath(path) != real

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

        def replace(match: re.Match[str]) -> str:
            name, spec = match.group(1).strip(), match.group(2)
            if name in metrics:
                value = metrics[name]
                value = int(_to_float(value)) if name in ("epoch", "step") else _to_float(value)
            else:
                value = 0
                if name not in self._missing_fields_warned:
                    self._missing_fields_warned.add(name)
                    available = ", ".join(sorted(metrics)) or "(none)"
                    _rank_zero_warn(
                        f"ModelCheckpoint(filename={template!r}) refers to {name!r}, which is not in the "
                        f"logged metrics (available: {available}): it is written as 0.",
                    )
            text = ("{0" + spec + "}").format(value)
            return f"{name}={text}" if self.auto_insert_metric_name else text

        template = filename or self.filename
        name = _FIELD.sub(replace, template)
        if prefix:
            name = f"{prefix}-{name}"
        if ver is not None:
            name = f"{name}-v{ver}"
        return storage.join(self.dirpath or "", name + self.FILE_EXTENSION)

    # -- saving -----------------------------------------------------------------------------
    def _default_dirpath(self, trainer: TrainerView) -> str:
        log_dir = None
        if trainer.loggers:  # as in Lightning: beside a TensorBoardLogger's sub_dir, not in it
            log_dir = getattr(trainer.loggers[0], "version_dir", trainer.log_dir)
        base = log_dir if log_dir is not None else trainer.default_root_dir
        return storage.join(os.fspath(base), "checkpoints")

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
        decision: Save | tuple[str, str] | None = None  # a Save, or rank 0's error (its type's name, message)
        error: BaseException | None = None
        if trainer.is_global_zero:
            try:
                decision = self._decide(trainer, top_k, last)
            except Exception as exc:  # noqa: BLE001 - must reach the other ranks before raising
                error = exc
                decision = (type(exc).__name__, str(exc))
        if trainer.world_size > 1:
            decision = trainer.strategy.broadcast(decision, src=0)
        if not isinstance(decision, Save):
            if error is not None:
                raise error
            assert decision is not None
            kind, message = decision
            raise (MonitorKeyError if kind == MonitorKeyError.__name__ else RuntimeError)(
                f"ModelCheckpoint failed on global rank 0: {message}"
            )
        self._apply_decision(trainer, decision)

    def _decide(self, trainer: TrainerView, top_k: bool, last: str) -> Save:
        """Rank 0: which files to write and delete, and the books after this save (`checkpoint_policy`)."""
        metrics = self._metrics(trainer)
        score = self._score(trainer, metrics) if self.monitor is not None and top_k else None
        policy = Policy(self.monitor, self.mode, self.save_top_k, self.save_last)
        return decide(self._books(), policy, score, top_k, last, self._last_checkpoint_saved, _Names(self, metrics))

    def _score(self, trainer: TrainerView, metrics: Mapping[str, Any]) -> float | None:
        """The monitored value to rank by (NaN is the worst), or None while validation has not logged it yet."""
        assert self.monitor is not None
        if self.monitor not in metrics and self._tracker is not None and self._tracker.missing_is_expected(trainer):
            return None
        score = _to_float(_monitor_value(metrics, self.monitor, "ModelCheckpoint"))
        return _worst(self.mode) if math.isnan(score) else score

    def _apply_decision(self, trainer: TrainerView, decision: Save) -> None:
        before = self._books()
        # the books first: the checkpoint being written records itself as saved
        self._set_books(decision.books)
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
                self._tell_loggers(trainer)
        except BaseException:
            # the write failed: keep pointing at the files that exist
            self._set_books(before)
            raise
        if decision.link_to is not None:
            if trainer.is_global_zero:
                assert decision.last_path is not None
                _link(decision.link_to, decision.last_path)
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
        self._tell_loggers(trainer)

    def _tell_loggers(self, trainer: TrainerView) -> None:
        """Lightning's ``logger.after_save_checkpoint(callback)`` after each file written, on global rank 0."""
        if trainer.is_global_zero:
            for lg in trainer.loggers:
                lg.after_save_checkpoint(self)

    def _books(self) -> TopK:
        return TopK(
            best_k_models=dict(self.best_k_models), best_model_path=self.best_model_path,
            best_model_score=self.best_model_score, current_score=self.current_score,
            kth_best_model_path=self.kth_best_model_path, kth_value=self.kth_value,
            last_model_path=self.last_model_path,
        )

    def _set_books(self, books: TopK) -> None:
        self.best_k_models = dict(books.best_k_models)
        self.best_model_path = books.best_model_path
        self.best_model_score = books.best_model_score
        self.current_score = books.current_score
        self.kth_best_model_path = books.kth_best_model_path
        self.kth_value = books.kth_value
        self.last_model_path = books.last_model_path

    def last_checkpoint_path(self, taken: Mapping[str, Any] | None = None) -> str:
        """Where this run writes its last checkpoint: the one it wrote (or resumed) before, else
        ``last.ckpt``, versioned (``last-v1.ckpt``) when an earlier run's file has that name."""
        if self.last_model_path:
            return self.last_model_path
        if not self.enable_version_counter:  # the fit refused to start beside another run's files
            return self._named(self.CHECKPOINT_NAME_LAST)
        return self._unique_path({}, self.best_k_models if taken is None else taken, None, self.CHECKPOINT_NAME_LAST)

    def _named(self, name: str, ver: int | None = None) -> str:
        name = name if ver is None else f"{name}-v{ver}"
        return storage.join(self.dirpath or "", name + self.FILE_EXTENSION)

    def _unique_path(
        self, metrics: Mapping[str, Any], taken: Mapping[str, Any], replaceable: str | None, fixed: str | None = None
    ) -> str:
        """A path for this save that clobbers no kept or foreign file (``-v1``, ``-v2``, ...);
        ``fixed`` is a file name used instead of the ``filename`` template."""
        def name(ver: int | None) -> str:
            return self._named(fixed, ver) if fixed else self.format_checkpoint_name(metrics, ver=ver)

        path, version = name(None), 0
        while path != replaceable and (path in taken or storage.exists(path)):
            version += 1
            path = name(version)
        return path


class _Names:
    """The names a save may take (`checkpoint_policy.Names`): the callback's template and its
    version counter, which looks at the disk."""

    def __init__(self, callback: ModelCheckpoint, metrics: Mapping[str, Any]) -> None:
        self.callback, self.metrics = callback, metrics

    def checkpoint(self, taken: Mapping[str, float], replaceable: str | None) -> str:
        return self.callback._unique_path(self.metrics, taken, replaceable)

    def last(self, taken: Mapping[str, float]) -> str:
        return self.callback.last_checkpoint_path(taken)


def _link(target: str, link: str) -> None:
    """``link`` as a relative symbolic link to ``target`` (a copy where links are not allowed)."""
    if os.path.abspath(target) == os.path.abspath(link):
        return
    if os.path.islink(link) or os.path.isfile(link):
        os.remove(link)
    elif os.path.isdir(link):
        shutil.rmtree(link)
    try:
        os.symlink(os.path.relpath(target, os.path.dirname(link)), link)
    except OSError:  # Windows without the privilege to create links
        (shutil.copytree if os.path.isdir(target) else shutil.copy)(target, link)


def _yaml_float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    return repr(float(value))


def _unwritable(dirpath: str) -> str | None:
    """Why no file can be created in ``dirpath`` (created later, at the first save), or None."""
    existing = os.path.abspath(dirpath)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing!r} is not a directory"
    try:  # a real attempt, as the first save will make one
        fd, probe = tempfile.mkstemp(prefix=".lockstep-write-test-", dir=existing)
        os.close(fd)
        os.remove(probe)
    except OSError as err:
        return f"cannot create a file in {existing!r} ({err.strerror or err})"
    return None


def _check_ranking(monitor: Any, save_top_k: Any, save_last: Any) -> None:
    """What to keep: ``monitor`` a metric name or None, ``save_top_k`` ranked by it, ``save_last``."""
    if monitor is not None and not isinstance(monitor, str):
        raise TypeError(
            f"ModelCheckpoint(monitor={monitor!r}): expected None or the name of a logged metric."
        )
    check_int("ModelCheckpoint(save_top_k)", save_top_k, -1)
    if monitor is None and save_top_k not in (-1, 0, 1):
        raise ValueError(
            f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None): there is no metric to rank "
            "checkpoints by. Set `monitor`, or use save_top_k=1 (latest), -1 (all) or 0 (none)."
        )
    if save_last is not None and save_last != "link" and not isinstance(save_last, bool):
        raise TypeError(f"ModelCheckpoint(save_last) must be None, a bool or 'link', got {save_last!r}")


def _check_schedule(
    every_n_train_steps: Any, every_n_epochs: Any, train_time_interval: Any
) -> int | None:
    """When to save: the triggers checked; ``every_n_epochs`` as it applies (1 when none is given)."""
    for arg, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
        check_int(f"ModelCheckpoint({arg})", value, 0, allow_none=True)
    if train_time_interval is not None and not isinstance(train_time_interval, datetime.timedelta):
        raise TypeError(
            f"ModelCheckpoint(train_time_interval={train_time_interval!r}): expected None or a datetime.timedelta."
        )
    # Lightning's triggers: none given means every epoch; given ones exclude each other
    if every_n_train_steps is None and every_n_epochs is None and train_time_interval is None:
        return 1
    triggers = (every_n_train_steps or 0) >= 1, (every_n_epochs or 0) >= 1, train_time_interval is not None
    if sum(triggers) > 1:
        raise ValueError(
            f"ModelCheckpoint(every_n_train_steps={every_n_train_steps}, every_n_epochs={every_n_epochs}, "
            f"train_time_interval={train_time_interval}): these are mutually exclusive; use one "
            "ModelCheckpoint per schedule."
        )
    epochs: int | None = every_n_epochs  # checked above: None or an int >= 0
    return epochs
