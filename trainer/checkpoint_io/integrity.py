"""A sharded checkpoint's integrity: every file's size and SHA-256 written when a save completes
(``shards.json``), checked before a load; torch's errors named by checkpoint and rank."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from typing import Any, Iterator

import torch.distributed as dist

from trainer.checkpoint_io.file_format import CheckpointError
from trainer.checkpoint_io.sharded_layout import MANIFEST_FILE
from trainer.contracts.arguments import check_path_component

_SHARD_NAME = re.compile(r"__(\d+)_\d+\.distcp$")
_HASH_CHUNK = 1 << 20


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(directory: str) -> None:
    """Record the size and SHA-256 of every file of the complete checkpoint in ``directory``."""
    files = {
        name: {"size": os.path.getsize(os.path.join(directory, name)), "sha256": _sha256(os.path.join(directory, name))}
        for name in sorted(os.listdir(directory)) if name != MANIFEST_FILE
    }
    tmp = os.path.join(directory, f".{MANIFEST_FILE}.tmp")
    with open(tmp, "w") as f:
        json.dump({"files": files}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(directory, MANIFEST_FILE))


def _shard_label(name: str) -> str:
    match = _SHARD_NAME.match(name)
    return f"shard {name} (written by rank {match.group(1)})" if match else f"file {name}"


def this_rank() -> int:
    """The global rank in the process group, 0 without one (a load in one process)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def validate_shards(path: str, index: Any) -> None:
    """Raise `CheckpointError` naming the first shard that is missing, short or corrupt.

    Every rank checks every file, so on a shared filesystem every rank reaches the same verdict
    (none waits in a load the others refused). Sizes come from torch's index (any checkpoint);
    checksums from ``shards.json`` (checkpoints written since it exists).
    """
    needed: dict[str, int] = {}
    for info in getattr(index, "storage_data", {}).values():
        name = getattr(info, "relative_path", None)
        if name is not None:
            needed[name] = max(needed.get(name, 0), int(info.offset) + int(info.length))
    manifest_path = os.path.join(path, MANIFEST_FILE)
    recorded: dict[str, Any] = {}
    if os.path.isfile(manifest_path):
        try:
            with open(manifest_path) as f:
                recorded = json.load(f)["files"]
        except (ValueError, KeyError, TypeError) as err:
            raise CheckpointError(f"Sharded checkpoint {path!r}: its {MANIFEST_FILE} is unreadable ({err}).") from err
    rank = this_rank()
    for name in sorted(set(needed) | set(recorded)):
        try:  # the index and the manifest are files anyone may write: each names a file of this directory
            check_path_component("a shard's name", name)
        except (TypeError, ValueError) as err:
            raise CheckpointError(f"Sharded checkpoint {path!r}: {err}. Nothing was loaded.") from None
        file = os.path.join(path, name)
        where = f"Sharded checkpoint {path!r} (read on rank {rank}): {_shard_label(name)}"
        if not os.path.isfile(file):
            raise CheckpointError(f"{where} is missing. Nothing was loaded.")
        size = os.path.getsize(file)
        expected = recorded[name]["size"] if name in recorded else needed[name]
        if (size != expected) if name in recorded else (size < expected):
            raise CheckpointError(f"{where} has {size} bytes, {expected} expected (truncated?). Nothing was loaded.")
        if name in recorded and _sha256(file) != recorded[name]["sha256"]:
            raise CheckpointError(f"{where} does not match its checksum (corrupted bytes). Nothing was loaded.")


def describe_error(error: BaseException) -> str:
    """torch's `CheckpointException` (every failing rank's traceback) as one line per rank."""
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict) and failures:
        return "; ".join(
            f"rank {r}: {type(pair[0]).__name__}: {pair[0]}" for r, pair in sorted(failures.items())
        )
    return f"{type(error).__name__}: {error}"


@contextlib.contextmanager
def named_errors(path: str, rank: int, action: str) -> Iterator[None]:
    """torch's `CheckpointException` (a `BaseException`, which ``except Exception`` misses) and
    the OS errors of a save or load, as a `CheckpointError` naming the checkpoint and the ranks."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        yield
    except (CheckpointException, OSError) as err:
        raise CheckpointError(
            f"Could not {action} sharded checkpoint {path!r} (on rank {rank}): {describe_error(err)}"
        ) from err
