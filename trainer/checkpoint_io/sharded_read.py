"""Reading a sharded checkpoint safely: shards validated first, the index unpickled from an
allow-list, resharded into this rank's shards, or read whole in one process (`consolidated`)."""
from __future__ import annotations

import os
import pickle
import warnings
from typing import Any, Mapping

import torch
import torch.distributed as dist

from trainer.checkpoint_io.file_format import CheckpointError, atomic_save, load_checkpoint
from trainer.checkpoint_io.integrity import named_errors, this_rank, validate_shards
from trainer.checkpoint_io.sharded_layout import INDEX_FILE, META_FILE, is_sharded_checkpoint
from trainer.checkpoint_io.tensor_trees import merge_tensors
from trainer.contracts import storage


class ShardedState(dict[str, Any]):
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



def read_sharded(path: str, weights_only: bool = True) -> dict[str, Any]:
    """A sharded checkpoint's ``meta.pt``, its module and optimizer states as `ShardedState`
    (read into the module later, by `load_module_state` / `load_optimizer_state`)."""
    path = os.path.abspath(storage.normalize(path, "ckpt_path"))
    index = read_index(path, weights_only)
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
    validate_shards(path, read_index(path, weights_only))
    checkpoint = load_checkpoint(os.path.join(path, META_FILE), map_location="cpu", weights_only=weights_only)
    tensors = read_full(path, (), weights_only)
    checkpoint["state_dict"] = merge_tensors(checkpoint["state_dict"], tensors.get("state_dict", {}))
    saved_optimizers = tensors.get("optimizer_states", {})
    checkpoint["optimizer_states"] = [
        _by_position(merge_tensors(state, saved_optimizers.get(str(i), {})))
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
    ``torch.load``; Lockstep's writer never writes one (`split_tensors` sends only tensors to the shards,
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


def read_index(path: str, weights_only: bool = True) -> Any:
    """The sharded checkpoint's ``.metadata`` index; `CheckpointError` when it is missing or unreadable."""
    try:
        return _reader(path, weights_only).read_metadata()
    except FileNotFoundError as err:
        raise CheckpointError(f"Sharded checkpoint {path!r} has no {INDEX_FILE}: it is incomplete.") from err
    except (pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError) as err:
        raise CheckpointError(f"Sharded checkpoint {path!r}: its {INDEX_FILE} is unreadable ({err}).") from err


def read_into(state: ShardedState, target: dict[str, Any]) -> None:
    """Fill ``target``'s tensors (this rank's shards, or full tensors) from ``state``'s entry."""
    import torch.distributed.checkpoint as dcp

    tree: dict[str, Any] = target
    for part in reversed(state.key):
        tree = {part: tree}
    with named_errors(state.path, this_rank(), "load"):
        dcp.load(
            tree, storage_reader=_reader(state.path, state.weights_only), planner=_load_planner(state.weights_only),
            no_dist=not dist.is_initialized(),
        )


def read_full(path: str, key: tuple[str, ...], weights_only: bool = True) -> dict[str, Any]:
    """Every tensor under entry ``key`` as a full CPU tensor, read in this process alone."""
    import torch.distributed.checkpoint as dcp

    index = read_index(path, weights_only)
    prefix = ".".join(key)
    flat = {
        name: torch.empty(meta.size, dtype=meta.properties.dtype)
        for name, meta in index.state_dict_metadata.items()
        if hasattr(meta, "size") and (not prefix or name == prefix or name.startswith(prefix + "."))
    }
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message=".*load in a single process")
        with named_errors(path, this_rank(), "load"):
            dcp.load(flat, storage_reader=_reader(path, weights_only), planner=_load_planner(weights_only), no_dist=True)
    tree: dict[str, Any] = {}
    for name, tensor in flat.items():
        where = index.planner_data[name][len(key):]  # the path in the saved tree, after ``key``
        node = tree
        for part in where[:-1]:
            node = node.setdefault(str(part), {})
        node[str(where[-1])] = tensor
    return tree

