"""Suite-wide rules that let the same tests pass on a CPU laptop, a GPU machine and ``pytest -n auto``.

Layout: ``tests/`` is a package whose folders mirror the code (``loops/``, ``checkpointing/``,
``data/``, ``strategies/``, ``distributed/``, ``launch/``, ``accelerators/``, ``optim/``,
``callbacks/``), plus ``faults/`` (the fault-injection matrix), ``project/`` (suite-wide checks:
portability, architecture rules, import time, examples, benchmarks, bad input), ``fixtures/``
(files kept from older versions, e.g. a v0.1 checkpoint) and ``scripts/`` (run as subprocesses).
Shared code lives in ``tests/helpers/`` and is imported one way everywhere, tests, spawned ranks
and scripts alike: ``from tests.helpers.models import QUIET, Regression``
(``run_script`` puts the checkout on ``PYTHONPATH``). ``QUIET`` in ``tests/helpers/models.py`` is
the one definition of the quiet Trainer settings.

- ``@pytest.mark.cuda`` (or ``@pytest.mark.cuda(devices=N)``) skips a test, with the reason, on a
  machine with fewer than N CUDA devices (default 1).
- Every test runs with its own empty ``tmp_path`` as working directory, so output a Trainer writes
  relative to the working directory (its default ``default_root_dir``) is never shared between
  tests or between xdist workers.
- Under ``pytest -n N`` without a ``--dist`` choice, tests are spread one by one over the workers
  (``--dist loadgroup``). The tests of a module that share a module-scoped fixture (several
  compute a whole distributed run once for many asserts), and those of the ``slurm`` and
  ``multinode`` modules, are marked ``xdist_group`` per module; only an explicit
  ``--dist loadgroup`` keeps such a group on one worker (an xdist worker reads ``--dist`` from the
  command line, and tags groups before this hook adds the marks). With plain ``-n`` a module
  fixture is built on each worker that runs one of its tests: keeping the groups together was
  measured slower (19 min 16 s against 17 min 29 s). Whole-module scheduling (``loadfile``) left
  one worker running a long module alone at the end of the suite.
- ``--fast`` runs the fast tier for the inner loop: no real launches and no services. It leaves
  out the tests marked ``distributed``, ``slow``, ``faults``, ``slurm``, ``multinode`` or
  ``launches`` (starts a process: a script, a server, torchrun) and those using a module fixture
  of ``_LAUNCHING_FIXTURES``; a fast-tier test (or fixture) that starts a process anyway fails,
  naming the marker it needs (DataLoader workers, which fork, are allowed).
- ``--cpu-report`` prints the CPU-seconds (user + system, of the test and the processes it
  waited for) per test folder at the end, so that the suite's growth is seen per part.
- So the expensive module fixtures (a whole distributed run, the mlflow server) are made once
  per session with ``tests/helpers/session_cache.py``: the first worker that needs one makes it,
  the others read it. The servers it started are stopped here, in ``pytest_sessionfinish`` of
  the main process, once every worker is done.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from tests.helpers.session_cache import stop_shared_services

# MLflow's telemetry thread sets and deletes an environment variable while a test thread may be
# iterating os.environ (urllib's proxy look-up): a KeyError in the MLflow tests. It would also try
# to reach an outside host, which the suite never does.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def cuda_skip_reason(marker: pytest.Mark, available: int) -> str | None:
    """Why a test with this ``cuda`` marker cannot run with ``available`` CUDA devices, or None."""
    needed = marker.kwargs.get("devices", marker.args[0] if marker.args else 1)
    if isinstance(needed, bool) or not isinstance(needed, int) or needed < 1:
        raise ValueError(f"@pytest.mark.cuda(devices=...) needs an int >= 1, got {needed!r}")
    if available >= needed:
        return None
    return f"needs {needed} CUDA device(s), this machine has {available}"


_SERIAL_MARKERS = ("slurm", "multinode")
# Left out of the fast tier (``--fast``): real launches, services, long runs.
_NOT_FAST = ("distributed", "slow", "faults", "slurm", "multinode", "launches")
# Module fixtures that start processes (a whole distributed run, a server): their tests are
# left out of the fast tier too. (module, fixture); the fast tier's guard names any it misses.
_LAUNCHING_FIXTURES = {
    ("tests/checkpointing/test_fsdp_checkpoint.py", "run"),
    ("tests/strategies/test_fsdp_training.py", "fsdp_runs"),
    ("tests/callbacks/test_mlflow_logger.py", "tracking_uri"),
    ("tests/checkpointing/test_remote_storage.py", "s3_endpoint"),
}


def _not_fast(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(name) for name in _NOT_FAST):
        return True
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return any((d[-1].baseid, name) in _LAUNCHING_FIXTURES for name, d in defs.items() if d)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true", help="the fast tier: no real launches, no services")
    parser.addoption("--cpu-report", action="store_true", help="CPU-seconds per test folder at the end")


def pytest_configure(config: pytest.Config) -> None:
    chose = any(str(arg).startswith("--dist") for arg in config.invocation_params.args)
    if getattr(config.option, "dist", "no") == "load" and not chose:
        config.option.dist = "loadgroup"


def _shares_module_state(item: pytest.Item) -> bool:
    """Whether ``item`` must run on the worker that runs the rest of its module."""
    if any(item.get_closest_marker(name) for name in _SERIAL_MARKERS):
        return True
    info = getattr(item, "_fixtureinfo", None)
    if info is None:  # another pytest's item: keep the module together, as before
        return True
    return any(defs and defs[-1].scope in ("module", "package", "class") for defs in info.name2fixturedefs.values())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if config.getoption("--fast"):
        slow = [item for item in items if _not_fast(item)]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if item not in set(slow)]
    for item in items:
        if _shares_module_state(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
        marker = item.get_closest_marker("cuda")
        if marker is not None:
            reason = cuda_skip_reason(marker, available)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


def pytest_sessionfinish(session: pytest.Session) -> None:
    stop_shared_services(session.config)


@pytest.fixture(autouse=True)
def _own_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    with _no_process_started(item):  # fixtures too: a session fixture may start a server
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    with _no_process_started(item):
        yield


@contextlib.contextmanager
def _no_process_started(item: pytest.Item) -> Iterator[None]:
    """Under ``--fast``, starting a process (not a forked DataLoader worker) fails the test."""
    if not item.config.getoption("--fast"):
        yield
        return
    import multiprocessing.popen_forkserver
    import multiprocessing.popen_spawn_posix
    import subprocess

    def refuse(what: str) -> None:
        pytest.fail(
            f"{item.nodeid} starts {what}, which the fast tier (--fast) leaves out: mark it "
            "@pytest.mark.launches (or distributed / slow)", pytrace=False,
        )

    popen = subprocess.Popen.__init__

    def checked_popen(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        program = os.path.basename(os.fsdecode(argv[0]).split()[0]) if argv else ""
        # a Python process is a launch, a worker or a server; a quick tool (ldconfig, bash -n) is not
        launch = program.startswith("python") or program in _LAUNCHERS or os.fsdecode(argv[0]) == sys.executable
        if launch and not _asked_by_a_library():
            refuse(f"a process ({program})")
        popen(self, args, *rest, **kwargs)

    spawners = (multiprocessing.popen_spawn_posix.Popen, multiprocessing.popen_forkserver.Popen)
    saved = [(subprocess.Popen, popen), *((owner, owner.__init__) for owner in spawners)]
    subprocess.Popen.__init__ = checked_popen  # type: ignore[method-assign]
    for owner in spawners:
        owner.__init__ = lambda *a, **k: refuse("a spawned process")  # type: ignore[method-assign]
    try:
        yield
    finally:
        for owner, init in saved:
            owner.__init__ = init  # type: ignore[method-assign]


def _asked_by_a_library() -> bool:
    """Whether a library asks its interpreter a question (jsonargparse's stub finder reads
    ``sys.path`` of a fresh Python once): no launch of ours."""
    frame = sys._getframe(2)
    while frame is not None:
        if "typeshed_client" in frame.f_code.co_filename:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


_LAUNCHERS = {"torchrun", "mlflow", "moto_server", "tensorboard", "wandb", "srun", "sbatch", "unshare", "ip", "mkdocs"}


_LOG_STARTED: dict[str, Any] = {}  # nodeid -> os.times() when the test's protocol began
_CPU_SECONDS: dict[str, float] = {}  # per folder, added up in the process that reports (xdist's main one)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _LOG_STARTED[nodeid] = os.times()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    if call.when == "teardown" and item.nodeid in _LOG_STARTED:
        before, after = _LOG_STARTED.pop(item.nodeid), os.times()
        # user and system time of the test, and of the processes it started and waited for
        outcome.get_result().user_properties.append(("cpu_seconds", sum(after[i] - before[i] for i in range(4))))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    spent = dict(report.user_properties).get("cpu_seconds") if report.when == "teardown" else None
    if isinstance(spent, float):
        folder = os.path.dirname(report.nodeid.split("::", 1)[0])
        _CPU_SECONDS[folder] = _CPU_SECONDS.get(folder, 0.0) + spent


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not config.getoption("--cpu-report"):
        return
    terminalreporter.section("CPU-seconds per test folder")
    for folder, seconds in sorted(_CPU_SECONDS.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:9.1f}  {folder}")
    terminalreporter.write_line(f"{sum(_CPU_SECONDS.values()):9.1f}  in all")
