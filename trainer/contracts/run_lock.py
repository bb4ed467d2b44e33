"""One run per checkpoint directory: a lock file naming the run that writes there.

`ModelCheckpoint` takes the lock at fit start (global rank 0) and releases it when the fit ends;
the checkpoint callbacks of one fit that share a directory share its lock, and a pre-emption
save without a `ModelCheckpoint` takes it for the save. A second run that finds the lock held
by a live process refuses to start and names the holder (its run id, host and pid), so two
concurrent runs never write one ``last.ckpt``. A lock left by a run that died is taken over:
its process is gone (same host; the same pid in an earlier process, as a container's pid 1 is
after a restart, counts as gone), or it was the same run restarted (the same run id,
`trainer.contracts.run_identity`).
"""
from __future__ import annotations

import json
import os
import socket
import time

from trainer.contracts import storage
from trainer.contracts.run_identity import PROCESS_TOKEN, attempt, run_id

LOCK_FILE = ".lockstep-run.lock"
# The locks this process holds: path -> (the owner, e.g. the Trainer of the fit, how many holders)
_HELD: dict[str, tuple[int, int]] = {}


class RunLockedError(RuntimeError):
    """Another run is writing checkpoints to the same directory."""


class RunLock:
    """The lock of checkpoint directory ``dirpath`` (a local path or a URL)."""

    def __init__(self, dirpath: str) -> None:
        self.path = storage.join(dirpath, LOCK_FILE)
        self._made: list[str] = []  # directories made for the lock, removed with it when left empty

    def acquire(self, owner: object = None) -> str | None:
        """Take the lock for this run; return a warning about a stale lock taken over, or None.

        Holders with the same ``owner`` (the checkpoint callbacks of one fit) share the lock.
        Raises `RunLockedError` naming the run that holds it.
        """
        key = self._key()
        held = _HELD.get(key)
        if held is not None:
            if held[0] == id(owner) and owner is not None:
                _HELD[key] = (held[0], held[1] + 1)
                return None
            raise RunLockedError(_held(self.path, _read(self.path) or {}, "another fit in this process is writing there"))
        mine = {"run_id": run_id(), "attempt": attempt(), "host": socket.gethostname(), "pid": os.getpid(),
                "process": PROCESS_TOKEN, "started": time.time()}
        holder = self._create(mine)
        if holder is not None:
            reason = _why_still_held(holder, mine)
            if reason is not None:
                raise RunLockedError(_held(self.path, holder, reason))
            storage.write_bytes(self.path, json.dumps(mine).encode())  # stale: the holder is gone, or this run restarted
        _HELD[key] = (id(owner), 1)
        if holder is None:
            return None
        return f"ModelCheckpoint took over the lock {self.path!r} of a run that is gone ({_who(holder)})."

    def release(self) -> None:
        """Give up this holder's share of the lock; the last holder in this process removes it."""
        key = self._key()
        owner, count = _HELD.get(key, (0, 0))
        if count > 1:
            _HELD[key] = (owner, count - 1)
            return
        _HELD.pop(key, None)
        holder = _read(self.path)
        if holder is not None and holder.get("process") == PROCESS_TOKEN:
            storage.remove(self.path)
        for directory in reversed(self._made):  # a fit that saved nothing leaves nothing behind
            try:
                os.rmdir(directory)
            except OSError:  # not empty: checkpoints were written
                break
        self._made = []

    def _key(self) -> str:
        return self.path if storage.is_url(self.path) else os.path.realpath(self.path)

    def _create(self, mine: dict[str, object]) -> dict[str, object] | None:
        """Create the lock (None), or the content of the one that exists."""
        data = json.dumps(mine).encode()
        if storage.is_url(self.path):  # object stores have no exclusive create: check, then write
            holder = _read(self.path)
            if holder is None:
                storage.write_bytes(self.path, data)
            return holder
        self._make_parents(os.path.dirname(os.path.abspath(self.path)))
        if os.path.isdir(self.path):
            raise RunLockedError(
                f"The run lock {self.path!r} is a directory, not a lock file (Lockstep writes one small "
                "file there): remove that directory, or give this run another ModelCheckpoint(dirpath=...)."
            )
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return _read(self.path) or {}
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return None

    def _make_parents(self, directory: str) -> None:
        missing = []
        while not os.path.exists(directory) and os.path.dirname(directory) != directory:
            missing.append(directory)
            directory = os.path.dirname(directory)
        if missing:
            os.makedirs(missing[0], exist_ok=True)
        self._made = list(reversed(missing))


def _read(path: str) -> dict[str, object] | None:
    try:
        value = json.loads(storage.read_bytes(path).decode())
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        return {}  # a lock being written, or damaged: held by someone unknown
    return value if isinstance(value, dict) else {}


def _why_still_held(holder: dict[str, object], mine: dict[str, object]) -> str | None:
    """Why the lock ``holder`` wrote may still be in use, or None when it is stale."""
    if not holder:
        return "its lock file cannot be read (being written, or damaged), so whose it is is unknown"
    same_host = holder.get("host") == mine["host"]
    if same_host and holder.get("pid") == mine["pid"]:
        # this pid's earlier process (a container's pid 1 restarted) left it, unless it says
        # it is this very process (or, written before the token existed, this run)
        this_process = holder.get("process", None) == PROCESS_TOKEN or (
            "process" not in holder and holder.get("run_id") == mine["run_id"]
        )
        return "another fit in this process is writing there" if this_process else None
    if same_host and _alive(holder.get("pid")):
        return "that process is running"
    if not same_host and holder.get("run_id") != mine["run_id"]:
        return "it runs on another host, so it may still be running"
    return None


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return True  # unknown: assume it runs
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _who(holder: dict[str, object]) -> str:
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return f"run id {holder.get('run_id', '?')}, pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, started {when}"


def _held(path: str, holder: dict[str, object], why: str) -> str:
    return (
        f"Another run writes checkpoints to {os.path.dirname(path)!r}: its lock {path!r} is held by "
        f"{_who(holder)}, and {why}. Two runs in one directory would overwrite each other's files "
        "(last.ckpt). Give this run another ModelCheckpoint(dirpath=...), or delete the lock file "
        "if that run is gone."
    )
