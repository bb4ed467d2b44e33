"""Where checkpoints and logs live: a local path, or a URL that fsspec serves (``s3://``, ``gs://``,
``memory://``, ...).

Every file operation of the Trainer, `ModelCheckpoint` and the file loggers on a run directory goes
through here (it sits in the contracts floor, so the trainer and the callbacks both use it), so a URL is never handed to ``os`` (which would make a local directory named
``s3:``). ``file://`` URLs become local paths. fsspec (extra ``remote``) is imported only when a URL
is used; a protocol fsspec does not know is an error naming the argument.
"""
from __future__ import annotations

import datetime
import math
import os
import posixpath
import re
import secrets
import shutil
import threading
from typing import Iterable, Protocol

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
# Object stores: one PUT makes the whole object visible at once (S3 and GCS also for multipart
# uploads, which only appear when completed), so a reader never sees part of a checkpoint.
_ATOMIC_PUT = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "memory"}
_LOCAL = {"file", "local"}
# How long one request to remote storage may take (connect, or wait for an answer), in seconds.
TIMEOUT_ENV = "LOCKSTEP_STORAGE_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0


def timeout_s() -> float:
    """The remote-storage timeout: ``LOCKSTEP_STORAGE_TIMEOUT`` seconds, else 30."""
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}={text!r}: expected a positive number of seconds.") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{TIMEOUT_ENV}={text!r}: expected a positive number of seconds.")
    return value


def protocol(path: str | os.PathLike[str]) -> str | None:
    """The URL scheme of ``path`` (``"s3"`` for ``s3://b/k``), or None for a local path."""
    match = _URL.match(os.fspath(path))
    return match.group(1).lower() if match else None


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a URL other than ``file://`` (it must go through fsspec)."""
    proto = protocol(path)
    return proto is not None and proto not in _LOCAL


def normalize(path: str | os.PathLike[str], what: str = "path") -> str:
    """``path`` as a local path (``file://`` stripped) or a URL fsspec can serve.

    Raises ``ValueError`` for a protocol fsspec does not know and ``ImportError`` (naming what to
    install) when fsspec or the protocol's package is missing; ``what`` names the argument.
    """
    text = os.fspath(path)
    proto = protocol(text)
    if proto is None:
        return text
    if proto in _LOCAL:
        return text[len(proto) + 3:] or "/"
    _filesystem_class(proto, what, text)
    return text.rstrip("/") if text.rstrip("/") != f"{proto}:/" else text


def join(base: str, *parts: str) -> str:
    """``base`` joined with ``parts`` (``/`` for a URL, ``os.path.join`` for a local path)."""
    return posixpath.join(base, *parts) if is_url(base) else os.path.join(base, *parts)


def makedirs(path: str) -> None:
    """Create directory ``path`` and its parents (on an object store: the bucket, if missing)."""
    if not is_url(path):
        os.makedirs(path, exist_ok=True)
        return
    fs, inner = _fs(path)
    fs.makedirs(inner, exist_ok=True)


def exists(path: str) -> bool:
    """Whether a file or directory ``path`` exists."""
    if not is_url(path):
        return os.path.exists(path)
    fs, inner = _fs(path)
    return bool(fs.exists(inner))


def isfile(path: str) -> bool:
    """Whether ``path`` is a file (an object)."""
    if not is_url(path):
        return os.path.isfile(path)
    fs, inner = _fs(path)
    return bool(fs.isfile(inner))


def isdir(path: str) -> bool:
    """Whether ``path`` is a directory (for an object store: a prefix holding objects)."""
    if not is_url(path):
        return os.path.isdir(path)
    fs, inner = _fs(path)
    return bool(fs.isdir(inner))


def listdir(path: str) -> list[str]:
    """The names in directory ``path``; ``FileNotFoundError`` if there is none."""
    if not is_url(path):
        return os.listdir(path)
    fs, inner = _fs(path)
    fs.invalidate_cache(inner)  # another process (rank 0, an earlier run) may have written since
    inner = inner.rstrip("/")
    # some writers (TensorBoard) leave a "dir/" marker object, listed inside the directory itself
    entries = (p.rstrip("/") for p in fs.ls(inner, detail=False))
    return [posixpath.basename(p) for p in entries if p != inner]


def glob(pattern: str) -> list[str]:
    """Paths matching ``pattern`` (``**`` matches any number of directories), as full URLs."""
    if not is_url(pattern):
        import glob as _glob

        return _glob.glob(pattern, recursive=True)
    fs, inner = _fs(pattern)
    fs.invalidate_cache()
    return [fs.unstrip_protocol(p) for p in fs.glob(inner)]


def remove(path: str) -> None:
    """Delete file ``path``, or directory ``path`` with its content (a sharded checkpoint); a
    missing path is not an error."""
    if not is_url(path):
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        except FileNotFoundError:
            pass
        return
    fs, inner = _fs(path)
    try:
        if fs.isdir(inner):
            fs.rm(inner, recursive=True)
        else:
            fs.rm_file(inner)
    except FileNotFoundError:
        pass
    fs.invalidate_cache(posixpath.dirname(inner))


def mtime(path: str) -> float:
    """Last modification time of file (or local directory) ``path`` (seconds since the epoch)."""
    if not is_url(path):
        return os.path.getmtime(path)
    fs, inner = _fs(path)
    return fs.modified(inner).timestamp()


