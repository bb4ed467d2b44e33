"""What a checkpoint holds, and restoring a run from one in named steps.

A checkpoint holds the module, every optimizer, scheduler and grad-scaler state, the fit's
position (`FitProgress`: epoch, global step, place inside the epoch), every callback's state, the
hyperparameters, the DataModule's state and hyperparameters (when the run has one), the world
size and accumulation it was made with, and each rank's RNG and loader-generator states together
with the RNG states that decided the interrupted epoch's order (see `trainer.checkpointing.resume`).
Restoring runs: the DataModule's state (before its loaders are made), then weights, callbacks,
optimizers and schedulers, position, random state.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from trainer.contracts import storage

from trainer.checkpointing.checkpoint import (
    FORMAT_VERSION,
    check_compatible,
    weights_only_loadable,
)
from trainer.checkpointing.checkpoint_paths import read_checkpoint
from trainer.checkpointing.from_checkpoint import (
    DATAMODULE_HPARAMS_KEY,
    DATAMODULE_STATE_KEY,
    MODULE_HPARAMS_KEY,
)
from trainer.checkpointing.resume import (
    gather_rank_states,
    restore_generators,
    restore_loader_position,
    restore_rng_state,
    restore_sampler_seeds,
)
from trainer.data.global_batch_sampler import global_batch_sampler
from trainer.distributed.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from trainer.contracts.protocols import TrainerInternals as Trainer


def dump_checkpoint(trainer: Trainer, gather: bool = True, weights_only: bool = False) -> dict[str, Any]:
    """Everything needed to continue ``trainer``'s run exactly (a collective: all ranks call it).

    ``gather=False``: no collective; ``rank_states`` holds only this rank's entry.
    ``weights_only=True``: the module, the position and the hyperparameters only (no collective);
    such a file loads with ``load_from_checkpoint`` but cannot resume a fit.
    """
    module, loop, strategy = trainer.module, trainer.fit_loop, trainer.strategy
    checkpoint: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "state_dict": strategy.module_state(module),
        # the loop's state (position, lr_scaled); a weights-only file keeps the position alone
        **(loop.progress.state_dict() if weights_only else loop.state_dict()),
        MODULE_HPARAMS_KEY: weights_only_loadable(dict(module.hparams)),
        "world_size": trainer.world_size,
        "accumulate_grad_batches": trainer.accumulate_grad_batches,
    }
    if not weights_only:
        checkpoint.update({
            "optimizer_states": [strategy.optimizer_state(opt) for opt in trainer.optimizers],
            "optimizer_classes": [type(opt).__qualname__ for opt in trainer.optimizers],
            "lr_schedulers": [cfg.scheduler.state_dict() for cfg in trainer.lr_scheduler_configs],
            "precision": trainer.precision_plugin.state_dict(),
            "rank_states": gather_rank_states(trainer, gather),
            "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
        })
    datamodule = trainer.datamodule
    if datamodule is not None:
        checkpoint[DATAMODULE_STATE_KEY] = datamodule.state_dict()
        checkpoint[DATAMODULE_HPARAMS_KEY] = weights_only_loadable(dict(datamodule.hparams))
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
    check_compatible(checkpoint, path, trainer.module, trainer.optimizers, trainer.lr_scheduler_configs)
    _restore_weights(trainer, checkpoint)
    _restore_callbacks(trainer, checkpoint)
    _restore_optimization(trainer, checkpoint)
    _restore_position(trainer, checkpoint)


def refuse_weights_only(checkpoint: dict[str, Any], path: str) -> None:
    """A weights-only checkpoint cannot resume a fit: say so, and what it is good for."""
    if "optimizer_states" not in checkpoint:
        raise ValueError(
            f"fit(ckpt_path={path!r}): this checkpoint holds only the model's weights (written with "
            "ModelCheckpoint(save_weights_only=True) or trainer.save_checkpoint(..., weights_only=True)), "
            "so it cannot resume training. Load it with YourModule.load_from_checkpoint(path) and call "
            "fit without ckpt_path, or resume from a full checkpoint."
        )


def load_weights(trainer: Trainer, ckpt_path: Any, weights_only: bool = True) -> dict[str, Any]:
    """Load the module's weights and the DataModule's state from ``ckpt_path`` (validate, test, predict)."""
    path, checkpoint = read_checkpoint(trainer, ckpt_path, weights_only)
    check_compatible(checkpoint, path, trainer.module, [], [])
    trainer.strategy.load_module_state(trainer.module, checkpoint["state_dict"])
    restore_datamodule(trainer, checkpoint)
    return checkpoint


def restore_datamodule(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    """The run's DataModule gets its saved state (first: its loaders may depend on it)."""
    if trainer.datamodule is not None and DATAMODULE_STATE_KEY in checkpoint:
        trainer.datamodule.load_state_dict(checkpoint[DATAMODULE_STATE_KEY])


