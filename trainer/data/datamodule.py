"""`DataModule`: the loaders of a run in one class, so a config can name them (``--data``)."""
from __future__ import annotations

from typing import Any


class DataModule:
    """Holds the data of a run; subclass it and override the loaders you have.

    ``python -m trainer`` builds it from ``--data.class_path`` and its ``__init__`` arguments and
    passes ``train_dataloader()`` and ``val_dataloader()`` to ``fit``, ``val_dataloader()`` to
    ``validate``, and so on. A method that returns None leaves that stage to the module's own
    loader method. Each method is called once per Trainer call, on every rank.
    """

    def train_dataloader(self) -> Any:
        """The training loader (None: the module's)."""
        return None

    def val_dataloader(self) -> Any:
        """The validation loader(s) (None: the module's)."""
        return None

    def test_dataloader(self) -> Any:
        """The test loader(s) (None: the module's)."""
        return None

    def predict_dataloader(self) -> Any:
        """The prediction loader(s) (None: the module's)."""
        return None
