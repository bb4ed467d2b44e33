"""Where a run's checkpoints are: ``ckpt_path`` ("last", "best", a path) resolved and read, and
where a pre-empted run saves. Global rank 0 decides; every rank reads."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.checkpointing.distributed_checkpoint import is_sharded_checkpoint
from trainer.contracts import storage

if TYPE_CHECKING:
    from trainer.contracts.protocols import TrainerInternals as Trainer


def read_checkpoint(trainer: Trainer, ckpt_path: Any, weights_only: bool = True) -> tuple[str, dict[str, Any]]:
    """Resolve ``ckpt_path`` on global rank 0 and read it on every rank: (path, checkpoint)."""
    path = trainer.strategy.broadcast(resolve_checkpoint_path(trainer, ckpt_path))
    return path, trainer.strategy.read_checkpoint(path, weights_only)


class CheckpointPathError(ValueError):
    """``ckpt_path="best"`` / ``"last"`` names no checkpoint; ``python -m trainer`` prints it as one line."""


def resolve_checkpoint_path(trainer: Trainer, ckpt_path: Any) -> str:
    """A path, or ``"last"`` / ``"best"`` resolved through the checkpoint callbacks and the disk."""
    if ckpt_path == "best":
        cb = trainer.checkpoint_callback
        path = cb.best_model_path if cb is not None else None
        if not path:
            # "best" lives in the ModelCheckpoint's memory: a fresh process (python -m trainer
            # test/validate) has run no fit, so only a path can name the checkpoint
            raise CheckpointPathError(
                "ckpt_path='best' is unknown: no fit has run in this process (or none saved a checkpoint), "
                "so no ModelCheckpoint has a best checkpoint"
                + (" (this Trainer has none: enable_checkpointing=False)" if cb is None else "")
                + ". Pass a checkpoint path instead: ckpt_path='path/to/file.ckpt' "
                "(on the command line: --ckpt_path path/to/file.ckpt)."
            )
        return str(path)
    if ckpt_path == "last":
        path = find_last_checkpoint(trainer)
        if path is None:
            raise CheckpointPathError(
                f"ckpt_path='last' but there is no last checkpoint under {trainer.default_root_dir!r} or "
                "in a ModelCheckpoint's dirpath (save_last=True writes one; so does a pre-emption)."
            )
        return path
    return storage.normalize(ckpt_path, "ckpt_path")


def find_last_checkpoint(trainer: Trainer) -> str | None:
    """The newest ``last*.ckpt`` (a file, or a sharded checkpoint directory) in a ModelCheckpoint's
    dirpath or under ``default_root_dir``."""
    candidates = []
    for cb in trainer.checkpoint_callbacks:
        if cb.last_model_path:
            candidates.append(str(cb.last_model_path))
        dirpath = cb.dirpath
        if dirpath:
            candidates += storage.glob(storage.join(str(dirpath), "last*.ckpt"))
    candidates += storage.glob(storage.join(trainer.default_root_dir, "**", "last*.ckpt"))
    candidates = [c for c in dict.fromkeys(candidates) if storage.isfile(c) or is_sharded_checkpoint(c)]
    return max(candidates, key=storage.mtime) if candidates else None


def preemption_checkpoint_path(trainer: Trainer) -> str:
    """Where a pre-empted run saves: its last checkpoint beside its other checkpoints (``last.ckpt``,
    or the versioned name that keeps an earlier run's apart), as global rank 0 decides."""
    path = storage.join(trainer.default_root_dir, "checkpoints", "last.ckpt")
    for cb in trainer.checkpoint_callbacks:
        if cb.dirpath:
            path = cb.last_checkpoint_path()
            break
    return trainer.strategy.broadcast(path)
