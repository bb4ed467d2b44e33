"""Expensive fixture values and servers made once per test session, across ``pytest -n`` workers.

pytest makes a module-scoped fixture once per process, and under ``pytest -n auto`` the tests
of one module are spread over the workers: each worker that runs one of them would repeat the
module's multi-process run, or start its own server (the mlflow server costs about 18 s of CPU
before it answers). Here the first worker that asks does the work; the others wait for it and
read what it stored.

- ``once_per_session(factory, key, compute)``: ``compute()``'s value (picklable with
  ``torch.save``), computed by one worker.
- ``shared_service(factory, key, start)``: a server that ``start()`` launched in a session of
  its own; its address is shared, and ``stop_shared_services(config)`` (called by the suite's
  ``pytest_sessionfinish`` in the main process, after every worker ended) stops it.

A value that failed to compute is not stored, so the next worker computes it again and reports
its own failure. Keys must name the module and fixture (``"tests/launch/test_x.py::straight"``).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import torch

_SERVICE_SUFFIX = ".service"
_STOP_GRACE_S = 2.0


def _session_root(factory: pytest.TempPathFactory) -> Path:
    base = factory.getbasetemp()
    # An xdist worker's basetemp is ``<main basetemp>/popen-gwN``.
    return (base.parent if base.name.startswith("popen-gw") else base) / "session-cache"


def session_dir(factory: pytest.TempPathFactory) -> Path:
    """The directory every process of this test session shares (in the main process's basetemp)."""
    path = _session_root(factory)
    path.mkdir(exist_ok=True)
    return path


def _file(factory: pytest.TempPathFactory, key: str, suffix: str) -> Path:
    return session_dir(factory) / (hashlib.sha1(key.encode()).hexdigest()[:16] + suffix)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until the value is stored or compute failed
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def once_per_session(factory: pytest.TempPathFactory, key: str, compute: Callable[[], Any]) -> Any:
    """``compute()``, run by the first process of the session to ask; the others read its value."""
    path = _file(factory, key, ".pt")
    with _locked(path):
        if path.exists():
            return torch.load(path, weights_only=False)
        value = compute()
        torch.save(value, path.with_suffix(".tmp"))
        os.replace(path.with_suffix(".tmp"), path)
        return value


def shared_service(
    factory: pytest.TempPathFactory, key: str, start: Callable[[], tuple[subprocess.Popen, str]]
) -> str:
    """The address of the session's server ``key``, started by ``start()`` in the first process
    to ask. ``start`` returns the server (a ``Popen`` made with ``start_new_session=True``, so
    its whole process group can be stopped) and its address, once it answers."""
    path = _file(factory, key, _SERVICE_SUFFIX)
    with _locked(path):
        if path.exists():
            return path.read_text().split("\n", 1)[1]
        server, address = start()
        path.write_text(f"{server.pid}\n{address}")
        return address


def _gone(pgid: int) -> bool:
    """Whether the server's main process has ended (a zombie has: nobody may reap it here)."""
    with contextlib.suppress(ChildProcessError):  # without xdist the server is this process's child
        os.waitpid(pgid, os.WNOHANG)
    try:
        with open(f"/proc/{pgid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def stop_shared_services(config: pytest.Config) -> None:
    """Stop every server ``shared_service`` started in this session: SIGTERM to its process
    group, SIGKILL after a short grace (a throw-away test server need not finish its requests)."""
    # pytest's own factory (xdist reads it too, to give each worker its basetemp): the only way to
    # the basetemp outside a fixture.
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None or hasattr(config, "workerinput"):
        return  # an xdist worker: the main process stops them once every worker is done
    for path in _session_root(factory).glob("*" + _SERVICE_SUFFIX):  # none if no server was asked for
        pgid = int(path.read_text().split("\n", 1)[0])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_S
        while not _gone(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        path.unlink()
