"""Sharded checkpoints: every rank writes its own shards into one directory (`torch.distributed.checkpoint`).

A sharded checkpoint is a directory named like the file would be (``epoch=1-step=8.ckpt/``):

- ``__<rank>_0.distcp``: each rank's shards of the module and optimizer tensors;
- ``.metadata``: torch's index of them (the global shape of every tensor, which file holds which slice);
- ``meta.pt``: everything else a checkpoint holds (position, RNG states, callbacks, hyperparameters,
  scheduler states, the optimizers' hyperparameters), one ``torch.save`` file that
  ``torch.load(weights_only=True)`` reads;
- ``shards.json``: the size and SHA-256 of every other file, written when the save completes.
  A load checks every shard against it (and against the sizes in the index) before it touches
  the module or an optimizer, so a truncated or corrupted checkpoint fails with a
  `CheckpointError` naming the shard and the rank that wrote it, and the model stays as it was.

It is complete or absent: the ranks write into a hidden sibling (``.<name>.tmp-<token>``), and
global rank 0 renames it to ``<name>`` only after every rank's shards are written. Loading
reshards: each rank reads the slices its own shards need, whatever the world size that wrote them.
`consolidate_checkpoint` turns such a directory into one ordinary checkpoint file (one process, no
process group).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import re
import secrets
import shutil
import threading
import warnings
from concurrent.futures import Future
from typing import Any, Iterator, Mapping

import torch
import torch.distributed as dist
from torch import nn

from trainer.checkpointing.checkpoint import CheckpointError, atomic_save, load_checkpoint
from trainer.contracts import storage

META_FILE = "meta.pt"
INDEX_FILE = ".metadata"  # written by torch.distributed.checkpoint once every rank's shards are
MANIFEST_FILE = "shards.json"  # every other file's size and SHA-256, written when the save completes
# The checkpoint entries whose tensors are sharded: written by every rank, not in meta.pt.
SHARDED_KEYS = ("state_dict", "optimizer_states")


def is_sharded_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a complete sharded checkpoint directory."""
    path = os.fspath(path)
    return storage.isdir(path) and storage.isfile(storage.join(path, META_FILE))


class ShardedState(dict):  # type: ignore[type-arg]
    """A sharded checkpoint's module or optimizer state, not read yet.

    As a mapping it holds what is known without reading the shards: for the module, every key
    with a ``meta`` tensor of the saved global shape (so a checkpoint is checked against the
    module before anything is loaded); for an optimizer, its state without tensors (the
    parameter groups). `load_module_state` / `load_optimizer_state` read the tensors.
    """

    def __init__(self, known: Mapping[str, Any], path: str, key: tuple[str, ...], weights_only: bool = True) -> None:
        super().__init__(known)
        self.path = path
        self.key = key  # where its tensors are in the saved tree
        self.weights_only = weights_only


# -- saving -----------------------------------------------------------------------------------
class PendingSave:
    """An asynchronous sharded save in flight; `wait` blocks until it is complete and published."""

    def __init__(self, future: Future, publish: Any, path: str = "", rank: int = 0) -> None:
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._publish = publish
        self._path, self._rank = path, rank
        future.add_done_callback(self._finish)

    def _finish(self, future: Future) -> None:
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
                f"{_describe(error)}"
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
    tensors, rest = _split({key: _as_tree(checkpoint[key]) for key in SHARDED_KEYS})
    if rank == 0:
        os.makedirs(tmp, exist_ok=True)
        meta = {**checkpoint, "state_dict": rest["state_dict"], "optimizer_states": _as_list(rest["optimizer_states"])}
        atomic_save(meta, os.path.join(tmp, META_FILE))
    writer = dcp.FileSystemWriter(tmp)
    publish = (lambda: _publish(tmp, path)) if rank == 0 else None
    if async_save:
        with _named_errors(path, rank, "save"):
            future = dcp.async_save(tensors, storage_writer=writer, process_group=process_group)
        future = getattr(future, "upload_completion", future)  # AsyncSaveResponse in newer torch
        return PendingSave(future, publish, path, rank)
    with _named_errors(path, rank, "save"):
        dcp.save(tensors, storage_writer=writer)  # returns on every rank once the index is written
    if publish is not None:
        publish()
    return None


