"""`Tuner(trainer)`: Lightning's ``lr_find`` (the learning-rate range test) and ``scale_batch_size``.

Both run trials in a quiet one-process Trainer with the given Trainer's device, precision,
accumulation and clipping, and give the module its weights back afterwards.
"""
from __future__ import annotations

from typing import Any, Optional

from trainer.data.datamodule import DataModule
from trainer.default_callbacks import BatchSizeFinder, LRFinder, lr_find, scale_batch_size
from trainer.module import TrainModule
from trainer.trainer import Trainer

__all__ = ["LRFinder", "Tuner"]


class Tuner:
    """Tunes a module's learning rate or batch size for ``trainer`` before its real ``fit``."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def scale_batch_size(
        self,
        model: TrainModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Optional[DataModule] = None,
        method: str = "fit",
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int = 8192,
    ) -> Optional[int]:
        """The largest batch size that runs without running out of memory, set on the module (or its
        hparams, or the DataModule) as ``batch_arg_name``. The loaders must come from the module's
        or DataModule's hooks, so that they are rebuilt at each size."""
        datamodule, train_dataloaders = _datamodule_first(datamodule, train_dataloaders)
        if train_dataloaders is not None or val_dataloaders is not None or dataloaders is not None:
            raise ValueError(
                "Tuner.scale_batch_size cannot change the batch size of loaders passed to it: define "
                "them in the module's or DataModule's *_dataloader hooks (reading self.batch_size)."
            )
        finder = BatchSizeFinder(mode, steps_per_trial, init_val, max_trials, batch_arg_name, margin, max_val)
        return scale_batch_size(self.trainer, model, datamodule, method, finder)

    def lr_find(
        self,
        model: TrainModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Optional[DataModule] = None,
        method: str = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: Optional[float] = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> Optional[LRFinder]:
        """The range test: ``num_training`` steps from ``min_lr`` to ``max_lr`` (see `LRFinder`);
        ``update_attr`` writes the suggestion to the module's ``lr`` / ``learning_rate``.

        The arguments are checked before anything runs: finite rates ``0 < min_lr < max_lr``,
        ``num_training`` an int >= 1, ``mode`` ``"exponential"`` or ``"linear"``,
        ``early_stop_threshold`` None or > 0 (a ``ValueError``/``TypeError`` naming the argument)."""
        if method != "fit":
            raise ValueError(f"Tuner.lr_find(method={method!r}): only method='fit' is possible.")
        if dataloaders is not None:
            raise ValueError("Tuner.lr_find(dataloaders=...) is for evaluation methods; pass train_dataloaders.")
        datamodule, train_dataloaders = _datamodule_first(datamodule, train_dataloaders)
        return lr_find(
            self.trainer, model, train_dataloaders, val_dataloaders, datamodule, min_lr, max_lr,
            num_training, mode, early_stop_threshold, update_attr, attr_name,
        )


def _datamodule_first(datamodule: Optional[DataModule], train_dataloaders: Any) -> tuple[Optional[DataModule], Any]:
    """A DataModule passed as ``train_dataloaders`` (Lightning allows it) is the datamodule."""
    if isinstance(train_dataloaders, DataModule):
        return train_dataloaders, None
    return datamodule, train_dataloaders
