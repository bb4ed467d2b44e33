"""The checkpoint I/O names of Lightning Fabric that libraries built on the Trainer import:
``lightning.fabric.utilities.cloud_io`` (`get_filesystem`, `_load`, `_atomic_save`, as Lightning's)
and ``lightning.fabric.plugins.io.torch_io.TorchCheckpointIO``, a class to name, subclass and test
with ``isinstance``: Lockstep writes and reads its checkpoints itself, so an instance cannot be made.

Under ``python -m trainer.as_lightning`` both Fabric modules resolve here.
"""
from __future__ import annotations

import os
from typing import IO, Any, Optional, Union

import torch

from trainer.checkpoint_io.file_format import atomic_save
from trainer.core import get_filesystem
from trainer.lightning.unsupported import refused_class

__all__ = ["TorchCheckpointIO", "get_filesystem"]

TorchCheckpointIO = refused_class(
    __name__, "TorchCheckpointIO", "the Trainer's own checkpointing (ModelCheckpoint, trainer.save_checkpoint)"
)


def _load(path_or_url: Union[IO[bytes], str, "os.PathLike[str]"], map_location: Any = None,
          weights_only: Optional[bool] = None) -> Any:
    """``torch.load`` of a file object, a local path or a URL fsspec serves, as Lightning's ``cloud_io._load``."""
    if not isinstance(path_or_url, (str, os.PathLike)):
        return torch.load(path_or_url, map_location=map_location, weights_only=weights_only)
    with get_filesystem(path_or_url).open(str(path_or_url), "rb") as f:
        return torch.load(f, map_location=map_location, weights_only=weights_only)


def _atomic_save(checkpoint: dict[str, Any], filepath: Union[str, "os.PathLike[str]"]) -> None:
    """Save ``checkpoint`` so ``filepath`` is the old file or the whole new one, as Lightning's ``cloud_io._atomic_save``."""
    atomic_save(checkpoint, filepath)
