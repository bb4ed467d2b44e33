"""``lightning.pytorch.core`` under Lockstep's name: `LightningModule` and `LightningDataModule`."""
from __future__ import annotations

from trainer.data.datamodule import DataModule as LightningDataModule
from trainer.module import TrainModule as LightningModule

__all__ = ["LightningDataModule", "LightningModule"]
