"""`DataHooks`: the loader hooks a `TrainModule` and a `DataModule` both have (as in Lightning)."""
from __future__ import annotations

from typing import Any


class DataHooks:
    """Each hook returns the stage's DataLoader(s); ``None`` (the default) means "none here"."""

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
