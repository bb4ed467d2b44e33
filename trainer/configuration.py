"""Building the Trainer's `TrainerConfig` (`trainer.contracts.config`) and reading its settings.

The sections check their own arguments; what is left for here needs the code above the
contracts floor: the Lightning arguments Lockstep refuses (`check_trainer_supported`) and the
message that ``fast_dev_run`` rewrote the limits. The Trainer reads each setting as a read-only
attribute of the same name (`TrainerSettings`).
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any

from trainer.contracts.config import TrainerConfig
from trainer.distributed.rank_zero import rank_zero_info
from trainer.run_state import ForwardedField
from trainer.lightning.unsupported import check_trainer_supported


def configure(config: TrainerConfig) -> TrainerConfig:
    """``config`` checked for refused arguments, with ``fast_dev_run`` / ``overfit_batches`` applied."""
    check_trainer_supported({
        "barebones": config.debug.barebones,
        "plugins": config.distributed.plugins,
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


class _Setting(ForwardedField):
    """A read-only attribute of the Trainer that reads the setting of the same name (in its section)."""

    def __set_name__(self, owner: type, name: str) -> None:
        super().__set_name__(owner, name)
        self.section = _SECTION_OF[name]

    def _holder(self, trainer: Any) -> Any:
        return getattr(trainer.config, self.section)

    def __set__(self, trainer: Any, value: Any) -> None:
        raise AttributeError(f"trainer.{self.name} is a setting, fixed when the Trainer is built: pass it as an argument")


class TrainerSettings:
    """The Trainer's settings as read-only attributes (``trainer.max_epochs``...), from ``self.config``."""

    config: TrainerConfig
    max_epochs = _Setting()
    max_steps = _Setting()
    min_epochs = _Setting()
    min_steps = _Setting()
    limit_train_batches = _Setting()
    limit_val_batches = _Setting()
    limit_test_batches = _Setting()
    limit_predict_batches = _Setting()
    scale_lr = _Setting()
    gradient_clip_val = _Setting()
    gradient_clip_algorithm = _Setting()
    val_check_interval = _Setting()
    check_val_every_n_epoch = _Setting()
    num_sanity_val_steps = _Setting()
    reload_dataloaders_every_n_epochs = _Setting()
    compile = _Setting()
    channels_last = _Setting()
    pin_memory = _Setting()
    default_root_dir = _Setting()
    allow_global_batch_change = _Setting()
    allow_dataset_change = _Setting()
    log_every_n_steps = _Setting()
    enable_autolog_hparams = _Setting()
    fast_dev_run = _Setting()
    overfit_batches = _Setting()
    detect_non_finite_grads = _Setting()
    sync_batchnorm = _Setting()
    use_distributed_sampler = _Setting()
