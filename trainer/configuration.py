"""`TrainerConfig`: the Trainer's settings, checked and resolved once from its arguments.

The debugging switches that rewrite settings (``fast_dev_run``, ``overfit_batches``) are applied
here, once; the result is frozen. The Trainer reads each setting as a read-only attribute of the
same name (`TrainerSettings`). What changes during a run (``should_stop``, the current
``accumulate_grad_batches``, optimizers, loaders) stays on the Trainer.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from trainer.checks import check_trainer_arguments
from trainer.contracts import storage
from trainer.distributed.rank_zero import rank_zero_info


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """The Trainer's plain settings (docs/trainer.md describes each argument)."""

    max_epochs: int | None  # resolved: 1000 (Lightning's default), or -1 when max_time is the limit
    max_steps: int
    min_epochs: int | None  # should_stop (early stopping) waits for these, as in Lightning
    min_steps: int | None
    sync_batchnorm: bool
    scale_lr: bool | str
    gradient_clip_val: float | None
    gradient_clip_algorithm: str
    default_root_dir: str  # normalized: a local path or a URL
    log_every_n_steps: int
    val_check_interval: int | float
    check_val_every_n_epoch: int | None
    limit_train_batches: int | float | None
    limit_val_batches: int | float | None
    limit_test_batches: int | float | None
    limit_predict_batches: int | float | None
    num_sanity_val_steps: int
    use_distributed_sampler: bool
    allow_global_batch_change: bool  # a resume may continue with another global batch (warned)
    allow_dataset_change: bool  # a resume mid-epoch over another dataset length restarts that epoch (warned)
    detect_non_finite_grads: bool
    compile: bool  # torch.compile the module (in place) before the strategy wraps it
    channels_last: bool  # module and 4-D batches in torch.channels_last
    pin_memory: bool  # CUDA: pin train/val loaders that do not pin yet
    fast_dev_run: int  # batches per loader (0: off)
    overfit_batches: int | float
    reload_dataloaders_every_n_epochs: int
    inference_mode: bool  # evaluation under torch.inference_mode (else no_grad), as Lightning chooses
    detect_anomaly: bool  # the fit loop under torch.autograd.set_detect_anomaly
    enable_autolog_hparams: bool  # the hyperparameters go to the loggers at the start of a fit

    @classmethod
    def from_arguments(cls, args: Mapping[str, Any]) -> TrainerConfig:
        """Check the Trainer's arguments and resolve them into settings."""
        check_trainer_arguments(args)
        plain = {f.name: args[f.name] for f in dataclasses.fields(cls)}
        max_epochs = args["max_epochs"]
        if max_epochs is None and args["max_steps"] == -1:
            # Lightning's default when no limit is given; with max_time the time is the limit
            max_epochs = 1000 if args["max_time"] is None else -1
        clip = args["gradient_clip_val"]
        config = cls(**{
            **plain,
            "max_epochs": max_epochs,
            "gradient_clip_val": float(clip) if clip is not None else None,
            "default_root_dir": storage.normalize(args["default_root_dir"] or os.getcwd(), "default_root_dir"),
            "fast_dev_run": fast_dev_batches(args["fast_dev_run"]),
        })
        if config.fast_dev_run:
            return _fast_dev_run(config, config.fast_dev_run)
        if config.overfit_batches:
            # the same first batches every epoch, and as many validation batches (as in Lightning 2.x)
            n = config.overfit_batches
            return dataclasses.replace(config, limit_train_batches=n, limit_val_batches=n)
        return config


def fast_dev_batches(fast_dev_run: bool | int) -> int:
    """Batches per loader that ``fast_dev_run`` runs (``True``: 1); 0 when it is off."""
    return 1 if fast_dev_run is True else int(fast_dev_run)


def _fast_dev_run(config: TrainerConfig, n: int) -> TrainerConfig:
    rank_zero_info(
        f"[lockstep] fast_dev_run={n}: {n} batch(es) of train, val, test and predict, 1 epoch, no "
        "sanity check; loggers and checkpointing are off (nothing is written)."
    )
    return dataclasses.replace(
        config,
        limit_train_batches=n, limit_val_batches=n, limit_test_batches=n, limit_predict_batches=n,
        max_steps=n, max_epochs=1, num_sanity_val_steps=0, val_check_interval=1.0, check_val_every_n_epoch=1,
    )


class _Setting:
    """A read-only attribute of the Trainer that reads the setting of the same name."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, trainer: Any, owner: type | None = None) -> Any:
        if trainer is None:
            return self
        return getattr(trainer.config, self.name)

    def __set__(self, trainer: Any, value: Any) -> None:
        raise AttributeError(f"trainer.{self.name} is a setting, fixed when the Trainer is built: pass it as an argument")


class TrainerSettings:
    """The Trainer's settings as read-only attributes (``trainer.max_epochs``...), from ``self.config``."""

    config: TrainerConfig
    max_epochs = _Setting()
    max_steps = _Setting()
    min_epochs = _Setting()
    min_steps = _Setting()
    sync_batchnorm = _Setting()
    scale_lr = _Setting()
    gradient_clip_val = _Setting()
    gradient_clip_algorithm = _Setting()
    default_root_dir = _Setting()
    log_every_n_steps = _Setting()
    val_check_interval = _Setting()
    check_val_every_n_epoch = _Setting()
    limit_train_batches = _Setting()
    limit_val_batches = _Setting()
    limit_test_batches = _Setting()
    limit_predict_batches = _Setting()
    num_sanity_val_steps = _Setting()
    use_distributed_sampler = _Setting()
    allow_global_batch_change = _Setting()
    allow_dataset_change = _Setting()
    detect_non_finite_grads = _Setting()
    compile = _Setting()
    channels_last = _Setting()
    pin_memory = _Setting()
    fast_dev_run = _Setting()
    overfit_batches = _Setting()
    reload_dataloaders_every_n_epochs = _Setting()
    enable_autolog_hparams = _Setting()
