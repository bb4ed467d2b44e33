"""The fault matrix's own instruments: finding a run's processes, and reading who is blamed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.faults.fault_harness import MARKER_VAR, blamed_rank, run_processes

pytestmark = pytest.mark.faults


def test_a_process_that_left_the_run_group_is_still_found_by_its_marker():
    marker = uuid.uuid4().hex
    # Like a torchrun worker (own session) or an orphan (re-parented): only the marker is left.
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, MARKER_VAR: marker}, start_new_session=True,
    )
    try:
        # The environment is the new one only once the child has exec'd: wait for that.
        deadline = time.monotonic() + 30
        while proc.pid not in run_processes(pgid=-1, marker=marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.pid in run_processes(pgid=-1, marker=marker)
        assert proc.pid in run_processes(pgid=proc.pid, marker="not-this-run")  # by process group
        assert run_processes(pgid=-1, marker="not-this-run") == {}
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 5
    while run_processes(pgid=-1, marker=marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run_processes(pgid=-1, marker=marker) == {}


@pytest.mark.parametrize(
    "launcher, output, rank",
    [
        # The workers' own lines come first; the launcher's headline decides.
        ("python", "[rank0]: [lockstep] rank 0 failed at epoch 1\n[lockstep] worker rank 1 failed with", 1),
        ("torchrun", "Failures:\n  rank : 0 (local_rank: 0)\nRoot Cause (first observed failure):\n[0]:\n"
         "  time : t\n  host : h\n  rank : 1 (local_rank: 1)\n", 1),
        ("spawn", "-- Process 0 terminated with the following error:\n...\ntrainer.failure_notes."
         "RankFailedError: Rank 1 failed at epoch 0: RuntimeError: x", 1),
        ("spawn", "ProcessExitedException: process 1 terminated with signal SIGKILL", 1),
        ("python", "no headline at all", None),
        # Forked ranks: what the survivor's own error says.
        ("forked", "RuntimeError: fault injected\n--- rank 0 ---\ntrainer.launch.failure_notes.RankFailedError: "
         "Rank 1 failed at epoch 1, global step 11", 1),
        ("forked", "trainer.contracts.errors.NonFiniteLossError: On rank 1: The training loss is nan", 1),
    ],
)
def test_the_blamed_rank_is_read_from_what_the_launcher_reports(launcher, output, rank):
    assert blamed_rank(output, launcher) == rank
