"""``lightning.pytorch.core`` under Lockstep's name: `LightningModule` and `LightningDataModule`, and
the names libraries import from its modules (``core.mixins.HyperparametersMixin``,
``core.saving.get_filesystem``)."""
from __future__ import annotations

import os
from typing import Any, Union

from trainer.data.datamodule import DataModule as LightningDataModule
from trainer.hyperparameters import HyperparametersMixin
from trainer.loops.optimization import LoopOptimizer as LightningOptimizer  # what self.optimizers() gives
from trainer.module import TrainModule as LightningModule

__all__ = ["HyperparametersMixin", "LightningDataModule", "LightningModule", "LightningOptimizer", "get_filesystem"]


def get_filesystem(path: Union[str, "os.PathLike[str]"], **kwargs: Any) -> Any:
    """The fsspec filesystem that serves ``path`` (a local path or a URL), as Lightning's; needs fsspec."""
    from fsspec.core import url_to_fs

    filesystem, _ = url_to_fs(str(path), **kwargs)
    return filesystem
