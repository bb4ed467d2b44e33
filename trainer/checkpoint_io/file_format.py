"""Checkpoint files: the format version, atomic writes, safe loading, and whether one fits a run.

What a checkpoint holds and how a run is restored from it: `trainer.checkpointing.connector`.
A checkpoint is always loaded to the CPU: RNG states must be CPU byte tensors, and
``load_state_dict`` moves module and optimizer states to their parameters' devices.
"""
from __future__ import annotations

import enum
import io
import numbers
import os
import re
import secrets
import zipfile
from pathlib import Path
from typing import Any, Mapping

import torch

from trainer.checkpoint_io.entry_types import check_entries
from trainer.contracts import storage
from trainer.contracts.errors import CheckpointError


FORMAT_VERSION = 2
LIGHTNING_VERSION_KEY = "pytorch-lightning_version"  # Lightning's name for the version that wrote a file


def atomic_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write ``obj`` with ``torch.save`` so ``path`` is either the old file or the complete new one.

    The bytes go to a temporary file in the same directory, are fsync'ed, and the file is renamed
    over ``path`` (atomic on POSIX); the directory is fsync'ed so the rename survives a crash. The
    file gets the mode of any new file (0o666 less the umask). An interrupt (Ctrl-C) during the
    write removes the temporary file and is raised as itself, ``path`` untouched.

    A URL (``s3://...``, see `trainer.contracts.storage`) is written with one upload, which the
    object store makes visible only when complete.
    """
    path = storage.normalize(path, "filepath")
    if storage.is_url(path):
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        storage.write_bytes(path, buffer.getvalue())
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        interrupt = _interrupt_behind(err)
        if interrupt is not None:
            # torch's zip writer turns an interrupt inside its write callback into a
            # RuntimeError ("enforce fail at inline_container.cc"): the user pressed Ctrl-C.
            raise interrupt from None
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _create_temp_file(path: Path) -> tuple[int, str]:
    # Not tempfile.mkstemp: its files are mode 0o600 whatever the umask.
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"Could not create a temporary file for {str(path)!r} in {str(path.parent)!r}.")


def _interrupt_behind(err: BaseException) -> BaseException | None:
    """The interrupt (an exception that is not an ``Exception``) ``err`` is or was raised during."""
    current: BaseException | None = err
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        if not isinstance(current, Exception):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def load_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu", weights_only: bool = True) -> dict[str, Any]:
    """Read a checkpoint; raise `CheckpointError` naming the file when it cannot be used.

    ``weights_only=True`` (the default) unpickles only tensors and plain containers, so a
    crafted file cannot run code. Pass ``weights_only=False`` only for files you trust. ``path``
    may be a URL (read whole into memory first).
    """
    path = storage.normalize(path, "ckpt_path")
    if storage.isdir(path):
        raise CheckpointError(f"Checkpoint path {path!r} is a directory, not a checkpoint file.")
    if not storage.isfile(path):
        raise CheckpointError(f"Checkpoint file {path!r} does not exist.")
    source: Any = io.BytesIO(storage.read_bytes(path)) if storage.is_url(path) else path
    if not _looks_like_torch_file(source):
        raise CheckpointError(
            f"{str(path)!r} is not a Lockstep checkpoint: it is not a file written by torch.save."
        )
    try:
        ckpt = torch.load(source, map_location=map_location, weights_only=weights_only)
    except Exception as err:
        if weights_only and _is_refused_pickle(err):
            raise CheckpointError(
                f"Refused to load {str(path)!r}: it needs objects that are not safe to unpickle. "
                f"torch.load(weights_only=True) says: {_weights_only_reason(err)} Loading it could run "
                "arbitrary code. If you trust the file, pass weights_only=False to trainer.fit, validate, "
                "test or predict (e.g. trainer.fit(..., ckpt_path=..., weights_only=False)) or to "
                "load_from_checkpoint (YourModule.load_from_checkpoint(path, weights_only=False))."
            ) from err
        raise CheckpointError(
            f"Could not load checkpoint {str(path)!r}: {type(err).__name__}: {_first_line(err)}. "
            "The file is truncated or corrupt; use an earlier checkpoint."
        ) from err
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"{str(path)!r} is not a Lockstep checkpoint (no 'state_dict' entry).")
    check_entries(ckpt, str(path))
    return ckpt


# torch.save writes a zip archive holding `<name>/data.pkl`; the legacy format (torch < 1.6, or
# _use_new_zipfile_serialization=False) is a pickle that starts with torch's magic number.
_ZIP_START = b"PK\x03\x04"
_LEGACY_MAGIC = (0x1950A86A20F9469CFC6C).to_bytes(10, "little")


def _looks_like_torch_file(source: str | io.BytesIO) -> bool:
    if isinstance(source, io.BytesIO):
        head = source.getvalue()[:64]
    else:
        with open(source, "rb") as f:
            head = f.read(64)
    if not head.startswith(_ZIP_START):
        return head.startswith(b"\x80") and _LEGACY_MAGIC in head
    try:
        with zipfile.ZipFile(source) as archive:
            return any(name == "data.pkl" or name.endswith("/data.pkl") for name in archive.namelist())
    except zipfile.BadZipFile:
        return True  # a torch zip cut short: torch.load reports it as truncated
    finally:
        if isinstance(source, io.BytesIO):
            source.seek(0)


def _is_refused_pickle(err: Exception) -> bool:
    import pickle

    return isinstance(err, pickle.UnpicklingError) and "weights_only" in str(err).lower().replace(" ", "_")


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _weights_only_reason(err: Exception) -> str:
    """torch's explanation of a weights-only refusal (which global, how to allow it), on one line."""
    text = _ANSI_ESCAPE.sub("", str(err))
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1].split("Check the documentation of torch.load", 1)[0]
    return " ".join(text.split())