def _publish(tmp: str, path: str) -> None:
    """Rename the complete directory ``tmp`` to ``path`` (replacing what was there), durably."""
    if not os.path.isfile(os.path.join(tmp, INDEX_FILE)):
        raise CheckpointError(f"Sharded save into {tmp!r} has no {INDEX_FILE}: it is incomplete.")
    _write_manifest(tmp)
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


# -- integrity: sizes and checksums written at save, checked before a load ---------------------
_SHARD_NAME = re.compile(r"__(\d+)_\d+\.distcp$")
_HASH_CHUNK = 1 << 20


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_manifest(directory: str) -> None:
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


def _this_rank() -> int:
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
    rank = _this_rank()
    for name in sorted(set(needed) | set(recorded)):
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


def _describe(error: BaseException) -> str:
    """torch's `CheckpointException` (every failing rank's traceback) as one line per rank."""
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict) and failures:
        return "; ".join(
            f"rank {r}: {type(pair[0]).__name__}: {pair[0]}" for r, pair in sorted(failures.items())
        )
    return f"{type(error).__name__}: {error}"


@contextlib.contextmanager
def _named_errors(path: str, rank: int, action: str) -> Iterator[None]:
    """torch's `CheckpointException` (a `BaseException`, which ``except Exception`` misses) and
    the OS errors of a save or load, as a `CheckpointError` naming the checkpoint and the ranks."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        yield
    except (CheckpointException, OSError) as err:
        raise CheckpointError(
            f"Could not {action} sharded checkpoint {path!r} (on rank {rank}): {_describe(err)}"
        ) from err


# -- the module's and optimizers' states under FSDP -----------------------------------------
def sharded_module_state(module: nn.Module) -> dict[str, Any]:
    """The module's state as this rank's DTensor shards, keyed like ``module.state_dict()``."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module)


def sharded_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state as this rank's shards, keyed by parameter name (not position)."""
    if not optimizer.state:
        # torch would run a zero step to create the state, which changes the run (Adam's step count)
        names = {p: n for n, p in module.named_parameters()}
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [names[p] for p in g["params"]]}
                  for g in optimizer.param_groups]
        return {"state": {}, "param_groups": groups}
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(module, optimizer)


def load_module_state(module: nn.Module, state: Mapping[str, Any]) -> None:
    """Load ``state`` into ``module``: a `ShardedState` (read and resharded now) or a full state
    dict, into a sharded module or one not sharded yet."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    sharded = _is_sharded(module)
    if isinstance(state, ShardedState):
        if not sharded:  # e.g. `validate(ckpt_path=...)` loads before the module is sharded
            module.load_state_dict(_read_full(state.path, state.key, state.weights_only))
            return
        target = sharded_module_state(module)
        _read_into(state, target)
        set_model_state_dict(module, target)
        return
    if sharded:
        set_model_state_dict(module, dict(state), options=StateDictOptions(full_state_dict=True))
    else:
        module.load_state_dict(state)


def load_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
    """Load ``state`` into the optimizer of the sharded ``module``: a `ShardedState` (resharded),
    or a full state as ``optimizer.state_dict()`` writes it (from a single-file checkpoint)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    if not isinstance(state, ShardedState):
        full = _by_name(module, optimizer, state)
        set_optimizer_state_dict(module, optimizer, full, options=StateDictOptions(full_state_dict=True))
        return
    target = get_optimizer_state_dict(module, optimizer)  # creates the state to read into
    tensors, _ = _split(target)
    saved = set(_read_index(state.path, state.weights_only).state_dict_metadata)
    # only what was saved: a parameter without state (no step yet) stays without
    tensors = _keep(tensors, lambda key: ".".join((*state.key, *key)) in saved)
    _read_into(state, tensors)
    set_optimizer_state_dict(module, optimizer, _merge(dict(state), tensors))


