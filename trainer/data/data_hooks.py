"""`DataHooks`: the loader and batch-transfer hooks a `TrainModule` and a `DataModule` both have (as in Lightning)."""
from __future__ import annotations

from typing import Any

import torch


class DataHooks:
    """The loader hooks return the stage's DataLoader(s); ``None`` (the default) means "none here".

    The batch-transfer hooks run on every batch of every stage when the DataModule or the module
    overrides one (the DataModule's first, as in Lightning): ``on_before_batch_transfer`` on the
    host, ``transfer_batch_to_device``, then ``on_after_batch_transfer`` on the device.
    """

    def train_dataloader(self) -> Any:
        """The training DataLoader (needed by ``fit`` when none is passed to it)."""
        return None

    def val_dataloader(self) -> Any:
        """The validation DataLoader(s) (``fit`` validates when there are some)."""
        return None

    def test_dataloader(self) -> Any:
        """The test DataLoader(s)."""
        return None

    def predict_dataloader(self) -> Any:
        """The predict DataLoader(s)."""
        return None

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch on the host, before it moves to the device; return it."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move a batch to ``device`` (tensors in lists, tuples, dicts, dataclasses); return it."""
        from trainer.accelerators.accelerator import move_to_device

        return move_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch on the device, after it moved there; return it."""
        return batch
