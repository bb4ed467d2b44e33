"""Checkpoint files: what they hold, atomic writes, and reading them back."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint file could not be read or does not fit this run."""


def atomic_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write ``obj`` with ``torch.save`` so ``path`` is either the old file or the complete new one.

    The bytes go to a temporary file in the same directory, are fsync'ed, and the file is renamed
    over ``path`` (atomic on POSIX); the directory is fsync'ed so the rename survives a crash.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress_oserror():
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class _suppress_oserror:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return exc_type is not None and issubclass(exc_type, OSError)


def load_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu") -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``; raise `CheckpointError` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"Checkpoint file {str(path)!r} does not exist.")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # truncated zip, bad pickle, refused global: all unreadable here
        raise CheckpointError(
            f"Could not load checkpoint {str(path)!r}: {type(err).__name__}: {err}. The file may be "
            "truncated or corrupt, or contain objects that are not safe to unpickle."
        ) from err
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"{str(path)!r} is not a Lockstep checkpoint (no 'state_dict' entry).")
    return ckpt
