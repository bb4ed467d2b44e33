"""What a checkpoint holds, and restoring a run from one in named steps.

A checkpoint holds the module, every optimizer, scheduler and grad-scaler state, the fit's
position (`FitProgress`: epoch, global step, place inside the epoch), every callback's state, the
hyperparameters, the DataModule's state and hyperparameters (when the run has one), the world
size and accumulation it was made with, the run's id and attempt (a restart resumes only its own
run's checkpoints, `trainer.contracts.run_identity`), and each rank's RNG and loader-generator states together
with the RNG states that decided the interrupted epoch's order (see `trainer.checkpointing.resume`).
Restoring runs: the DataModule's state (before its loaders are made), then weights, callbacks,
optimizers and schedulers, position, random state.
The objects that serialize themselves under a key of their own (callbacks, optimizers,
schedulers, precision) are saved and restored by walking `trainer.checkpointing.stateful`'s registry.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from trainer.contracts import storage
from trainer.contracts.run_identity import attempt, run_id
from trainer.contracts.protocols import torch_module

from trainer.checkpoint_io.file_format import FORMAT_VERSION, LIGHTNING_VERSION_KEY, check_compatible
from trainer.checkpointing.checkpoint_paths import RUN_ID_KEY, read_checkpoint
from trainer.checkpointing.from_checkpoint import DATAMODULE_HPARAMS_KEY, DATAMODULE_STATE_KEY, MODULE_HPARAMS_KEY
from trainer.checkpointing.from_checkpoint import hparams_entries
from trainer.checkpointing.resume import gather_rank_states
from trainer.checkpointing.stateful import OPTIMIZER_STATES, load_states, save_states, stateful_objects

from trainer.lightning.alias import LIGHTNING_API_VERSION

if TYPE_CHECKING:
    from trainer.contracts.internals import TrainerInternals as Trainer


def dump_checkpoint(trainer: Trainer, gather: bool = True, weights_only: bool = False) -> dict[str, Any]:
    """Everything needed to continue ``trainer``'s run exactly (a collective: all ranks call it).

    ``gather=False``: no collective; ``rank_states`` holds only this rank's entry.
    ``weights_only=True``: the module, the position and the hyperparameters only (no collective);
    such a file loads with ``load_from_checkpoint`` but cannot resume a fit.
    """
    module, loop, strategy = trainer.module, trainer.fit_loop, trainer.strategy
    checkpoint: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        # the Lightning release whose layout the file also has (`FitProgress.state_dict` writes
        # Lightning's loop counters): Lightning reads it first, to migrate older files
        LIGHTNING_VERSION_KEY: LIGHTNING_API_VERSION,
        "state_dict": strategy.module_state(torch_module(module)),
        # the loop's state (position, lr_scaled); a weights-only file keeps the position alone
        **(loop.progress.state_dict() if weights_only else loop.state_dict()),
        **hparams_entries(module, MODULE_HPARAMS_KEY, "hparams_name"),
        "world_size": trainer.world_size,
        "accumulate_grad_batches": trainer.accumulate_grad_batches,
        RUN_ID_KEY: run_id(),
        "run_attempt": attempt(),
    }
    if not weights_only:
        checkpoint.update(save_states(stateful_objects(trainer)))
        checkpoint["optimizer_classes"] = [type(opt).__qualname__ for opt in trainer.optimizers]
        checkpoint["rank_states"] = gather_rank_states(trainer, gather)
    datamodule = trainer.datamodule
    if datamodule is not None:
        checkpoint[DATAMODULE_STATE_KEY] = datamodule.state_dict()
        checkpoint.update(hparams_entries(datamodule, DATAMODULE_HPARAMS_KEY, "datamodule_hparams_name"))
    if not weights_only:  # as Lightning: the callbacks add nothing to a weights-only file
        trainer.hooks.call_callbacks("on_save_checkpoint", checkpoint)
    module.on_save_checkpoint(checkpoint)  # after the callbacks, as in Lightning
    return checkpoint


def save_checkpoint(trainer: Trainer, filepath: str | os.PathLike[str], weights_only: bool = False) -> None:
    """`Trainer.save_checkpoint`: check the losses, dump on every rank, write (the strategy decides how)."""
    loss_check, strategy = trainer.fit_loop.loss_check, trainer.strategy
    path = storage.normalize(filepath, "filepath")
    if trainer.state.failing and trainer.world_size > 1:
        if trainer.is_global_zero:  # the peers may be gone: no collective
            loss_check.check_before_save(strategy, agree=False)
            strategy.write_checkpoint(dump_checkpoint(trainer, gather=False, weights_only=weights_only), path, alone=True)
        return
    loss_check.check_before_save(strategy)
    strategy.write_checkpoint(dump_checkpoint(trainer, weights_only=weights_only), path)


def restore_checkpoint(trainer: Trainer, checkpoint: dict[str, Any], path: str) -> None:
    """Restore a fit from ``checkpoint`` in named steps, after checking it fits the run (the
    DataModule's state is restored before, by `restore_datamodule`, ahead of its loaders)."""
    _rebuild_optimizer_groups(trainer, checkpoint, path)
    _restore_weights(trainer, checkpoint)
    trainer.hooks.call_callbacks("on_load_checkpoint", checkpoint)  # before the callbacks' states
    load_states(stateful_objects(trainer), checkpoint)  # callbacks, optimizers, schedulers, precision
    trainer.fit_loop.load_state_dict(checkpoint, path)  # the position: the loop plans how it continues


def _rebuild_optimizer_groups(trainer: Trainer, checkpoint: dict[str, Any], path: str) -> None:
    """Let callbacks that add parameter groups during a fit (`BaseFinetuning`) put them back, then check.

    The saved optimizer states hold those groups and a fresh ``configure_optimizers`` does not, so
    the check must see the rebuilt optimizers. A refused checkpoint leaves the groups and
    ``requires_grad`` flags as they were: nothing is changed.
    """
    module, optimizers = trainer.module, trainer.optimizers
    groups_before = [list(opt.param_groups) for opt in optimizers]
    grad_before = [(p, p.requires_grad) for p in module.parameters()]
    try:
        for callback in trainer.callbacks:
            rebuild = getattr(callback, "rebuild_optimizer_groups", None)
            if callable(rebuild):
                rebuild(trainer, module, checkpoint)
        check_compatible(checkpoint, path, torch_module(module), optimizers, trainer.lr_scheduler_configs)
    except BaseException:
        for opt, groups in zip(optimizers, groups_before):
            opt.param_groups = groups
        for param, flag in grad_before:
            param.requires_grad_(flag)
        raise


def refuse_weights_only(checkpoint: dict[str, Any], path: str) -> None:
    """A weights-only checkpoint cannot resume a fit: say so, and what it is good for."""
    if OPTIMIZER_STATES not in checkpoint:
        raise ValueError(
            f"fit(ckpt_path={path!r}): this checkpoint holds only the model's weights (written with "
            "ModelCheckpoint(save_weights_only=True) or trainer.save_checkpoint(..., weights_only=True)), "
            "so it cannot resume training. Load it with YourModule.load_from_checkpoint(path) and call "
            "fit without ckpt_path, or resume from a full checkpoint."
        )


def load_weights(trainer: Trainer, ckpt_path: Any, weights_only: bool = True) -> dict[str, Any]:
    """Load the module's weights and the DataModule's state from ``ckpt_path`` (validate, test, predict)."""
    path, checkpoint = read_checkpoint(trainer, ckpt_path, weights_only)
    module = torch_module(trainer.module)
    check_compatible(checkpoint, path, module, [], [])
    trainer.strategy.load_module_state(module, checkpoint["state_dict"])
    restore_datamodule(trainer, checkpoint)
    return checkpoint


def restore_datamodule(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    """The run's DataModule gets its saved state (first: its loaders may depend on it)."""
    if trainer.datamodule is not None and DATAMODULE_STATE_KEY in checkpoint:
        trainer.datamodule.load_state_dict(checkpoint[DATAMODULE_STATE_KEY])


def _restore_weights(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    trainer.strategy.load_module_state(torch_module(trainer.module), checkpoint["state_dict"])
    trainer.module.on_load_checkpoint(checkpoint)