def _by_name(module: nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> dict[str, Any]:
    """An ``optimizer.state_dict()`` (parameters numbered) keyed by parameter names instead."""
    names = {p: n for n, p in module.named_parameters()}
    order = [names[p] for g in optimizer.param_groups for p in g["params"]]
    groups = [{**g, "params": [order[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {order[i]: s for i, s in state["state"].items()}, "param_groups": groups}


def _is_sharded(module: nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())


# -- reading ----------------------------------------------------------------------------------
def read_sharded(path: str, weights_only: bool = True) -> dict[str, Any]:
    """A sharded checkpoint's ``meta.pt``, its module and optimizer states as `ShardedState`
    (read into the module later, by `load_module_state` / `load_optimizer_state`)."""
    path = os.path.abspath(storage.normalize(path, "ckpt_path"))
    index = _read_index(path, weights_only)
    validate_shards(path, index)
    checkpoint = load_checkpoint(os.path.join(path, META_FILE), map_location="cpu", weights_only=weights_only)
    shapes = {
        key[len("state_dict."):]: torch.empty(meta.size, dtype=meta.properties.dtype, device="meta")
        for key, meta in index.state_dict_metadata.items()
        if key.startswith("state_dict.") and hasattr(meta, "size")
    }
    checkpoint["state_dict"] = ShardedState({**checkpoint["state_dict"], **shapes}, path, ("state_dict",), weights_only)
    checkpoint["optimizer_states"] = [
        ShardedState(state, path, ("optimizer_states", str(i)), weights_only)
        for i, state in enumerate(checkpoint["optimizer_states"])
    ]
    return checkpoint


def consolidated(path: str | os.PathLike[str], weights_only: bool = True) -> dict[str, Any]:
    """The sharded checkpoint at ``path`` as one ordinary checkpoint dict, read in this process
    (no process group): full tensors, the optimizers' states keyed by position as
    ``optimizer.state_dict()`` writes them."""
    path = os.path.abspath(storage.normalize(path, "ckpt_path"))
    if not is_sharded_checkpoint(path):
        raise CheckpointError(f"{path!r} is not a sharded checkpoint directory (no {META_FILE} in it).")
    validate_shards(path, _read_index(path, weights_only))
    checkpoint = load_checkpoint(os.path.join(path, META_FILE), map_location="cpu", weights_only=weights_only)
    tensors = _read_full(path, (), weights_only)
    checkpoint["state_dict"] = _merge(checkpoint["state_dict"], tensors.get("state_dict", {}))
    saved_optimizers = tensors.get("optimizer_states", {})
    checkpoint["optimizer_states"] = [
        _by_position(_merge(state, saved_optimizers.get(str(i), {})))
        for i, state in enumerate(checkpoint["optimizer_states"])
    ]
    return checkpoint


def load_full(path: str | os.PathLike[str], weights_only: bool = True) -> dict[str, Any]:
    """The checkpoint at ``path`` on the CPU: a file, or a sharded directory read whole (`consolidated`)."""
    if is_sharded_checkpoint(path):
        return consolidated(path, weights_only)
    return load_checkpoint(path, map_location="cpu", weights_only=weights_only)


def consolidate_checkpoint(src: str | os.PathLike[str], dst: str | os.PathLike[str], weights_only: bool = True) -> str:
    """Write the sharded checkpoint directory ``src`` as one checkpoint file ``dst`` (atomically).

    ``dst`` loads with ``torch.load(weights_only=True)``, ``TrainModule.load_from_checkpoint``
    and as ``ckpt_path`` of any strategy. Runs in one process; memory must hold the full state.
    """
    atomic_save(consolidated(src, weights_only), dst)
    return os.fspath(dst)


def _by_position(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state keyed by parameter names, numbered as ``optimizer.state_dict()`` does."""
    order = [name for g in state["param_groups"] for name in g["params"]]
    index = {name: i for i, name in enumerate(order)}
    groups, start = [], 0
    for g in state["param_groups"]:
        groups.append({**g, "params": list(range(start, start + len(g["params"])))})
        start += len(g["params"])
    return {"state": {index[name]: s for name, s in state["state"].items()}, "param_groups": groups}


def _reader(path: str, weights_only: bool) -> Any:
    """torch's reader of a sharded directory; with ``weights_only`` its index is unpickled safely
    and holds no bytes entry (`_refuse_bytes_entries`)."""
    import torch.distributed.checkpoint as dcp

    if not weights_only:
        return dcp.FileSystemReader(path)

    class SafeReader(dcp.FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            with open(os.path.join(path, INDEX_FILE), "rb") as f:
                metadata = _IndexUnpickler(f, path).load()
            _refuse_bytes_entries(metadata, path)
            if getattr(metadata, "storage_meta", None) is None:
                from torch.distributed.checkpoint.metadata import StorageMeta

                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(path)


def _refuse_bytes_entries(metadata: Any, path: str) -> None:
    """A bytes entry is a pickled object that torch's load planner reads with a full
    ``torch.load``; Lockstep's writer never writes one (`_split` sends only tensors to the shards,
    everything else to ``meta.pt``), so one in the index is refused before anything is read."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    for key, entry in getattr(metadata, "state_dict_metadata", {}).items():
        if isinstance(entry, BytesStorageMetadata):
            raise CheckpointError(
                f"Refused to load sharded checkpoint {path!r}: its entry {key!r} is a bytes entry (a pickled "
                "object, which loading would unpickle and could run code); Lockstep writes only tensors to "
                "the shards. If you trust it, pass weights_only=False."
            )


def _load_planner(weights_only: bool) -> Any:
    """torch's load planner; with ``weights_only``, a bytes entry it reads anyway (none gets past
    `_refuse_bytes_entries`) is unpickled by ``torch.load(weights_only=True)``, not a full load."""
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    if not weights_only:
        return DefaultLoadPlanner()

    class WeightsOnlyLoadPlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: Any) -> None:
            import io

            # torch's own load_bytes then reads this re-serialization of an allowed object
            safe = io.BytesIO()
            torch.save(torch.load(value, weights_only=True), safe)
            safe.seek(0)
            super().load_bytes(read_item, safe)

    return WeightsOnlyLoadPlanner()


class _IndexUnpickler(pickle.Unpickler):
    """Unpickles DCP's ``.metadata`` index, refusing anything but its own record types (a crafted
    index cannot run code, as ``torch.load(weights_only=True)`` for the rest).

    The module and name are compared as strings against the allow-list first: a refused global's
    module is never imported, so its import-time code never runs.
    """

    def __init__(self, file: Any, path: str) -> None:
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _INDEX_GLOBALS and not (module == "torch" and name in _TORCH_CONSTANTS):
            raise CheckpointError(
                f"Refused to load sharded checkpoint {self.path!r}: its {INDEX_FILE} needs "
                f"{module}.{name}, which is not safe to unpickle. If you trust it, pass weights_only=False."
            )
        return super().find_class(module, name)  # an allowed torch or standard-library module


_DCP = "torch.distributed.checkpoint"
_INDEX_GLOBALS = {
    ("torch", "Size"), ("torch.serialization", "_get_layout"), ("collections", "OrderedDict"),
    ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "PurePosixPath"), ("pathlib", "PureWindowsPath"),
    *((f"{_DCP}.metadata", name) for name in (
        "Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
        "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING",
    )),
    (f"{_DCP}.filesystem", "_StorageInfo"),
}
# torch's dtypes, layouts and memory formats, by name (``torch.float32``), as the index records them
_TORCH_CONSTANTS = frozenset(
    name for name, value in vars(torch).items()
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format))
)


