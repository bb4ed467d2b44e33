"""Ray Train's worker: whether this process is one, and what Ray says about its place and run.

Read only where Ray is already imported. A Ray Train worker always has imported ``ray.train``
(it runs the training function through it); a process that has not is never taken for one, and
is never made to import Ray. ``ray.train.get_context()`` raises outside a training function (the
driver, a plain Ray task), which is how a process that merely imported Ray is told apart.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import ContextManager, Protocol


CHECKPOINT_ENTRY = "checkpoint.ckpt"  # the name a reported checkpoint has inside Ray's checkpoint directory


# What Lockstep calls on Ray's objects (Ray is untyped for the type checker): the calls are
# Ray's, the protocols say what each returns.
class _FileInfo(Protocol):
    @property
    def type(self) -> _FileType: ...


class _FileType(Protocol):
    @property
    def name(self) -> str: ...


class _Writable(Protocol):
    def write(self, data: bytes) -> object: ...


class _Readable(Protocol):
    def read(self) -> bytes: ...


class _FileSystem(Protocol):
    """A pyarrow file system (Ray's storage and checkpoints are read through one)."""

    @property
    def type_name(self) -> str: ...

    def create_dir(self, path: str) -> None: ...
    def open_output_stream(self, path: str) -> ContextManager[_Writable]: ...
    def open_input_stream(self, path: str) -> ContextManager[_Readable]: ...
    def get_file_info(self, path: str) -> _FileInfo: ...
    def delete_file(self, path: str) -> None: ...


class _Storage(Protocol):
    @property
    def experiment_fs_path(self) -> str: ...
    @property
    def storage_filesystem(self) -> _FileSystem: ...


class RayContext(Protocol):
    """What Lockstep reads on ``ray.train.get_context()``."""

    def get_world_size(self) -> int: ...
    def get_world_rank(self) -> int: ...
    def get_local_rank(self) -> int: ...
    def get_node_rank(self) -> int: ...
    def get_local_world_size(self) -> int: ...
    def get_storage(self) -> _Storage: ...
    def get_experiment_name(self) -> str: ...


class _RayCheckpoint(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def filesystem(self) -> _FileSystem: ...

    def to_directory(self, path: str) -> str: ...


@dataclass(frozen=True)
class RayPlacement:
    """What ``ray.train.get_context()`` says about this worker (all ranks 0-based)."""

    global_rank: int
    local_rank: int
    node_rank: int
    world_size: int
    local_world_size: int
    run: str  # the Ray experiment: its storage directory (the same across Ray's restarts of the workers)
    resumes: bool  # Ray hands this worker group a checkpoint to resume from (`ray.train.get_checkpoint()`)


def ray_train_context() -> RayContext | None:
    """The Ray Train context of this worker, or None outside a Ray Train training function."""
    if "ray.train" not in sys.modules:
        return None
    try:
        import ray.train

        context: RayContext = ray.train.get_context()
        context.get_world_size()  # legacy Ray Train (V1) hands out a context outside a session too
    except Exception:  # noqa: BLE001 - not in a training function (the driver, a Tune trial): not a worker
        return None
    return context


def ray_placement() -> RayPlacement | None:
    """This worker's place in Ray's worker group, or None outside Ray Train."""
    context = ray_train_context()
    if context is None:
        return None
    import ray.train

    return RayPlacement(
        global_rank=context.get_world_rank(),
        local_rank=context.get_local_rank(),
        node_rank=context.get_node_rank(),
        world_size=context.get_world_size(),
        local_world_size=context.get_local_world_size(),
        run=f"ray-{_experiment(context)}",
        resumes=ray.train.get_checkpoint() is not None,
    )


def _experiment(context: RayContext) -> str:
    """Ray's experiment: ``RunConfig(name=...)`` under ``storage_path``; a new driver with the same
    name and storage path continues it (Ray resumes it from its stored checkpoints), so it is the run."""
    try:
        return str(context.get_storage().experiment_fs_path)
    except Exception:  # noqa: BLE001 - get_storage is Ray's developer API: the name alone then
        return str(context.get_experiment_name())


def ray_resume_path() -> str | None:
    """The Lockstep checkpoint inside ``ray.train.get_checkpoint()`` on this worker (downloaded
    from remote storage to a local directory first), or None when Ray gives none."""
    if ray_train_context() is None:
        return None
    import ray.train

    checkpoint: _RayCheckpoint | None = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    local = checkpoint.filesystem.type_name == "local"  # a pyarrow file system
    directory = checkpoint.path if local else _local_copy(checkpoint)
    path = os.path.join(directory, CHECKPOINT_ENTRY)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"Ray's checkpoint to resume from ({checkpoint.path}) holds no {CHECKPOINT_ENTRY}: it was not "
            "reported by Lockstep's RayReportCallback. Resume it yourself with trainer.fit(..., ckpt_path=...)."
        )
    return path


def _local_copy(checkpoint: _RayCheckpoint) -> str:
    """A remote checkpoint downloaded to this node, at a path that is the same on every node (rank
    0's path is the one every rank reads): each worker downloads on its own, the first to finish
    moves its copy into place, the others drop theirs."""
    digest = hashlib.sha256(str(checkpoint.path).encode()).hexdigest()[:16]
    target = os.path.join(tempfile.gettempdir(), f"lockstep-ray-resume-{digest}")
    if not os.path.isdir(target):
        mine = checkpoint.to_directory(tempfile.mkdtemp(prefix="lockstep-ray-download-"))
        try:
            os.rename(mine, target)
        except OSError:  # another worker of this node moved its copy there first
            shutil.rmtree(mine, ignore_errors=True)
    return target


class RayStorageNotes:
    """A few small notes in Ray's storage (the experiment's directory, local or remote), with the
    four calls of a torch store that `trainer.distributed.job_store` makes: the job's store under
    Ray, which outlives Ray's restarts of the workers (the workers' own store dies with rank 0)."""

    def __init__(self) -> None:
        storage = _require_context().get_storage()
        self._fs = storage.storage_filesystem
        self._dir = f"{storage.experiment_fs_path}/.lockstep-notes"
        self._fs.create_dir(self._dir)

    def _path(self, key: str) -> str:
        return f"{self._dir}/{key.replace('/', '_')}"

    def set(self, key: str, value: str) -> None:
        with self._fs.open_output_stream(self._path(key)) as f:
            f.write(value.encode())

    def check(self, keys: list[str]) -> bool:
        return all(self._fs.get_file_info(self._path(k)).type.name != "NotFound" for k in keys)

    def get(self, key: str) -> bytes:
        with self._fs.open_input_stream(self._path(key)) as f:
            return bytes(f.read())

    def delete_key(self, key: str) -> bool:
        self._fs.delete_file(self._path(key))
        return True


def _require_context() -> RayContext:
    context = ray_train_context()
    if context is None:
        raise RuntimeError("Ray's storage is only reachable from a Ray Train worker.")
    return context
