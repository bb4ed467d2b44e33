"""Uninterrupted runs that tests in several modules compare their interrupted runs with, made once
per test session (``tests/helpers/session_cache.py``)."""
from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.distributed import REPO_ROOT, read_rank_results, run_script
from tests.helpers.session_cache import once_per_session

FAULT_RUN = str(REPO_ROOT / "tests" / "scripts" / "fault_run.py")


def fault_run_straight(factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """``fault_run.py --mode straight`` under ``torchrun --nproc-per-node 2``: each rank's final
    step and parameters. World size 2 on one node or on two gives the same numbers, so the
    localhost restarts (tests/launch) and the two-node ones (tests/multinode) share it."""

    def launch() -> list[dict[str, Any]]:
        tmp = factory.mktemp("fault_run_straight")
        out = tmp / "out"
        out.mkdir()
        proc = run_script([FAULT_RUN, "--root", str(tmp / "run"), "--mode", "straight"],
                          env={"LOCKSTEP_TEST_OUT": str(out)}, timeout=150)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return read_rank_results(out)

    return once_per_session(factory, "tests/helpers/references.py::fault_run_straight", launch)
