"""`DataModule`: a run's data in one object (download, split, loaders, state), and the Trainer's
use of it: which loaders a run takes, and the data hooks around the run, in Lightning 2.x's order.

Before the run's ``setup``: ``datamodule.prepare_data()`` (local rank 0 of each node; the other
ranks wait), then the module's ``prepare_data`` (the same way), then ``datamodule.setup(stage)``;
the callbacks' and the module's ``setup`` follow. At the end, ``datamodule.teardown(stage)`` runs
before theirs.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from trainer.checkpointing.from_checkpoint import check_weights_only, load_datamodule
from trainer.data.data_hooks import DataHooks
from trainer.hyperparameters import HyperparametersMixin
from trainer.stage import Stage

if TYPE_CHECKING:
    from trainer.module import TrainModule
    from trainer.contracts.internals import ModuleInternals, TrainerInternals as Trainer
    from trainer.contracts.run_state import DataHooksView

_D = TypeVar("_D", bound="DataModule")


class DataModule(DataHooks, HyperparametersMixin):
    """Subclass this: define the loaders the runs need, optionally ``prepare_data`` and ``setup``.

    Pass it as ``trainer.fit(model, datamodule=dm)`` (or ``trainer.fit(model, dm)``), and to
    ``validate`` / ``test`` / ``predict`` the same way. Its loaders replace the module's loader
    hooks for that run. Under ``devices=N`` (spawned processes) it must pickle.
    """

    prepare_data_per_node: bool = True  # False: prepare_data runs on global rank 0 only (a shared disk)
    trainer: Trainer | None = None  # the Trainer running it (set at every run)
    name: str | None = None  # Lightning's attribute (a label of your own; Lockstep never reads it)
    # Lightning's names of the checkpoint's keys for a DataModule's hyperparameters
    CHECKPOINT_HYPER_PARAMS_KEY = "datamodule_hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "datamodule_hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "datamodule_hparams_type"

    def on_exception(self, exception: BaseException) -> None:
        """A run raised: called after the callbacks' ``on_exception``, before ``teardown``."""

    @classmethod
    def from_datasets(
        cls,
        train_dataset: Any = None,
        val_dataset: Any = None,
        test_dataset: Any = None,
        predict_dataset: Any = None,
        batch_size: int = 1,
        num_workers: int = 0,
        **loader_kwargs: Any,
    ) -> DataModule:
        """A DataModule whose loaders are DataLoaders over the given datasets (only the training one shuffles)."""
        from torch.utils.data import DataLoader, IterableDataset

        def loaders(data: Any, shuffle: bool) -> Any:
            def one(ds: Any) -> DataLoader[Any]:
                return DataLoader(ds, batch_size=batch_size, num_workers=num_workers,
                                  shuffle=shuffle and not isinstance(ds, IterableDataset), **loader_kwargs)

            if isinstance(data, (list, tuple)):
                return [one(ds) for ds in data]
            return one(data)

        dm = cls()
        given = {"train_dataloader": (train_dataset, True), "val_dataloader": (val_dataset, False),
                 "test_dataloader": (test_dataset, False), "predict_dataloader": (predict_dataset, False)}
        for hook, (data, shuffle) in given.items():
            if data is not None:
                setattr(dm, hook, lambda data=data, shuffle=shuffle: loaders(data, shuffle))
        return dm

    def prepare_data(self) -> None:
        """Download or write data once per node (local rank 0); the other ranks wait."""

    def setup(self, stage: str) -> None:
        """Build what every rank needs for ``stage`` (fit/validate/test/predict): splits, datasets."""

    def teardown(self, stage: str) -> None:
        """Release what ``setup`` built; called also after an exception."""

    def state_dict(self) -> dict[str, Any]:
        """State to save in checkpoints (plain data and tensors, so it loads with weights_only)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (on resume, before any loader is asked for)."""

    @classmethod
    def load_from_checkpoint(
        cls: type[_D],
        checkpoint_path: str | os.PathLike[str],
        map_location: torch.device | str | None = None,
        weights_only: bool | None = None,
        **hparam_overrides: Any,
    ) -> _D:
        """A DataModule rebuilt from a checkpoint's ``datamodule_hyper_parameters``, overridden by
        ``hparam_overrides``, with its saved ``state_dict`` loaded (tensors on ``map_location``).
        ``weights_only=False`` unpickles anything (only for files you trust); the default is safe."""
        safe = check_weights_only(weights_only)
        return load_datamodule(cls, checkpoint_path, map_location, hparam_overrides, weights_only=safe)


def attach_datamodule(
    trainer: Trainer, stage: Stage, loaders: Any, datamodule: DataModule | None, val_loaders: Any = None
) -> tuple[Any, DataModule | None]:
    """The run's loaders and DataModule; a DataModule given in the loaders' place is taken as one.

    Attaches the DataModule to ``trainer`` (``trainer.datamodule``; None when the run has none).
    """
    if isinstance(loaders, DataModule):
        if datamodule is not None:
            raise ValueError(f"trainer.{stage}() got two DataModules: pass one, as datamodule=.")
        loaders, datamodule = None, loaders
    if datamodule is not None:
        if not isinstance(datamodule, DataModule):
            raise TypeError(f"trainer.{stage}(datamodule=...) takes a DataModule, got {type(datamodule).__name__}.")
        if loaders is not None or val_loaders is not None:
            given = "train_dataloaders or val_dataloaders" if stage == Stage.FIT else "dataloaders"
            raise ValueError(
                f"trainer.{stage}() got both {given} and a DataModule: pass one or the other (the "
                "DataModule's loaders would be ignored)."
            )
        datamodule.trainer = trainer
    trainer.datamodule = datamodule
    return loaders, datamodule


def data_source(trainer: Trainer, module: ModuleInternals) -> DataHooksView:
    """Whose loader hooks the run calls: the DataModule's when the run has one, else the module's."""
    return trainer.datamodule if trainer.datamodule is not None else module


def prepare_and_set_up_data(trainer: Trainer, module: TrainModule, stage: Stage) -> None:
    """The data hooks before the run's ``setup``: ``prepare_data`` (once per node), ``datamodule.setup``."""
    datamodule, strategy = trainer.datamodule, trainer.strategy
    if datamodule is not None and type(datamodule).prepare_data is not DataModule.prepare_data:
        if trainer.local_rank == 0 and (datamodule.prepare_data_per_node or trainer.node_rank == 0):
            datamodule.prepare_data()
        strategy.barrier("datamodule.prepare_data")
    if trainer.local_rank == 0:  # every stage, as in Lightning
        module.prepare_data()
    strategy.barrier("prepare_data")
    if datamodule is not None:
        datamodule.setup(stage.value)


def tear_down_data(trainer: Trainer, stage: Stage) -> None:
    """``datamodule.teardown(stage)``, before the module's and callbacks' (as in Lightning)."""
    if trainer.datamodule is not None:
        trainer.datamodule.teardown(stage.value)
