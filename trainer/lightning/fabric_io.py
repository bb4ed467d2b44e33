"""The checkpoint I/O names of Lightning Fabric that libraries built on the Trainer import:
``lightning.fabric.utilities.cloud_io`` (`get_filesystem`, `_load`, `_atomic_save`, as Lightning's)
and ``lightning.fabric.plugins.io`` (`CheckpointIO`, the interface a library's own checkpoint I/O
implements, and `TorchCheckpointIO`, Lightning's ``torch.save`` / ``torch.load`` one). An instance
given as ``Trainer(plugins=[...])`` writes, reads and removes every checkpoint of the run
(`trainer.lightning.plugins.checkpoint_io_plugin`).

Under ``python -m trainer.as_lightning`` these Fabric modules resolve here.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import IO, Any, Optional, Union

import torch

from trainer.checkpoint_io.file_format import atomic_save
from trainer.contracts import storage
from trainer.core import get_filesystem

__all__ = ["CheckpointIO", "TorchCheckpointIO", "get_filesystem"]

_PATH = Union[str, "os.PathLike[str]"]


class CheckpointIO(ABC):
    """Lightning's interface for saving, loading and removing checkpoint files; subclass it and pass
    an instance as ``Trainer(plugins=[...])``."""

    @abstractmethod
    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Optional[Any] = None) -> None:
        """Write ``checkpoint`` to ``path``."""

    @abstractmethod
    def load_checkpoint(self, path: _PATH, map_location: Optional[Any] = None,
                        weights_only: Optional[bool] = None) -> dict[str, Any]:
        """Read the checkpoint at ``path`` (to resume a fit, or for validate / test / predict)."""

    @abstractmethod
    def remove_checkpoint(self, path: _PATH) -> None:
        """Delete the checkpoint at ``path`` (``ModelCheckpoint`` dropping one out of its top k)."""

    def teardown(self) -> None:
        """Called when the run ends (nothing to do here)."""


class TorchCheckpointIO(CheckpointIO):
    """Lightning's default checkpoint I/O: ``torch.save`` (atomic: the old file or the whole new one)
    and ``torch.load``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Optional[Any] = None) -> None:
        """Write ``checkpoint`` to ``path``, making its folder; ``storage_options`` is refused, as Lightning's."""
        if storage_options is not None:
            raise TypeError(
                "`Trainer.save_checkpoint(..., storage_options=...)` with `storage_options` arg"
                f" is not supported for `{type(self).__name__}`. Please implement your custom `CheckpointIO`"
                " to define how you'd like to use `storage_options`."
            )
        atomic_save(checkpoint, path)  # makes the folder; a URL is one upload

    def load_checkpoint(self, path: _PATH, map_location: Optional[Any] = lambda storage, loc: storage,
                        weights_only: Optional[bool] = None) -> dict[str, Any]:
        """The checkpoint at ``path``; `FileNotFoundError` if there is none."""
        if not storage.exists(os.fspath(path)):
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        loaded: dict[str, Any] = _load(path, map_location=map_location, weights_only=weights_only)
        return loaded

    def remove_checkpoint(self, path: _PATH) -> None:
        """Delete the file (or sharded directory) at ``path``; a missing one is not an error."""
        storage.remove(os.fspath(path))


def _load(path_or_url: Union[IO[bytes], _PATH], map_location: Any = None,
          weights_only: Optional[bool] = None) -> Any:
    """``torch.load`` of a file object, a local path or a URL fsspec serves, as Lightning's ``cloud_io._load``."""
    if not isinstance(path_or_url, (str, os.PathLike)):
        return torch.load(path_or_url, map_location=map_location, weights_only=weights_only)
    opener = get_filesystem(path_or_url).open if storage.is_url(path_or_url) else open  # a local file needs no fsspec
    with opener(os.fspath(path_or_url), "rb") as f:
        return torch.load(f, map_location=map_location, weights_only=weights_only)


def _atomic_save(checkpoint: dict[str, Any], filepath: _PATH) -> None:
    """Save ``checkpoint`` so ``filepath`` is the old file or the whole new one, as Lightning's ``cloud_io._atomic_save``."""
    atomic_save(checkpoint, filepath)
