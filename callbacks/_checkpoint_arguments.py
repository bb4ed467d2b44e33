"""`ModelCheckpoint`'s arguments checked before anything is built, one message style
(`trainer.contracts.arguments`)."""

from __future__ import annotations

import datetime
import os
from typing import Any

from callbacks._utils import _validate_mode
from trainer.contracts import storage
from trainer.contracts.arguments import check_bool, check_int, check_path


def check_arguments(
    dirpath: str | os.PathLike[str] | None,
    filename: Any,
    monitor: Any,
    mode: str,
    save_top_k: Any,
    save_last: Any,
    schedule: tuple[Any, Any, Any],
    flags: dict[str, Any],
) -> tuple[str | None, int | None]:
    """Every argument of `ModelCheckpoint`: ``schedule`` is ``(every_n_train_steps,
    every_n_epochs, train_time_interval)``, ``flags`` the bool arguments by name (None allowed for
    ``save_on_train_epoch_end``). Returns ``dirpath`` normalized and ``every_n_epochs`` as it
    applies (1 when no schedule is given)."""
    _validate_mode(mode, "ModelCheckpoint")
    check_path("ModelCheckpoint(dirpath)", dirpath)
    _check_ranking(monitor, save_top_k, save_last)
    every_n_epochs = _check_schedule(*schedule)
    for arg, value in flags.items():
        check_bool(f"ModelCheckpoint({arg})", value, allow_none=arg == "save_on_train_epoch_end")
    if filename is not None and not isinstance(filename, str):
        raise TypeError(f"ModelCheckpoint(filename={filename!r}): expected a str template.")
    path = None if dirpath is None else storage.normalize(os.path.expanduser(os.fspath(dirpath)), "dirpath")
    if save_last == "link" and path is not None and storage.is_url(path):
        raise ValueError(f"ModelCheckpoint(save_last='link') needs a local dirpath, got {path!r}.")
    return path, every_n_epochs


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
