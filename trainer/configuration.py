"""Building the Trainer's `TrainerConfig` (`trainer.contracts.config`) and reading its settings.

The sections check their own arguments; what is left for here needs the code above the
contracts floor: the Lightning arguments Lockstep refuses (`check_trainer_supported`) and the
message that ``fast_dev_run`` rewrote the limits. The Trainer reads each setting as a read-only
attribute of the same name (`TrainerSettings`).
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Callable, NoReturn, TypeVar

from trainer.contracts.config import TrainerConfig
from trainer.distributed.rank_zero import rank_zero_info
from trainer.field_attribute import FieldAttribute
from trainer.lightning.environments import split_environment_plugin
from trainer.lightning.unsupported import check_trainer_supported


def configure(config: TrainerConfig) -> TrainerConfig:
    """``config`` checked for refused arguments, with ``fast_dev_run`` / ``overfit_batches`` applied."""
    check_trainer_supported({
        "barebones": config.debug.barebones,
        "plugins": split_environment_plugin(config.distributed.plugins)[1],  # a cluster environment is taken
        "model_registry": config.checkpointing.model_registry,
    })
    n = config.debug.fast_dev_run
    if n:
        rank_zero_info(
            f"[lockstep] fast_dev_run={n}: {n} batch(es) of train, val, test and predict, 1 epoch, no "
            "sanity check; loggers and checkpointing are off (nothing is written)."
        )
    return config.resolved()


_SECTION_OF = {
    field.name: section
    for section, kind in typing.get_type_hints(TrainerConfig).items()
    for field in dataclasses.fields(kind)
}


_T = TypeVar("_T")


class _Setting(FieldAttribute["TrainerSettings", _T]):
    """A read-only attribute of the Trainer: the setting of the same name, which ``read`` reads from
    the config (``lambda c: c.limits.max_epochs``), so the attribute has the field's type."""

    _source = "config"

    def __init__(self, read: Callable[[TrainerConfig], _T]) -> None:
        super().__init__(read)

    def _path(self, name: str) -> tuple[str, ...]:
        return (_SECTION_OF[name], name)

    def __set__(self, trainer: TrainerSettings, value: NoReturn) -> None:
        raise AttributeError(f"trainer.{self.name} is a setting, fixed when the Trainer is built: pass it as an argument")


class TrainerSettings:
    """The Trainer's settings as read-only attributes (``trainer.max_epochs``...), from ``self.config``."""

    config: TrainerConfig
    max_epochs = _Setting(lambda c: c.limits.max_epochs)
    max_steps = _Setting(lambda c: c.limits.max_steps)
    min_epochs = _Setting(lambda c: c.limits.min_epochs)
    min_steps = _Setting(lambda c: c.limits.min_steps)
    limit_train_batches = _Setting(lambda c: c.limits.limit_train_batches)
    limit_val_batches = _Setting(lambda c: c.limits.limit_val_batches)
    limit_test_batches = _Setting(lambda c: c.limits.limit_test_batches)
    limit_predict_batches = _Setting(lambda c: c.limits.limit_predict_batches)
    scale_lr = _Setting(lambda c: c.loop.scale_lr)
    gradient_clip_val = _Setting(lambda c: c.loop.gradient_clip_val)
    gradient_clip_algorithm = _Setting(lambda c: c.loop.gradient_clip_algorithm)
    val_check_interval = _Setting(lambda c: c.loop.val_check_interval)
    check_val_every_n_epoch = _Setting(lambda c: c.loop.check_val_every_n_epoch)
    num_sanity_val_steps = _Setting(lambda c: c.loop.num_sanity_val_steps)
    reload_dataloaders_every_n_epochs = _Setting(lambda c: c.loop.reload_dataloaders_every_n_epochs)
    compile = _Setting(lambda c: c.loop.compile)
    channels_last = _Setting(lambda c: c.loop.channels_last)
    pin_memory = _Setting(lambda c: c.loop.pin_memory)
    allow_global_batch_change = _Setting(lambda c: c.checkpointing.allow_global_batch_change)
    allow_dataset_change = _Setting(lambda c: c.checkpointing.allow_dataset_change)
    log_every_n_steps = _Setting(lambda c: c.logging.log_every_n_steps)
    enable_autolog_hparams = _Setting(lambda c: c.logging.enable_autolog_hparams)
    fast_dev_run = _Setting(lambda c: c.debug.fast_dev_run)
    overfit_batches = _Setting(lambda c: c.debug.overfit_batches)
    detect_non_finite_grads = _Setting(lambda c: c.debug.detect_non_finite_grads)
    sync_batchnorm = _Setting(lambda c: c.distributed.sync_batchnorm)
    use_distributed_sampler = _Setting(lambda c: c.distributed.use_distributed_sampler)

    @property
    def default_root_dir(self) -> str:
        """Where the run writes: a local path or a URL (the argument as normalized when built)."""
        return self.config.checkpointing.root
