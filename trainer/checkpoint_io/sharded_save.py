"""Writing a sharded checkpoint: every rank's shards into a hidden sibling, published by one
rename once complete (synchronously or by a background thread), what an interrupted save left removed."""
from __future__ import annotations

import os
import secrets
import shutil
import threading
import warnings
from concurrent.futures import Future
from typing import Any

import torch.distributed as dist

from trainer.checkpoint_io.file_format import CheckpointError, atomic_save
from trainer.checkpoint_io.integrity import describe_error, named_errors, write_manifest
from trainer.checkpoint_io.sharded_layout import INDEX_FILE, META_FILE, SHARDED_KEYS
from trainer.checkpoint_io.tensor_trees import as_list, as_tree, split_tensors
from trainer.contracts import storage
from trainer.contracts.user_line import user_stacklevel


class PendingSave:
    """An asynchronous sharded save in flight; `wait` blocks until it is complete and published."""

    def __init__(self, future: Future[Any], publish: Any, path: str = "", rank: int = 0) -> None:
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._publish = publish
        self._path, self._rank = path, rank
        future.add_done_callback(self._finish)

    def _finish(self, future: Future[Any]) -> None:  # its result is not read, only its end
        try:
            future.result()
            if self._publish is not None:
                self._publish()
        except BaseException as err:  # noqa: BLE001 - re-raised by `wait` on the training thread
            self._error = err
        finally:
            self._done.set()

    def wait(self) -> None:
        """Block until the save is on disk; raise what made it fail."""
        self._done.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise CheckpointError(
                f"The asynchronous save of sharded checkpoint {self._path!r} failed on rank {self._rank}: "
                f"{describe_error(error)}"
            ) from error


def save_sharded(
    checkpoint: dict[str, Any], path: str, rank: int, process_group: Any = None, async_save: bool = False
) -> PendingSave | None:
    """Write ``checkpoint`` as a sharded directory at ``path`` (a collective: every rank calls it).

    Its sharded entries (``SHARDED_KEYS``) hold this rank's DTensor shards. With ``async_save``
    the shards are copied to host memory now and written by a background thread (on
    ``process_group``, which must not be the training group); the returned `PendingSave` says
    when the directory is published.
    """
    path = storage.normalize(path, "filepath")
    if storage.is_url(path):
        raise CheckpointError(
            f"Sharded checkpoints are written to a local or shared filesystem; {path!r} is a URL. "
            "Save to a directory on disk (shared by every node) and upload it afterwards, or "
            "consolidate it into one file (python -m trainer.checkpointing.consolidate) first."
        )
    import torch.distributed.checkpoint as dcp

    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    if rank == 0:
        remove_stale(path)  # what an interrupted save of this name left (before the others write)
    box = [secrets.token_hex(6) if rank == 0 else None]
    dist.broadcast_object_list(box, src=0, group=process_group if async_save else None)
    tmp = os.path.join(parent, f".{name}.tmp-{box[0]}")
    tensors, rest = split_tensors({key: as_tree(checkpoint[key]) for key in SHARDED_KEYS})
    if rank == 0:
        os.makedirs(tmp, exist_ok=True)
        meta = {**checkpoint, "state_dict": rest["state_dict"], "optimizer_states": as_list(rest["optimizer_states"])}
        atomic_save(meta, os.path.join(tmp, META_FILE))
    writer = dcp.FileSystemWriter(tmp)
    publish = (lambda: _publish(tmp, path)) if rank == 0 else None
    if async_save:
        with named_errors(path, rank, "save"):
            response = dcp.async_save(tensors, storage_writer=writer, process_group=process_group)
        # an AsyncSaveResponse in newer torch, the Future itself before
        future = response if isinstance(response, Future) else response.upload_completion
        return PendingSave(future, publish, path, rank)
    with named_errors(path, rank, "save"):
        dcp.save(tensors, storage_writer=writer)  # returns on every rank once the index is written
    if publish is not None:
        publish()
    return None


def _publish(tmp: str, path: str) -> None:
    """Rename the complete directory ``tmp`` to ``path`` (replacing what was there), durably."""
    if not os.path.isfile(os.path.join(tmp, INDEX_FILE)):
        raise CheckpointError(f"Sharded save into {tmp!r} has no {INDEX_FILE}: it is incomplete.")
    write_manifest(tmp)
    old = None
    if os.path.lexists(path):
        # one rename cannot replace a directory: move the old one aside, then delete it
        old = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.old-{secrets.token_hex(6)}")
        os.rename(path, old)
    os.rename(tmp, path)
    _fsync_dir(os.path.dirname(path))
    if old is not None:
        _remove(old)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)



def remove_stale(path: str) -> None:
    """Delete what an interrupted save of ``path`` left beside it (hidden temporary directories)."""
    parent, name = os.path.split(os.path.abspath(path))
    if not os.path.isdir(parent):
        return
    for entry in os.listdir(parent):
        if entry.startswith(f".{name}.tmp-") or entry.startswith(f".{name}.old-"):
            _remove(os.path.join(parent, entry))


def warn_unsaved(path: str) -> None:
    """A failing run under a sharding strategy cannot write: say so instead of writing a part."""
    warnings.warn(
        f"No checkpoint written to {path!r}: a sharded checkpoint needs every rank, and while the "
        "run is failing the other ranks may be gone. The last complete checkpoint is unchanged.",
        stacklevel=user_stacklevel(),
    )
