"""``load_from_checkpoint``: a `TrainModule` or `DataModule` rebuilt from a checkpoint (a file, or
a sharded checkpoint directory, read whole in this process).

The object is made from the hyperparameters the checkpoint saved (``save_hyperparameters``),
overridden by the caller's keyword arguments; then the saved state is loaded. The file is read
with ``weights_only=True``: a checkpoint cannot run code when it is loaded.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, TypeVar

import torch

from trainer.accelerators.accelerator import move_to_device
from trainer.checkpoint_io.sharded_read import load_full
from trainer.hyperparameters import instantiate

_M = TypeVar("_M", bound=torch.nn.Module)  # a TrainModule
_D = TypeVar("_D")  # a DataModule

MODULE_HPARAMS_KEY = "hyper_parameters"
DATAMODULE_HPARAMS_KEY = "datamodule_hyper_parameters"  # Lightning's name for them
DATAMODULE_STATE_KEY = "datamodule"
# appended to a hyperparameters key: the names stored only as text (`file_format.stored_as_text`)
TEXT_ONLY_SUFFIX = "_as_text"


def load_module(
    cls: type[_M],
    path: str | os.PathLike[str],
    map_location: torch.device | str | None,
    strict: bool,
    overrides: Mapping[str, Any],
) -> _M:
    """`TrainModule.load_from_checkpoint`: rebuilt, weights loaded, in eval mode on ``map_location``."""
    device = _device(map_location)
    checkpoint = load_full(path, weights_only=True)
    module = instantiate(cls, *_saved(checkpoint, MODULE_HPARAMS_KEY), overrides, os.fspath(path))
    module.on_load_checkpoint(checkpoint)
    module.load_state_dict(checkpoint["state_dict"], strict=strict)
    return module.to(device).eval()


def load_datamodule(
    cls: type[_D], path: str | os.PathLike[str], map_location: torch.device | str | None, overrides: Mapping[str, Any]
) -> _D:
    """`DataModule.load_from_checkpoint`: rebuilt, its saved ``state_dict`` (if any) loaded.

    Tensors in that state are put on ``map_location`` (the CPU by default).
    """
    device = _device(map_location)
    checkpoint = load_full(path, weights_only=True)
    datamodule = instantiate(cls, *_saved(checkpoint, DATAMODULE_HPARAMS_KEY), overrides, os.fspath(path))
    if DATAMODULE_STATE_KEY in checkpoint:
        datamodule.load_state_dict(move_to_device(checkpoint[DATAMODULE_STATE_KEY], device))
    return datamodule


def _saved(checkpoint: Mapping[str, Any], key: str) -> tuple[dict[str, Any], list[str]]:
    """The hyperparameters saved under ``key``, and the names among them stored only as text."""
    return dict(checkpoint.get(key) or {}), list(checkpoint.get(key + TEXT_ONLY_SUFFIX) or [])


def _device(map_location: Any) -> torch.device:
    if map_location is None:
        return torch.device("cpu")
    if isinstance(map_location, (str, torch.device)):
        return torch.device(map_location)
    raise TypeError(
        f"load_from_checkpoint(map_location=...) takes a torch.device, a device string ('cpu', "
        f"'cuda:0') or None (the CPU); got {type(map_location).__name__}."
    )
