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
- So the expensive module fixtures (a whole distributed run, the mlflow server) are made once
  per session with ``tests/helpers/session_cache.py``: the first worker that needs one makes it,
  the others read it. The servers it started are stopped here, in ``pytest_sessionfinish`` of
  the main process, once every worker is done.
"""
from __future__ import annotations

import os
from pathlib import Path

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