def read_bytes(path: str) -> bytes:
    """The whole content of file ``path``."""
    if not is_url(path):
        with open(path, "rb") as f:
            return f.read()
    fs, inner = _fs(path)
    return fs.cat_file(inner)


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so a reader sees the old content or all of the new, never a part.

    Local files and filesystems without atomic uploads: a temporary sibling renamed over
    ``path``. Object stores: one upload, which they make visible only when complete.
    """
    if not is_url(path):
        parent = os.path.dirname(path) or "."
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return
    fs, inner = _fs(path)
    if protocol(path) in _ATOMIC_PUT:
        fs.pipe_file(inner, data)
    else:
        parent = posixpath.dirname(inner)
        fs.makedirs(parent, exist_ok=True)
        tmp = posixpath.join(parent, f".{posixpath.basename(inner)}.{secrets.token_hex(6)}.tmp")
        fs.pipe_file(tmp, data)
        fs.mv(tmp, inner)
    fs.invalidate_cache(posixpath.dirname(inner))


def unwritable(dirpath: str) -> str | None:
    """Why no file can be written under URL ``dirpath`` (found by writing and deleting a probe), or None.

    The probe gets `timeout_s` seconds in all: a store that accepts connections but never
    answers is reported then, naming the URL, whatever the filesystem's own retries would do.
    """
    probe = join(dirpath, f".lockstep-write-test-{secrets.token_hex(6)}")
    outcome: list[str | None] = []

    def attempt() -> None:
        try:
            write_bytes(probe, b"")
            remove(probe)
            outcome.append(None)
        except Exception as err:  # noqa: BLE001 - any failure is the answer
            outcome.append(f"{type(err).__name__}: {err}")

    limit = timeout_s()
    # a daemon thread: a request that never returns must not keep the process alive
    worker = threading.Thread(target=attempt, name="lockstep-storage-probe", daemon=True)
    worker.start()
    worker.join(limit)
    if not outcome:
        return (
            f"no answer from {dirpath!r} within {limit:g} s (writing a probe file); the storage "
            f"accepts connections but does not respond. {TIMEOUT_ENV} sets how long to wait"
        )
    return outcome[0]


class _FileSystem(Protocol):
    """The calls this layer makes on an fsspec filesystem (fsspec is not type-checked)."""

    def makedirs(self, path: str, exist_ok: bool = False) -> None: ...
    def exists(self, path: str) -> bool: ...
    def isfile(self, path: str) -> bool: ...
    def isdir(self, path: str) -> bool: ...
    def invalidate_cache(self, path: str | None = None) -> None: ...
    def ls(self, path: str, detail: bool = True) -> Iterable[str]: ...
    def glob(self, path: str) -> Iterable[str]: ...
    def unstrip_protocol(self, name: str) -> str: ...
    def rm(self, path: str, recursive: bool = False) -> None: ...
    def rm_file(self, path: str) -> None: ...
    def modified(self, path: str) -> datetime.datetime: ...
    def cat_file(self, path: str) -> bytes: ...
    def pipe_file(self, path: str, value: bytes) -> None: ...
    def mv(self, path1: str, path2: str) -> None: ...


def _fs(path: str) -> tuple[_FileSystem, str]:
    """The fsspec filesystem serving URL ``path`` and the path inside it."""
    proto = protocol(path) or "file"
    _filesystem_class(proto, "path", path)
    import fsspec

    fs, inner = fsspec.core.url_to_fs(path, **_request_limits(proto))
    if proto in _S3 and getattr(fs, "retries", 0) > _S3_RETRIES:
        fs.retries = _S3_RETRIES  # s3fs's own retries (5) of a timed-out request would multiply the bound
    filesystem: _FileSystem = fs
    return filesystem, str(inner)


_S3 = ("s3", "s3a")
_S3_RETRIES = 2


def _request_limits(proto: str) -> dict[str, object]:
    """Filesystem options that bound each request by `timeout_s` (S3: botocore's connect and read
    timeouts, one attempt each under s3fs's own retries), so a silent store fails a request."""
    if proto not in _S3:
        return {}
    limit = timeout_s()
    return {
        "config_kwargs": {"connect_timeout": limit, "read_timeout": limit, "retries": {"max_attempts": 1}},
    }


def _filesystem_class(proto: str, what: str, path: str) -> None:
    """Fail with what to install or use when fsspec cannot serve ``proto``."""
    try:
        import fsspec
    except ImportError:
        raise ImportError(
            f"{what}={path!r} is a {proto}:// URL; remote storage needs fsspec: "
            "pip install 'lockstep-trainer[remote]'."
        ) from None
    if proto not in fsspec.available_protocols():
        raise ValueError(
            f"{what}={path!r}: unknown storage protocol {proto!r}. Use a local path or a URL whose "
            f"protocol fsspec knows (s3://, gs://, memory://, file://, ...)."
        )
    try:
        fsspec.get_filesystem_class(proto)
    except ImportError as err:
        raise ImportError(
            f"{what}={path!r}: the {proto}:// filesystem needs a package that is not installed "
            f"({err}). For s3:// install 'lockstep-trainer[remote]'."
        ) from None
