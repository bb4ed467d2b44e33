"""`ModelCheckpoint`: save the best k checkpoints by a monitored metric, and/or the latest."""

from __future__ import annotations

import math
import os
import re
import tempfile
import warnings
from typing import TYPE_CHECKING, Any, Mapping

from callbacks._utils import (
    _check_bool,
    _check_int,
    _check_path,
    _MonitorKeyError,
    _monitor_value,
    _rank_zero_print,
    _to_float,
    _validate_mode,
    _ValidationMetricTracker,
    _worst,
)
from callbacks.callback import Callback
from trainer.contracts import storage

if TYPE_CHECKING:
    from trainer import Trainer, TrainModule

# "{name}" or "{name:fmt}" in a filename template
_FIELD = re.compile(r"\{([^{}:!]+)((?:![rsa])?(?::[^{}]*)?)\}")


class ModelCheckpoint(Callback):
    """Saves checkpoints during ``fit`` and keeps the ``save_top_k`` best ones.

    Args:
        dirpath: Directory for the checkpoints. Default: ``<trainer.log_dir>/checkpoints``, or
            ``<default_root_dir>/checkpoints`` when the Trainer has no logger.
        filename: Template of the file name without ``.ckpt``. ``{epoch}``, ``{step}`` and any
            logged metric can appear, with an optional format spec: ``"{epoch}-{val_loss:.2f}"``
            gives ``epoch=3-val_loss=0.12.ckpt``.
        monitor: Metric (a key of ``trainer.callback_metrics``) that ranks checkpoints. ``None``:
            the latest checkpoint is the best one.
        mode: ``"min"`` or ``"max"``: which direction of ``monitor`` is better.
        save_top_k: How many checkpoints to keep (``-1``: all, ``0``: none but ``last``). Files
            that fall out of the top k are deleted. Without ``monitor`` only -1, 0 and 1 make sense.
        save_last: Also write ``last.ckpt`` at every save.
        every_n_train_steps: Also save every this many optimizer steps (``None``/``0``: off).
        every_n_epochs: Save every this many epochs (``0``: only on the step schedule).
        save_on_train_epoch_end: Force saving at train epoch end (``True``) or at validation end
            (``False``). ``None``: at validation end when ``monitor`` is a validation metric,
            otherwise at train epoch end.
        auto_insert_metric_name: Write ``name=`` before each value in the file name.
        verbose: Print a line for each save decision (global rank 0).

    Checkpoints are written by ``trainer.save_checkpoint``, which every rank calls and global
    rank 0 writes atomically (temporary file, fsync, rename). Under ``strategy="fsdp"`` each
    checkpoint is a directory of the same name holding every rank's shards (also ``last.ckpt``);
    a checkpoint that falls out of the top k is deleted with its directory. Global rank 0 makes
    every decision (which file, which to delete) and broadcasts it, so all ranks keep the same
    bookkeeping even when their values of ``monitor`` differ: log it with ``sync_dist=True`` to
    rank by the global value.
    """

    CHECKPOINT_NAME_LAST = "last"
    FILE_EXTENSION = ".ckpt"

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = "{epoch}-{step}",
        monitor: str | None = None,
        mode: str = "min",
        save_top_k: int = 1,
        save_last: bool = False,
        every_n_train_steps: int | None = None,
        every_n_epochs: int = 1,
        save_on_train_epoch_end: bool | None = None,
        auto_insert_metric_name: bool = True,
        verbose: bool = False,
    ) -> None:
        _validate_mode(mode, "ModelCheckpoint")
        _check_path("ModelCheckpoint", "dirpath", dirpath)
        if monitor is not None and not isinstance(monitor, str):
            raise TypeError(
                f"ModelCheckpoint(monitor={monitor!r}): expected None or the name of a logged metric."
            )
        keep = "an int >= -1 (-1 keeps every checkpoint, 0 keeps none)"
        _check_int("ModelCheckpoint", "save_top_k", save_top_k, -1, keep)
        if monitor is None and save_top_k not in (-1, 0, 1):
            raise ValueError(
                f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None): there is no metric to rank "
                "checkpoints by. Set `monitor`, or use save_top_k=1 (latest), -1 (all) or 0 (none)."
            )
        for arg, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
            _check_int("ModelCheckpoint", arg, value, 0, "None or an int >= 0", allow_none=True)
        _check_bool("ModelCheckpoint", "save_last", save_last)
        _check_bool("ModelCheckpoint", "auto_insert_metric_name", auto_insert_metric_name)
        _check_bool("ModelCheckpoint", "verbose", verbose)
        _check_bool("ModelCheckpoint", "save_on_train_epoch_end", save_on_train_epoch_end, allow_none=True)
        if filename is not None and not isinstance(filename, str):
            raise TypeError(f"ModelCheckpoint(filename={filename!r}): expected a str template.")
        self.dirpath: str | None = (
            None if dirpath is None else storage.normalize(os.path.expanduser(os.fspath(dirpath)), "dirpath")
        )
        self.filename = filename or "{epoch}-{step}"
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.every_n_train_steps = every_n_train_steps or 0
        self.every_n_epochs = every_n_epochs or 0
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.auto_insert_metric_name = auto_insert_metric_name
        self.verbose = verbose

        self.best_k_models: dict[str, float] = {}
        self.kth_best_model_path = ""
        self.kth_value: float = _worst(mode)
        self.best_model_path = ""
        self.best_model_score: float | None = None
        self.current_score: float | None = None
        self.last_model_path = ""
        self._last_global_step_saved = -1
        self._in_fit = False
        self._pending_state: dict[str, Any] | None = None
        self._tracker = _ValidationMetricTracker(monitor) if monitor is not None else None

    @property
    def state_key(self) -> str:
        # two checkpoint callbacks with different settings must not share one state entry
        return f"ModelCheckpoint{{monitor={self.monitor!r}, mode={self.mode!r}, filename={self.filename!r}}}"

    # -- hooks ------------------------------------------------------------------------------
    def on_fit_start(self, trainer: Trainer, module: TrainModule) -> None:
        # after every `setup`: the logger has fixed its version, so `trainer.log_dir` is final
        self._in_fit = True
        if self.dirpath is None:
            self.dirpath = self._default_dirpath(trainer)
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
        if (
            trainer.is_global_zero
            and storage.isdir(self.dirpath)
            and storage.listdir(self.dirpath)
            and not self.best_k_models
        ):
            warnings.warn(
                f"Checkpoint directory {self.dirpath} exists and is not empty: existing files are kept "
                "and new names get a -v<n> suffix on collision.",
                stacklevel=2,
            )

    def on_fit_end(self, trainer: Trainer, module: TrainModule) -> None:
        self._in_fit = False

    def teardown(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        self._in_fit = False
        if stage == "fit":
            # a later `fit` counts steps from 0 again (or from its checkpoint, restored before it)
            self._last_global_step_saved = -1

    def on_train_batch_end(
        self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        n = self.every_n_train_steps
        step = trainer.global_step
        # with accumulation several micro batches share one global step: save once
        if n and self._in_fit and step > 0 and step % n == 0 and step != self._last_global_step_saved:
            self._save(trainer)

    def on_validation_start(self, trainer: Trainer, module: TrainModule) -> None:
        if self._tracker is not None and self._in_fit:
            self._tracker.on_validation_start(trainer)

    def on_validation_end(self, trainer: Trainer, module: TrainModule) -> None:
        if not self._in_fit or trainer.sanity_checking:
            return
        from_validation = self._tracker.on_validation_end(trainer) if self._tracker is not None else False
        if self.save_on_train_epoch_end is None:
            if not from_validation:
                return
        elif self.save_on_train_epoch_end:
            return
        if self._epoch_due(trainer):
            self._save(trainer)

    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule) -> None:
        if not self._in_fit:
            return
        if self.save_on_train_epoch_end is None:
            if self._tracker is not None and self._tracker.is_validation_metric:
                return
        elif not self.save_on_train_epoch_end:
            return
        if self._epoch_due(trainer):
            self._save(trainer)

    def on_train_end(self, trainer: Trainer, module: TrainModule) -> None:
        # max_steps stopped the run inside an epoch: the epoch is not over, so its end hooks did
        # not run. Without a monitor, save what that epoch end would have (the latest state; it
        # resumes at the next batch). A monitored metric's epoch value is not final there.
        loop = trainer.fit_loop
        if self.monitor is None and loop.batches_done and not loop.epoch_finished:
            self.on_train_epoch_end(trainer, module)

    # -- checkpoint state -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Best path/score, the top-k dict and the last path, for resuming."""
        return {
            "monitor": self.monitor,
            "mode": self.mode,
            "dirpath": self.dirpath,
            "best_model_path": self.best_model_path,
            "best_model_score": self.best_model_score,
            "current_score": self.current_score,
            "best_k_models": dict(self.best_k_models),
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "last_model_path": self.last_model_path,
            "last_global_step_saved": self._last_global_step_saved,
        }

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
            self.best_k_models = dict(state.get("best_k_models", {}))
            self.kth_best_model_path = state.get("kth_best_model_path", "")
            self.kth_value = state.get("kth_value", _worst(self.mode))
            self.best_model_score = state.get("best_model_score")
            self.current_score = state.get("current_score")
            self.last_model_path = state.get("last_model_path", "")
        else:
            warnings.warn(
                f"ModelCheckpoint: the checkpoint directory changed from {state.get('dirpath')!r} to "
                f"{self.dirpath!r}; only best_model_path is restored.",
                stacklevel=2,
            )
        self.best_model_path = state.get("best_model_path", self.best_model_path)

    # -- names ------------------------------------------------------------------------------
    def format_checkpoint_name(self, metrics: Mapping[str, Any], ver: int | None = None) -> str:
        """The checkpoint path for ``metrics`` (must hold every field of ``filename``).

        ``{"epoch": 3, "val_loss": 0.1234}`` with ``"{epoch}-{val_loss:.2f}"`` gives
        ``<dirpath>/epoch=3-val_loss=0.12.ckpt``; ``ver=1`` appends ``-v1``.
        """

        def replace(match: re.Match[str]) -> str:
            name, spec = match.group(1).strip(), match.group(2)
            if name not in metrics:
                available = ", ".join(sorted(metrics)) or "(none)"
                raise _MonitorKeyError(
                    f"ModelCheckpoint(filename={self.filename!r}) refers to {name!r}, which is not in the "
                    f"logged metrics. Available keys: {available}."
                )
            value = metrics[name]
            value = int(_to_float(value)) if name in ("epoch", "step") else _to_float(value)
            text = ("{0" + spec + "}").format(value)
            # a "/" in a metric name would make a sub-directory
            return f"{name.replace('/', '_')}={text}" if self.auto_insert_metric_name else text

        name = _FIELD.sub(replace, self.filename)
        if ver is not None:
            name = f"{name}-v{ver}"
        return storage.join(self.dirpath or "", name + self.FILE_EXTENSION)

    # -- saving -----------------------------------------------------------------------------
    def _default_dirpath(self, trainer: Trainer) -> str:
        log_dir = trainer.log_dir if trainer.loggers else None
        base = log_dir if log_dir is not None else trainer.default_root_dir
        return storage.join(os.fspath(base), "checkpoints")

    def _epoch_due(self, trainer: Trainer) -> bool:
        n = self.every_n_epochs
        return (
            bool(n)
            and (trainer.current_epoch + 1) % n == 0
            and trainer.global_step != self._last_global_step_saved
        )

    def _save(self, trainer: Trainer) -> None:
        """Decide on rank 0, agree by broadcast, then save on all ranks (rank 0 writes)."""
        decision: dict[str, Any] | None = None
        error: BaseException | None = None
        if trainer.is_global_zero:
            try:
                decision = self._decide(trainer)
            except Exception as exc:  # noqa: BLE001 - must reach the other ranks before raising
                error = exc
                decision = {"error": (type(exc).__name__, str(exc))}
        if trainer.world_size > 1:
            decision = trainer.strategy.broadcast(decision, src=0)
        assert decision is not None
        if "error" in decision:
            if error is not None:
                raise error
            kind, message = decision["error"]
            raise (_MonitorKeyError if kind == _MonitorKeyError.__name__ else RuntimeError)(
                f"ModelCheckpoint failed on global rank 0: {message}"
            )
        self._apply_decision(trainer, decision)

    def _decide(self, trainer: Trainer) -> dict[str, Any]:
        """Rank 0: which files to write and delete, and the bookkeeping after this save."""
        metrics: dict[str, Any] = dict(trainer.callback_metrics)
        metrics["epoch"] = trainer.current_epoch
        metrics["step"] = trainer.global_step
        state = self._bookkeeping()
        best_k = state["best_k_models"]
        save_path: str | None = None
        delete: list[str] = []
        message = ""

        score: float | None = None
        if self.monitor is not None:
            if (
                self.monitor not in metrics
                and self._tracker is not None
                and self._tracker.missing_is_expected(trainer)
            ):
                score = None  # validation has not run yet: nothing to rank by
            else:
                score = _to_float(_monitor_value(metrics, self.monitor, "ModelCheckpoint"))
                if math.isnan(score):
                    score = _worst(self.mode)
                state["current_score"] = score

        if self.save_top_k != 0 and (self.monitor is None or score is not None):
            if self.monitor is None:
                evict = [p for p in best_k if self.save_top_k == 1]
                save_path = self._unique_path(metrics, best_k, evict[0] if evict else None)
                delete = [p for p in evict if p != save_path]
                if self.save_top_k == 1:
                    best_k.clear()
                best_k[save_path] = math.nan
                state["best_model_path"] = save_path
                message = f"saving latest model to {save_path}"
            elif (
                self.save_top_k == -1 or len(best_k) < self.save_top_k or self._better(score, self.kth_value)
            ):
                assert score is not None
                evict_path = self.kth_best_model_path if 0 < self.save_top_k <= len(best_k) else None
                save_path = self._unique_path(metrics, best_k, evict_path)
                if evict_path is not None:
                    best_k.pop(evict_path, None)
                    if evict_path != save_path:
                        delete.append(evict_path)
                best_k[save_path] = score
                ranked = sorted(best_k.items(), key=lambda kv: kv[1], reverse=self.mode == "min")
                state["kth_best_model_path"], state["kth_value"] = ranked[0]  # worst of the kept ones
                state["best_model_path"], state["best_model_score"] = ranked[-1]
                message = (
                    f"{self.monitor!r} reached {score:.5g} (best {state['best_model_score']:.5g}), "
                    f"saving model to {save_path}"
                )
            else:
                message = f"{self.monitor!r} was not in top {self.save_top_k}"

        last_path = storage.join(self.dirpath or "", self.CHECKPOINT_NAME_LAST + self.FILE_EXTENSION)
        if self.save_last:
            state["last_model_path"] = last_path
        return {
            "save_path": save_path,
            "last_path": last_path if self.save_last else None,
            "delete": delete,
            "state": state,
            "message": message,
        }

    def _apply_decision(self, trainer: Trainer, decision: Mapping[str, Any]) -> None:
        before = self._bookkeeping()
        # bookkeeping first: the checkpoint being written records itself as saved
        self._set_bookkeeping(decision["state"])
        self._last_global_step_saved = trainer.global_step
        if self.verbose and decision["message"]:
            _rank_zero_print(
                trainer,
                f"Epoch {trainer.current_epoch}, global step {trainer.global_step}: "
                f"{decision['message']}",
            )
        try:
            if decision["save_path"] is not None:
                trainer.save_checkpoint(decision["save_path"])
        except BaseException:
            # the write failed: keep pointing at the files that exist
            self._set_bookkeeping(before)
            raise
        if decision["last_path"] is not None:
            trainer.save_checkpoint(decision["last_path"])
        if decision["delete"]:
            trainer.strategy.wait_for_checkpoint()  # an asynchronous save must be on disk first
        if trainer.is_global_zero:
            # only after the new file is safely on disk
            for path in decision["delete"]:
                storage.remove(path)

    def _bookkeeping(self) -> dict[str, Any]:
        return {
            "best_k_models": dict(self.best_k_models),
            "best_model_path": self.best_model_path,
            "best_model_score": self.best_model_score,
            "current_score": self.current_score,
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "last_model_path": self.last_model_path,
        }

    def _set_bookkeeping(self, state: Mapping[str, Any]) -> None:
        self.best_k_models = dict(state["best_k_models"])
        self.best_model_path = state["best_model_path"]
        self.best_model_score = state["best_model_score"]
        self.current_score = state["current_score"]
        self.kth_best_model_path = state["kth_best_model_path"]
        self.kth_value = state["kth_value"]
        self.last_model_path = state["last_model_path"]

    def _unique_path(
        self, metrics: Mapping[str, Any], taken: Mapping[str, Any], replaceable: str | None
    ) -> str:
        """A path for this save that clobbers no kept or foreign file (``-v1``, ``-v2``, ...)."""
        path = self.format_checkpoint_name(metrics)
        version = 0
        while path != replaceable and (path in taken or storage.exists(path)):
            version += 1
            path = self.format_checkpoint_name(metrics, ver=version)
        return path

    def _better(self, score: float | None, reference: float) -> bool:
        if score is None:
            return False
        return score < reference if self.mode == "min" else score > reference


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