def _first_line(err: Exception) -> str:
    text = _ANSI_ESCAPE.sub("", str(err)).strip()
    return text.splitlines()[0] if text else type(err).__name__


def weights_only_loadable(value: Any) -> Any:
    """``value`` with everything ``torch.load(weights_only=True)`` refuses turned into plain data.

    Paths become strings, classes and functions their qualified names, enums ``"Class.NAME"``,
    numbers of other types (NumPy) Python numbers, sets sorted lists, and any other object its
    ``repr``: the run's own checkpoints always load without ``weights_only=False``.
    """
    if value is None or type(value) in _KEPT or isinstance(value, torch.Tensor):
        return value
    if isinstance(value, Mapping):
        return {weights_only_loadable(k): weights_only_loadable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # a namedtuple becomes a tuple
        return (list if isinstance(value, list) else tuple)(weights_only_loadable(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return sorted((weights_only_loadable(v) for v in value), key=repr)
    return _as_plain_data(value)


# the types torch.load(weights_only=True) reads back as they are (their subclasses are converted)
_KEPT = (bool, int, float, complex, str, bytes, torch.dtype, torch.Size)


def stored_as_text(hparams: Mapping[str, Any]) -> list[str]:
    """The names in ``hparams`` whose values `weights_only_loadable` keeps only as text: an object's
    ``repr``, a class's or function's qualified name, an enum's name (or a container holding one).
    ``__init__`` cannot be given such a value back in place of the object it stands for."""
    return sorted(str(name) for name, value in hparams.items() if not _reads_back(value))


def _reads_back(value: Any) -> bool:
    """Whether ``value`` is stored as itself or as plain data that stands for it (a path's string, a
    NumPy number's Python number, a set's sorted list, a device's name)."""
    if isinstance(value, Mapping):
        return all(_reads_back(k) and _reads_back(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_reads_back(v) for v in value)
    plain = (str, bytes, numbers.Number, torch.Tensor, torch.device, torch.dtype, torch.Size, os.PathLike)
    return value is None or (isinstance(value, plain) and not isinstance(value, enum.Enum))


def _as_plain_data(value: Any) -> Any:
    """A value that is not a container: as a string or a Python number."""
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return f"{getattr(value, '__module__', None) or ''}.{value.__qualname__}".lstrip(".")
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):  # a str subclass
        return str(value)
    return repr(value)


def check_compatible(
    checkpoint: dict[str, Any], path: str, module: torch.nn.Module, optimizers: list[Any], schedulers: list[Any]
) -> None:
    """Refuse a checkpoint that does not fit, before anything is loaded (no half-loaded model)."""
    problems = _weight_problems(module.state_dict(), checkpoint["state_dict"])
    if optimizers:
        problems += _optimizers_problems(checkpoint, optimizers)
    if schedulers and len(checkpoint.get("lr_schedulers", [])) != len(schedulers):
        problems.append(f"{len(checkpoint.get('lr_schedulers', []))} scheduler state(s) for {len(schedulers)} scheduler(s)")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise CheckpointError(f"Checkpoint {path!r} does not fit this run: {shown}. Nothing was loaded.")


def _weight_problems(expected: dict[str, Any], saved: dict[str, Any]) -> list[str]:
    """Missing, unexpected and differently shaped entries of the saved weights."""
    problems = [f"missing {k!r}" for k in expected if k not in saved]
    problems += [f"unexpected {k!r}" for k in saved if k not in expected]
    problems += [
        f"{k!r} has shape {tuple(saved[k].shape)}, the module {tuple(v.shape)}"
        for k, v in expected.items()
        if k in saved and hasattr(saved[k], "shape") and tuple(saved[k].shape) != tuple(v.shape)
    ]
    return problems


def _optimizers_problems(checkpoint: dict[str, Any], optimizers: list[Any]) -> list[str]:
    """Why the saved optimizer states cannot be loaded into ``optimizers``."""
    states = checkpoint.get("optimizer_states", [])
    problems = []
    if len(states) != len(optimizers):
        problems.append(f"{len(states)} optimizer state(s) for {len(optimizers)} optimizer(s)")
    saved_classes = checkpoint.get("optimizer_classes")
    for i, (opt, state) in enumerate(zip(optimizers, states)):
        saved_class = saved_classes[i] if saved_classes and i < len(saved_classes) else None
        problems += _optimizer_problems(i, opt, state, saved_class)
    return problems


def _optimizer_problems(i: int, opt: Any, state: dict[str, Any], saved_class: str | None) -> list[str]:
    """Why optimizer ``i``'s saved ``state`` cannot be loaded into ``opt`` (another class fails
    only at the first step, e.g. ``KeyError: 'betas'`` for SGD's state in Adam)."""
    name = type(opt).__qualname__
    if saved_class is not None and saved_class != name:
        return [f"optimizer {i} is {saved_class} in the checkpoint, {name} in this run"]
    groups = state.get("param_groups", [])
    sizes = [len(g["params"]) for g in opt.param_groups]
    saved_sizes = [len(g["params"]) for g in groups]
    if sizes != saved_sizes:
        return [f"optimizer {i} has parameter groups of sizes {sizes}, the checkpoint {saved_sizes}"]
    if saved_class is None:  # a checkpoint older than `optimizer_classes`: judge by the group keys
        known = set().union(*(g.keys() for g in opt.param_groups))
        foreign = sorted(set().union(*(g.keys() for g in groups)) - known)
        if foreign:
            return [f"optimizer {i}'s saved parameter groups have keys {foreign} that {name} does not use "
                    "(a checkpoint of another optimizer class)"]
    return []


