"""tests/helpers/session_cache.py under ``pytest -n 2``: a module fixture's value is computed by
one worker only, and a shared server is started once and stopped when the session ends; a value
whose computation failed is not stored."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.distributed import REPO_ROOT
from tests.helpers.session_cache import once_per_session

pytest.importorskip("xdist", reason="needs pytest-xdist (the dev extra)")

_CONFTEST = """
from tests.helpers.session_cache import stop_shared_services


def pytest_sessionfinish(session):
    stop_shared_services(session.config)
"""

_TESTS = '''
import os, subprocess, sys, time

import pytest

from tests.helpers.session_cache import once_per_session, shared_service


def _compute():
    with open(os.environ["COMPUTED"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(1)  # the other worker asks meanwhile and must wait for this value
    return {"answer": 42, "by": os.getpid()}


def _start():
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    with open(os.environ["STARTED"], "a") as f:
        f.write(f"{server.pid}\\n")
    return server, f"server-{server.pid}"


@pytest.fixture(scope="module")
def value(tmp_path_factory):
    return once_per_session(tmp_path_factory, "test_inner.py::value", _compute)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    return shared_service(tmp_path_factory, "test_inner.py::server", _start)


@pytest.mark.parametrize("i", range(8))
def test_both_workers_see_one_value_and_one_server(value, server, i):
    with open(os.environ["WORKERS"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    assert value["answer"] == 42 and server.startswith("server-")
    time.sleep(0.2)  # keep both workers busy, so both run some of these
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.timeout(180)
@pytest.mark.launches
def test_two_workers_compute_once_and_the_server_is_stopped_at_the_end(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(_CONFTEST)
    (tmp_path / "test_inner.py").write_text(_TESTS)
    files = {name: tmp_path / f"{name.lower()}.txt" for name in ("COMPUTED", "STARTED", "WORKERS")}
    outer = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # this run's worker
    env = {**outer, **{name: str(path) for name, path in files.items()},
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "load", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "basetemp"), "--rootdir", str(tmp_path), str(tmp_path / "test_inner.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert set(files["WORKERS"].read_text().split()) == {"gw0", "gw1"}  # both workers used them
    assert len(files["COMPUTED"].read_text().split()) == 1
    [pid] = [int(p) for p in files["STARTED"].read_text().split()]
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the shared server outlived the session"


def test_a_value_that_failed_is_not_stored_and_the_next_caller_computes_it(tmp_path_factory) -> None:
    key = f"{__name__}::{os.getpid()}::failing"
    calls = []

    def failing():
        calls.append("failing")
        raise RuntimeError("the launch failed")

    def working():
        calls.append("working")
        return [1, 2]

    with pytest.raises(RuntimeError, match="the launch failed"):
        once_per_session(tmp_path_factory, key, failing)
    assert once_per_session(tmp_path_factory, key, working) == [1, 2]
    assert once_per_session(tmp_path_factory, key, failing) == [1, 2]  # read, not computed again
    assert calls == ["failing", "working"]