def _restore_weights(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    trainer.strategy.load_module_state(trainer.module, checkpoint["state_dict"])
    trainer.module.on_load_checkpoint(checkpoint)


def _restore_callbacks(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    trainer.hooks.call_callbacks("on_load_checkpoint", checkpoint)
    states = checkpoint.get("callbacks", {})
    for cb in trainer.callbacks:
        if cb.state_key in states:
            cb.load_state_dict(states[cb.state_key])


def _restore_optimization(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    for opt, state in zip(trainer.optimizers, checkpoint["optimizer_states"]):
        trainer.strategy.load_optimizer_state(opt, state)
    for cfg, state in zip(trainer.lr_scheduler_configs, checkpoint.get("lr_schedulers", [])):
        cfg.scheduler.load_state_dict(state)
    trainer.precision_plugin.load_state_dict(checkpoint.get("precision", {}))


def _restore_position(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    """The epoch, step and place in the epoch, and the random state that continues from there.

    A checkpoint that records the position in samples (a `GlobalBatchSampler` run) resumes on
    any world size: the data order continues at the next unseen sample. Rank ``r`` takes the
    saved random states of rank ``r`` (rank 0's when the saved run had fewer ranks).
    """
    trainer.fit_loop.load_state_dict(checkpoint)
    progress = trainer.fit_loop.progress
    finished, batches_done = progress.epoch_finished, progress.batches_done
    samples_done, saved_batch = progress.samples_done, progress.global_batch_size
    by_samples = samples_done is not None and global_batch_sampler(trainer.train_dataloader) is not None
    saved_world = int(checkpoint.get("world_size", trainer.world_size))
    rank_states = checkpoint.get("rank_states")
    usable = rank_states is not None and (saved_world == trainer.world_size or by_samples)
    if saved_world != trainer.world_size:
        rank_zero_warn(
            f"Resuming a checkpoint made with world size {saved_world} on world size "
            f"{trainer.world_size}: the module, optimizer and scheduler states are restored (the "
            "learning rates as saved, not scaled again), "
            + (
                "the data order continues exactly at the next unseen sample; random numbers drawn "
                "per rank (dropout, augmentation) follow other streams than the saved run's "
                "(docs/fault-tolerance.md)."
                if by_samples
                else "but the data order changes"
                + (" and the interrupted epoch restarts from its first batch." if batches_done and not finished else ".")
            )
        )
    source = trainer.global_rank if trainer.global_rank < saved_world else 0
    mine = rank_states[source] if usable else None
    if finished or not batches_done:
        if finished:
            progress.finish_epoch()
        else:
            progress.start_epoch(0)
        if mine is not None:
            restore_rng_state(mine["rng"])
            restore_generators(trainer.train_dataloader, mine.get("generators", []))
            restore_loader_position(trainer.train_dataloader, mine.get("loader"))
            if mine.get("epoch_state") is not None:
                restore_sampler_seeds(trainer.train_dataloader, mine["epoch_state"])
        if by_samples:  # the next epoch starts afresh; its global batch is checked
            trainer.fit_loop.resume_mid_epoch(0, None, None, samples_done=0, global_batch_size=saved_batch)
        return
    progress.start_epoch(0)  # the loop starts the epoch where `resume_mid_epoch` says
    if usable and any(s is None or s.get("epoch_state") is None for s in rank_states):
        # Every rank must make the same choice, or one resumes mid-epoch while another restarts
        # the epoch and they wait in different collectives.
        rank_zero_warn(
            "The checkpoint holds the interrupted epoch's order for only some ranks (written by "
            "save_checkpoint while the run was failing, or outside a fit): the epoch restarts "
            "from its first batch on every rank."
        )
        return
    if mine is None or mine.get("epoch_state") is None:
        return  # the epoch restarts from its first batch (warned above)
    accumulate = int(checkpoint.get("accumulate_grad_batches", 1))
    start = batches_done - batches_done % accumulate
    if start != batches_done:
        rank_zero_warn(
            f"The checkpoint was written inside an accumulation window ({batches_done % accumulate} of "
            f"{accumulate} micro batches); that window is trained again from its first micro batch."
        )
    trainer.fit_loop.resume_mid_epoch(
        start, mine["epoch_state"], mine["rng"],
        samples_done=samples_done if by_samples else None, global_batch_size=saved_batch,
    )
