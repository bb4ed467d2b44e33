"""`ModelCheckpoint`'s directory and files: names from the template, the version counter, the
check for another run's checkpoints, links, a writable directory, the own-file check, the YAML
of the kept checkpoints. The callback decides (with `checkpoint_policy`); this module names,
looks at and writes files."""

from __future__ import annotations

import json
import math
import os
import posixpath
import re
import shutil
import tempfile
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from callbacks._utils import _rank_zero_warn, _to_float
from trainer.contracts import run_lock, storage
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.contracts.protocols import TrainerView

# "{name}" or "{name:fmt}" in a filename template
_FIELD = re.compile(r"\{([^{}:!]+)((?:![rsa])?(?::[^{}]*)?)\}")


def checkpoint_name(template: str, metrics: Mapping[str, Any], insert_names: bool, warned: set[str]) -> str:
    """``template`` with its fields filled from ``metrics`` (``name=`` before each value with
    ``insert_names``); a field missing from ``metrics`` is written as 0, warned about once per name
    (``warned``: the names already warned about, added to)."""

    def replace(match: re.Match[str]) -> str:
        name, spec = match.group(1).strip(), match.group(2)
        if name in metrics:
            value = metrics[name]
            value = int(_to_float(value)) if name in ("epoch", "step") else _to_float(value)
        else:
            value = 0
            if name not in warned:
                warned.add(name)
                available = ", ".join(sorted(metrics)) or "(none)"
                _rank_zero_warn(
                    f"ModelCheckpoint(filename={template!r}) refers to {name!r}, which is not in the "
                    f"logged metrics (available: {available}): it is written as 0.",
                )
        text = ("{0" + spec + "}").format(value)
        return f"{name}={text}" if insert_names else text

    return _FIELD.sub(replace, template)


def unique_path(name: Callable[[int | None], str], taken: Mapping[str, Any], replaceable: str | None) -> str:
    """``name(None)``, or ``name(1)``, ``name(2)``... (``-v1``, ``-v2``): the first path that
    clobbers no file of ``taken`` and none on disk, ``replaceable`` excepted."""
    path, version = name(None), 0
    while path != replaceable and (path in taken or storage.exists(path)):
        version += 1
        path = name(version)
    return path


class DirectoryClaim:
    """Global rank 0's hold on a checkpoint directory for one fit: the run lock, and the check for
    another run's checkpoints there."""

    def __init__(self) -> None:
        self._lock: run_lock.RunLock | None = None  # held during fit

    def claim(self, dirpath: str, owner: Any, mine: set[str], extension: str, version_counter: bool) -> tuple[str, str] | None:
        """Take the run lock (shared by ``owner``'s other checkpoint callbacks), and refuse
        (without ``version_counter``) or warn about checkpoints that are not ``mine``: None, or the
        refusal (``"locked"`` or ``"exists"``, the message)."""
        lock = run_lock.RunLock(dirpath)
        try:
            taken_over = lock.acquire(owner=owner)
        except run_lock.RunLockedError as err:
            return "locked", str(err)
        self._lock = lock
        if taken_over is not None:
            warnings.warn(taken_over, stacklevel=user_stacklevel())
        shown = other_runs_files(dirpath, mine, extension)
        if not shown:
            return None
        if not version_counter:
            self.release()
            return "exists", (
                f"ModelCheckpoint(enable_version_counter=False): {dirpath!r} holds checkpoints of "
                f"another run ({shown}), which this run could overwrite. Use another dirpath, delete "
                "them, resume from one (ckpt_path=...), or enable the version counter."
            )
        warnings.warn(
            f"Checkpoint directory {dirpath} holds checkpoints of another run ({shown}): they are "
            "kept, and this run's names that collide with them get a -v<n> suffix (last-v1.ckpt).",
            stacklevel=user_stacklevel(),
        )
        return None

    def release(self) -> None:
        """Let the lock go (nothing when none is held)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()


class TemplateNames:
    """The names a save may take (`checkpoint_policy.Names`): ``checkpoint(ver)`` from the
    callback's template, versioned past kept files and files on disk, and ``last(taken)``."""

    def __init__(self, checkpoint: Callable[[int | None], str], last: Callable[[Mapping[str, float]], str]) -> None:
        self._checkpoint, self._last = checkpoint, last

    def checkpoint(self, taken: Mapping[str, float], replaceable: str | None) -> str:
        """This save's checkpoint path, clobbering no file of ``taken`` except ``replaceable``."""
        return unique_path(self._checkpoint, taken, replaceable)

    def last(self, taken: Mapping[str, float]) -> str:
        """Where ``last.ckpt`` goes, given the checkpoints ``taken``."""
        return self._last(taken)


