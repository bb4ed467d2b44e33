"""Where a run's checkpoints are: ``ckpt_path`` ("last", "best", a path) resolved and read, and
where a pre-empted run saves. Global rank 0 decides; every rank reads."""
from __future__ import annotations

import contextlib
import hashlib
import os
import warnings
from typing import TYPE_CHECKING, Any, Iterator

import torch

from trainer.checkpoint_io.file_format import load_checkpoint
from trainer.checkpoint_io.sharded_layout import META_FILE, is_sharded_checkpoint
from trainer.contracts import storage
from trainer.contracts.ray_worker import ray_resume_path
from trainer.contracts.run_identity import has_scheduler_identity, run_id
from trainer.contracts.run_lock import RunLock, RunLockedError
from trainer.contracts.user_line import user_stacklevel

RUN_ID_KEY = "run_id"  # the checkpoint entry naming the run that wrote it

if TYPE_CHECKING:
    from trainer.contracts.internals import TrainerInternals as Trainer


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
        path = _last_of_one_run(trainer)
        if path is None:
            raise CheckpointPathError(
                f"ckpt_path='last' but there is no last checkpoint under {trainer.default_root_dir!r} or "
                "in a ModelCheckpoint's dirpath (save_last=True writes one; so does a pre-emption)."
            )
        return path
    return storage.normalize(ckpt_path, "ckpt_path")


def _last_of_one_run(trainer: Trainer) -> str | None:
    """``ckpt_path="last"``: the newest last checkpoint, when every one there is one run's; among
    several runs', the newest of this run's own (its id: `trainer.contracts.run_identity`).
    Refused when that does not choose: no id outlives a process, or none of them is this run's."""
    candidates = _last_checkpoints(trainer)
    owners = {path: _owner(path) for path in candidates}
    runs = {run for run, _ in owners.values()}
    if len(runs) <= 1:
        return max(candidates, key=storage.mtime) if candidates else None
    mine = [path for path in candidates if owners[path][0] == run_id()]
    if mine:
        return max(mine, key=storage.mtime)
    listed = "; ".join(
        f"{path} (run {run or 'unknown'}, global step {'?' if step is None else step})"
        for path, (run, step) in sorted(owners.items())
    )
    raise CheckpointPathError(
        f"ckpt_path='last' cannot choose among the last checkpoints of {len(runs)} runs under "
        f"{trainer.default_root_dir!r}: {listed}. This run ({run_id()}) wrote none of them"
        + ("" if has_scheduler_identity() else ", and without SLURM, torchrun or LOCKSTEP_RUN_NAME it has no id an earlier run could share")
        + ". Pass the checkpoint's path (ckpt_path='path/to/last.ckpt'), or launch under the run's name "
        "(LOCKSTEP_RUN_NAME=...) or in its SLURM job."
    )


def restart_checkpoint(trainer: Trainer) -> str | None:
    """The checkpoint a restart resumes: under Ray Train the one Ray hands the workers
    (``ray.train.get_checkpoint()``, which every worker fetches where it runs), else this run's
    newest ``last*.ckpt``, which global rank 0 finds (another run's under the same root is not
    a restart's to take). The same path on every rank."""
    from_ray = ray_resume_path()
    if from_ray is not None:
        return from_ray
    return trainer.strategy.broadcast(find_last_checkpoint(trainer, run=run_id()) if trainer.is_global_zero else None)


def find_last_checkpoint(trainer: Trainer, run: str | None = None) -> str | None:
    """The newest ``last*.ckpt`` (a file, or a sharded checkpoint directory) in a ModelCheckpoint's
    dirpath or under ``default_root_dir``; with ``run``, the newest one that run wrote."""
    candidates = _last_checkpoints(trainer)
    if run is not None:
        candidates = [c for c in candidates if written_by(c) == run]
    return max(candidates, key=storage.mtime) if candidates else None


def _last_checkpoints(trainer: Trainer) -> list[str]:
    """Every ``last*.ckpt`` in a ModelCheckpoint's dirpath or under ``default_root_dir``."""
    candidates = []
    for cb in trainer.checkpoint_callbacks:
        if cb.last_model_path:
            candidates.append(str(cb.last_model_path))
        dirpath = cb.dirpath
        if dirpath:
            candidates += storage.glob(storage.join(str(dirpath), "last*.ckpt"))
    candidates += storage.glob(storage.join(trainer.default_root_dir, "**", "last*.ckpt"))
    return [c for c in dict.fromkeys(candidates) if storage.isfile(c) or is_sharded_checkpoint(c)]


def written_by(path: str) -> str | None:
    """The id of the run that wrote the checkpoint at ``path`` (None: unreadable, or written
    before checkpoints recorded it). Reads only the small part of the file it needs."""
    return _owner(path)[0]


def _owner(path: str) -> tuple[str | None, int | None]:
    """The run id and global step of the checkpoint at ``path`` (None where not known)."""
    try:
        if is_sharded_checkpoint(path):
            path = storage.join(path, META_FILE)
        if storage.is_url(path):
            checkpoint = load_checkpoint(path, weights_only=True)
        else:  # memory-mapped: the tensors are not read
            checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - a file that cannot be read is no run's
        return None, None
    if not isinstance(checkpoint, dict):
        return None, None
    run, step = checkpoint.get(RUN_ID_KEY), checkpoint.get("global_step")
    return (run if isinstance(run, str) else None), (step if type(step) is int else None)


@contextlib.contextmanager
def preemption_checkpoint_path(trainer: Trainer) -> Iterator[str]:
    """Where a pre-empted run saves, held while it saves: its last checkpoint beside its other
    checkpoints (a ModelCheckpoint's ``last.ckpt``, or the versioned name that keeps an earlier
    run's apart). Without a ModelCheckpoint, ``<default_root_dir>/checkpoints/last.ckpt`` or the
    first of ``last-v1.ckpt``, ... that no other run wrote, chosen and written under that
    directory's run lock; while a live run holds it, a name of this run's own. Global rank 0 decides."""
    lock, path = None, None
    dirpaths = [cb for cb in trainer.checkpoint_callbacks if cb.dirpath]
    if dirpaths:
        path = dirpaths[0].last_checkpoint_path()
    elif trainer.is_global_zero:
        directory = storage.join(os.fspath(trainer.default_root_dir), "checkpoints")
        lock = RunLock(directory)
        try:
            taken_over = lock.acquire(owner=trainer)
        except RunLockedError:
            lock = None  # a live run writes there: a name no other run can choose
        else:
            if taken_over:
                warnings.warn(taken_over, stacklevel=user_stacklevel())
        path = _unwritten_last(directory, run_id(), shared=lock is not None)
    try:
        shared = trainer.strategy.broadcast(path)
        assert shared is not None  # rank 0 always chose one
        yield shared
    finally:
        if lock is not None:
            lock.release()


def _unwritten_last(directory: str, run: str, shared: bool) -> str:
    """``last.ckpt`` in ``directory``, versioned past the files other runs wrote (``shared``), or
    named after ``run`` itself."""
    if not shared:
        return storage.join(directory, f"last-{hashlib.sha256(run.encode()).hexdigest()[:8]}.ckpt")
    version = 0
    while True:
        path = storage.join(directory, "last.ckpt" if version == 0 else f"last-v{version}.ckpt")
        if not (storage.isfile(path) or is_sharded_checkpoint(path)) or written_by(path) == run:
            return path
        version += 1