def _read_index(path: str, weights_only: bool = True) -> Any:
    try:
        return _reader(path, weights_only).read_metadata()
    except FileNotFoundError as err:
        raise CheckpointError(f"Sharded checkpoint {path!r} has no {INDEX_FILE}: it is incomplete.") from err
    except (pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError) as err:
        raise CheckpointError(f"Sharded checkpoint {path!r}: its {INDEX_FILE} is unreadable ({err}).") from err


def _read_into(state: ShardedState, target: dict[str, Any]) -> None:
    """Fill ``target``'s tensors (this rank's shards, or full tensors) from ``state``'s entry."""
    import torch.distributed.checkpoint as dcp

    tree: dict[str, Any] = target
    for part in reversed(state.key):
        tree = {part: tree}
    with _named_errors(state.path, _this_rank(), "load"):
        dcp.load(
            tree, storage_reader=_reader(state.path, state.weights_only), planner=_load_planner(state.weights_only),
            no_dist=not dist.is_initialized(),
        )


def _read_full(path: str, key: tuple[str, ...], weights_only: bool = True) -> dict[str, Any]:
    """Every tensor under entry ``key`` as a full CPU tensor, read in this process alone."""
    import torch.distributed.checkpoint as dcp

    index = _read_index(path, weights_only)
    prefix = ".".join(key)
    flat = {
        name: torch.empty(meta.size, dtype=meta.properties.dtype)
        for name, meta in index.state_dict_metadata.items()
        if hasattr(meta, "size") and (not prefix or name == prefix or name.startswith(prefix + "."))
    }
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message=".*load in a single process")
        with _named_errors(path, _this_rank(), "load"):
            dcp.load(flat, storage_reader=_reader(path, weights_only), planner=_load_planner(weights_only), no_dist=True)
    tree: dict[str, Any] = {}
    for name, tensor in flat.items():
        where = index.planner_data[name][len(key):]  # the path in the saved tree, after ``key``
        node = tree
        for part in where[:-1]:
            node = node.setdefault(str(part), {})
        node[str(where[-1])] = tensor
    return tree


