"""Lockstep: a PyTorch trainer whose DDP + accumulation equals one big batch, at no cost.

The public names are imported on first use (PEP 562): ``import trainer.contracts`` (the floor the
callbacks import) must not import the Trainer and, through it, the callbacks.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trainer.contracts.shadowing import check_not_shadowed
from trainer.launch.worker_process import adopt_launcher_from_env

check_not_shadowed("callbacks")  # before anything imports it: a user's callbacks.py would break that

from trainer.contracts.missing_names import explain_missing_names  # noqa: E402 - after the shadowing check
from trainer.lightning import old_names  # noqa: E402
from trainer.lightning.unsupported import not_provided  # noqa: E402 - stdlib only: `import trainer` stays light

explain_missing_names(not_provided)  # `pl.strategies.DeepSpeedStrategy` names what to use instead
old_names.install()  # `trainer.demos`, the Lightning face's paths before `trainer.lightning`, renamed modules' old paths

if TYPE_CHECKING:  # for type checkers and editors: the same names, eagerly
    from trainer.checkpoint_io.file_format import CheckpointError
    from trainer.cli import cli_lightning_logo
    from trainer.checkpointing.resume import GlobalBatchChangedError
    from trainer.contracts.accumulation import GlobalBatchError
    from trainer.data.global_batch_sampler import GlobalBatchSampler
    from trainer.data.datamodule import DataModule
    from trainer.distributed.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn
    from trainer.launch.failure_notes import RankFailedError
    from trainer.launch.preemption import PREEMPTION_EXIT_CODE, Preempted
    from trainer.contracts.errors import NonFiniteGradientError, NonFiniteLossError
    from trainer.module import TrainModule
    from trainer.seed import seed_everything
    from trainer.strategies.allreduce import AllReduceStrategy
    from trainer.strategies.ddp import DDPStrategy
    from trainer.strategies.fsdp import FSDPStrategy
    from trainer.strategies.strategy import SingleDeviceStrategy, Strategy
    from trainer.trainer import Trainer

    LightningModule = TrainModule
    LightningDataModule = DataModule

# Where each public name is defined; Lightning's names map to ours, so a Lightning project ports
# by changing its imports.
_PUBLIC = {
    "Trainer": ("trainer.trainer", "Trainer"),
    "Callback": ("trainer.callbacks", "Callback"),
    "TrainModule": ("trainer.module", "TrainModule"),
    "DataModule": ("trainer.data.datamodule", "DataModule"),
    "LightningModule": ("trainer.module", "TrainModule"),
    "LightningDataModule": ("trainer.data.datamodule", "DataModule"),
    "seed_everything": ("trainer.seed", "seed_everything"),
    "Strategy": ("trainer.strategies.strategy", "Strategy"),
    "SingleDeviceStrategy": ("trainer.strategies.strategy", "SingleDeviceStrategy"),
    "DDPStrategy": ("trainer.strategies.ddp", "DDPStrategy"),
    "AllReduceStrategy": ("trainer.strategies.allreduce", "AllReduceStrategy"),
    "FSDPStrategy": ("trainer.strategies.fsdp", "FSDPStrategy"),
    "rank_zero_only": ("trainer.distributed.rank_zero", "rank_zero_only"),
    "rank_zero_info": ("trainer.distributed.rank_zero", "rank_zero_info"),
    "rank_zero_warn": ("trainer.distributed.rank_zero", "rank_zero_warn"),
    "CheckpointError": ("trainer.checkpoint_io.file_format", "CheckpointError"),
    "GlobalBatchChangedError": ("trainer.checkpointing.resume", "GlobalBatchChangedError"),
    "GlobalBatchError": ("trainer.contracts.accumulation", "GlobalBatchError"),
    "GlobalBatchSampler": ("trainer.data.global_batch_sampler", "GlobalBatchSampler"),
    "NonFiniteLossError": ("trainer.contracts.errors", "NonFiniteLossError"),
    "NonFiniteGradientError": ("trainer.contracts.errors", "NonFiniteGradientError"),
    "RankFailedError": ("trainer.launch.failure_notes", "RankFailedError"),
    "Preempted": ("trainer.launch.preemption", "Preempted"),
    "PREEMPTION_EXIT_CODE": ("trainer.launch.preemption", "PREEMPTION_EXIT_CODE"),
    "cli_lightning_logo": ("trainer.cli", "cli_lightning_logo"),  # Lightning's examples call it first
}

# Lightning's submodules, read as attributes the way Lightning projects do (`pl.callbacks.X`)
_SUBMODULES = ("callbacks", "loggers", "strategies", "utilities", "cli", "tuner", "core", "demos")

__version__ = "0.1.0"  # Lockstep's own; `python -m trainer.as_lightning` shows Lightning's API version
__all__ = list(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"trainer.{name}")  # binds trainer.<name> too
    if name not in _PUBLIC:
        raise not_provided("trainer", name)
    module, attr = _PUBLIC[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # once: later reads are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC, *_SUBMODULES})


adopt_launcher_from_env()  # in a worker of `Trainer(devices=N)`: die with the launcher, whole lines