def default_dirpath(trainer: TrainerView) -> str:
    """``<log_dir>/checkpoints``: beside a TensorBoardLogger's sub_dir, not in it (as in Lightning);
    ``<default_root_dir>/checkpoints`` without a logger."""
    log_dir = None
    if trainer.loggers:
        log_dir = getattr(trainer.loggers[0], "version_dir", trainer.log_dir)
    base = log_dir if log_dir is not None else trainer.default_root_dir
    return storage.join(os.fspath(base), "checkpoints")


def other_runs_files(dirpath: str, mine: set[str], extension: str) -> str:
    """The checkpoints in ``dirpath`` that are not ``mine``, shown in a message ("" if none)."""
    foreign = sorted(
        name for name in storage.listdir(dirpath)
        if name.endswith(extension) and storage.join(dirpath, name) not in mine
    )
    return ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")


def is_inside(path: Any, dirpath: str | None, extension: str) -> bool:
    """Whether ``path`` is a checkpoint file (``*.ckpt``) inside ``dirpath``."""
    if not isinstance(path, str) or not path.endswith(extension) or not dirpath:
        return False
    directory = os.fspath(dirpath)
    if storage.is_url(directory) or storage.is_url(path):
        inside = posixpath.normpath(path).startswith(posixpath.normpath(directory) + "/")
        return inside and ".." not in path.split("/")
    real = os.path.realpath(directory)
    return os.path.commonpath([real, os.path.realpath(path)]) == real and os.path.realpath(path) != real


def tell_loggers(trainer: TrainerView, checkpoint_callback: Any) -> None:
    """Lightning's ``logger.after_save_checkpoint(callback)`` after each file written, on global rank 0."""
    if trainer.is_global_zero:
        for lg in trainer.loggers:
            lg.after_save_checkpoint(checkpoint_callback)


def link(target: str, link: str) -> None:
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


def yaml_text(scores: Iterable[tuple[str, float]]) -> bytes:
    """``path: score`` lines as YAML (``{}`` for none)."""
    # JSON strings are YAML strings; YAML spells infinities and NaN its own way
    lines = [f"{json.dumps(path)}: {_yaml_float(score)}\n" for path, score in scores]
    return ("".join(lines) or "{}\n").encode("utf-8")


def _yaml_float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    return repr(float(value))


def writable_dirpath(trainer: TrainerView, dirpath: str) -> str:
    """``dirpath`` as global rank 0 has it; an unwritable one fails the fit now (`OSError`), not
    at the first save an epoch later."""
    problem = unwritable(dirpath) if trainer.is_global_zero else None
    if trainer.world_size > 1:
        dirpath, problem = trainer.strategy.broadcast((dirpath, problem), src=0)
    if problem is not None:
        raise OSError(
            f"ModelCheckpoint cannot write checkpoints to {dirpath!r}: {problem}. Pass a writable "
            f"default_root_dir (now {os.fspath(trainer.default_root_dir)!r}) or ModelCheckpoint(dirpath=...)."
        )
    return dirpath


def unwritable(dirpath: str) -> str | None:
    """Why no file can be created in ``dirpath`` (created later, at the first save), or None."""
    if storage.is_url(dirpath):
        return storage.unwritable(dirpath)
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