# -- trees of tensors -------------------------------------------------------------------------
_NOTHING = object()


def _as_tree(value: Any) -> Any:
    return {str(i): v for i, v in enumerate(value)} if isinstance(value, list) else value


def _as_list(value: dict[str, Any]) -> list[Any]:
    return [value[str(i)] for i in range(len(value))]


def _split(value: Any) -> tuple[Any, Any]:
    """(the tensors in the nested dicts ``value``, ``value`` without them); lists are leaves."""
    if isinstance(value, torch.Tensor):
        return value, _NOTHING
    if not isinstance(value, Mapping):
        return _NOTHING, value
    tensors, rest = {}, {}
    for k, v in value.items():
        t, r = _split(v)
        if t is not _NOTHING and (not isinstance(t, dict) or t):
            tensors[k] = t
        if r is not _NOTHING:
            rest[k] = r
    return tensors, rest


def _merge(rest: Any, tensors: Any) -> Any:
    """The inverse of `_split`: ``rest`` with ``tensors`` put back in place."""
    if not isinstance(tensors, Mapping):
        return tensors
    merged = dict(rest) if isinstance(rest, Mapping) else {}
    for k, v in tensors.items():
        merged[k] = _merge(merged.get(k), v)
    return merged


def _keep(tree: dict[str, Any], wanted: Any, at: tuple[str, ...] = ()) -> dict[str, Any]:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            sub = _keep(v, wanted, (*at, str(k)))
            if sub:
                out[k] = sub
        elif wanted((*at, str(k))):
            out[k] = v
    return out


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
        stacklevel=3,
    )
