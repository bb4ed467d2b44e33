"""One run per checkpoint directory: a lock file naming the run that writes there.

`ModelCheckpoint` takes the lock at fit start (global rank 0) and releases it when the fit ends.
A second run that finds the lock held by a live process refuses to start and names the holder
(its run id, host and pid), so two concurrent runs never write one ``last.ckpt``. A lock left by
a run that died is taken over: its process is gone (same host), or it was the same job restarted
(the same run id: torchrun's ``--rdzv-id`` with its store address, or Slurm's job id).
"""
from __future__ import annotations

import json
import os
import socket
import time
import uuid
from typing import Any

from trainer.contracts import storage

LOCK_FILE = ".lockstep-run.lock"
# A process without a launcher's job id is its own run.
_PROCESS_RUN_ID = f"process-{uuid.uuid4().hex[:12]}"


class RunLockedError(RuntimeError):
    """Another run is writing checkpoints to the same directory."""


def run_id() -> str:
    """This job's id, the same on every node and across restarts of the job."""
    env = os.environ
    if env.get("TORCHELASTIC_RUN_ID"):
        # torchrun's default id is "none": the store address tells concurrent jobs apart
        return f"{env['TORCHELASTIC_RUN_ID']}@{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}"
    if env.get("SLURM_JOB_ID"):
        return f"slurm-{env['SLURM_JOB_ID']}"
    return _PROCESS_RUN_ID


class RunLock:
    """The lock of checkpoint directory ``dirpath`` (a local path or a URL)."""

    def __init__(self, dirpath: str) -> None:
        self.path = storage.join(dirpath, LOCK_FILE)
        self._made: list[str] = []  # directories made for the lock, removed with it when left empty

    def acquire(self) -> str | None:
        """Take the lock for this run; return a warning about a stale lock taken over, or None.
        Raises `RunLockedError` naming the run that holds it."""
        mine = {"run_id": run_id(), "host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        holder = self._create(mine)
        if holder is None:
            return None
        if holder.get("host") == mine["host"] and holder.get("pid") == mine["pid"]:
            raise RunLockedError(_held(self.path, holder, "another fit in this process is writing there"))
        if holder.get("host") == mine["host"] and _alive(holder.get("pid")):
            raise RunLockedError(_held(self.path, holder, "that process is running"))
        if holder.get("host") != mine["host"] and holder.get("run_id") != mine["run_id"]:
            raise RunLockedError(_held(self.path, holder, "it runs on another host, so it may still be running"))
        storage.write_bytes(self.path, json.dumps(mine).encode())  # stale: the holder is gone, or this job restarted
        return f"ModelCheckpoint took over the lock {self.path!r} of a run that is gone ({_who(holder)})."

    def release(self) -> None:
        """Give up the lock if this process holds it."""
        holder = _read(self.path)
        if holder is not None and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
            storage.remove(self.path)
        for directory in reversed(self._made):  # a fit that saved nothing leaves nothing behind
            try:
                os.rmdir(directory)
            except OSError:  # not empty: checkpoints were written
                break
        self._made = []

    def _create(self, mine: dict[str, Any]) -> dict[str, Any] | None:
        """Create the lock (None), or the content of the one that exists."""
        data = json.dumps(mine).encode()
        if storage.is_url(self.path):  # object stores have no exclusive create: check, then write
            holder = _read(self.path)
            if holder is None:
                storage.write_bytes(self.path, data)
            return holder
        self._make_parents(os.path.dirname(os.path.abspath(self.path)))
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


def _read(path: str) -> dict[str, Any] | None:
    try:
        value = json.loads(storage.read_bytes(path).decode())
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        return {}  # a lock being written, or damaged: held by someone unknown
    return value if isinstance(value, dict) else {}


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return True  # unknown: assume it runs
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _who(holder: dict[str, Any]) -> str:
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return f"run id {holder.get('run_id', '?')}, pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, started {when}"


def _held(path: str, holder: dict[str, Any], why: str) -> str:
    return (
        f"Another run writes checkpoints to {os.path.dirname(path)!r}: its lock {path!r} is held by "
        f"{_who(holder)}, and {why}. Two runs in one directory would overwrite each other's files "
        "(last.ckpt). Give this run another ModelCheckpoint(dirpath=...), or delete the lock file "
        "if that run is gone."
    )
