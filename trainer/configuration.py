"""The Trainer's plain settings, and the debugging switches that rewrite them (``fast_dev_run``,
``overfit_batches``), applied once in ``Trainer.__init__`` after the argument checks."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

from trainer.contracts import storage
from trainer.distributed.rank_zero import rank_zero_info
from trainer.profiler import make_profiler

if TYPE_CHECKING:
    from trainer.trainer import Trainer

_PLAIN = (
    "compile",  # torch.compile the module (in place) before the strategy wraps it
    "channels_last",  # module and 4-D batches in torch.channels_last
    "pin_memory",  # CUDA: pin train/val loaders that do not pin yet
    "max_steps",
    "accumulate_grad_batches",
    "sync_batchnorm",
    "scale_lr",
    "gradient_clip_algorithm",
    "log_every_n_steps",
    "val_check_interval",
    "check_val_every_n_epoch",
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
    "num_sanity_val_steps",
    "use_distributed_sampler",
    "allow_global_batch_change",  # a resume may continue with another global batch (warned)
    "detect_non_finite_grads",
    "overfit_batches",
    "reload_dataloaders_every_n_epochs",
)


def configure(trainer: Trainer, args: Mapping[str, Any]) -> None:
    """Set ``trainer``'s public settings from its (checked) arguments."""
    for name in _PLAIN:
        setattr(trainer, name, args[name])
    max_epochs = args["max_epochs"]
    if max_epochs is None and args["max_steps"] == -1:
        # Lightning's default when no limit is given; with max_time the time is the limit
        max_epochs = 1000 if args["max_time"] is None else -1
    trainer.max_epochs = max_epochs
    clip = args["gradient_clip_val"]
    trainer.gradient_clip_val = float(clip) if clip is not None else None
    trainer.default_root_dir = storage.normalize(args["default_root_dir"] or os.getcwd(), "default_root_dir")
    trainer.profiler = make_profiler(args["profiler"])
    trainer.fast_dev_run = fast_dev_batches(args["fast_dev_run"])
    if trainer.fast_dev_run:
        _apply_fast_dev_run(trainer, trainer.fast_dev_run)
    elif args["overfit_batches"]:
        # the same first batches every epoch, and as many validation batches (as in Lightning 2.x)
        trainer.limit_train_batches = trainer.limit_val_batches = args["overfit_batches"]


def fast_dev_batches(fast_dev_run: bool | int) -> int:
    """Batches per loader that ``fast_dev_run`` runs (``True``: 1); 0 when it is off."""
    return 1 if fast_dev_run is True else int(fast_dev_run)


def _apply_fast_dev_run(trainer: Trainer, n: int) -> None:
    trainer.limit_train_batches = trainer.limit_val_batches = n
    trainer.limit_test_batches = trainer.limit_predict_batches = n
    trainer.max_steps, trainer.max_epochs = n, 1
    trainer.num_sanity_val_steps = 0
    trainer.val_check_interval, trainer.check_val_every_n_epoch = 1.0, 1
    rank_zero_info(
        f"[lockstep] fast_dev_run={n}: {n} batch(es) of train, val, test and predict, 1 epoch, no "
        "sanity check; loggers and checkpointing are off (nothing is written)."
    )
