"""A stalled rank: every rank that can still run prints its stack, and the error names the stalled
rank and the collective. Two gloo ranks under torchrun, each writing its own log (``--redirects``),
with a short process-group timeout (``DDPStrategy(timeout=...)``, `fault_run.py --timeout`).

Rank 1 stalls at global step 7: ``hold`` sleeps in its training thread while its heartbeat
thread still beats; ``stop`` freezes the whole process (SIGSTOP). torchrun ends the frozen or
sleeping rank after rank 0 failed (SIGTERM, then SIGKILL 30 s later)."""
from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from tests.helpers.distributed import REPO_ROOT, run_script

SCRIPT = str(REPO_ROOT / "tests" / "scripts" / "fault_run.py")
GROUP_TIMEOUT_S = 10  # short, but long enough for two ranks starting on a busy machine to meet
pytestmark = [pytest.mark.launches, pytest.mark.distributed, pytest.mark.timeout(300)]
# A faulthandler dump: a thread's header, then its frames, most recent first.
_STACK = re.compile(r'^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):\n(  File ".+", line \d+ in .+\n)+', re.M)


def _stall(tmp_path: Path, mode: str) -> tuple[str, str, str]:
    """Rank 0's log, rank 1's log and the agent's stderr of a run whose rank 1 stalls by ``mode``."""
    logs = tmp_path / "logs"
    proc = run_script(
        [SCRIPT, "--mode", mode, "--root", str(tmp_path / "run"), "--timeout", str(GROUP_TIMEOUT_S)],
        env={"LOCKSTEP_TEST_OUT": str(tmp_path / "out")},
        torchrun_args=["--log-dir", str(logs), "--redirects", "3"], timeout=240,
    )
    assert proc.returncode != 0, proc.stderr[-3000:]
    rank0, rank1 = ([*logs.glob(f"**/attempt_0/{r}/stderr.log")] for r in (0, 1))
    assert len(rank0) == len(rank1) == 1, (sorted(logs.rglob("*")), proc.stderr[-3000:])
    return rank0[0].read_text(), rank1[0].read_text(), proc.stderr


def _stacks_after(log: str, header: str) -> str:
    """The stacks that follow the line starting with ``header`` (the header must be there)."""
    assert header in log, log[-4000:]
    dump = log[log.index(header):].split("\n", 1)[1]
    stacks = "".join(m.group(0) for m in _STACK.finditer(dump[: dump.find("\n[lockstep]") % (len(dump) + 1)]))
    assert stacks, dump[:4000]
    return stacks


def test_a_stuck_training_thread_is_named_and_every_rank_prints_its_stack(tmp_path):
    log0, log1, agent = _stall(tmp_path, "hold")
    # rank 0's collective timed out: its own stack, and the stalled rank named with the collective
    _stacks_after(log0, "[lockstep] rank 0: collective #")
    named = re.search(
        rf"Rank 1 on host {re.escape(socket.gethostname())} \(node 0\) stalled at epoch \d+, global step 7, "
        r"batch index \d+: its heartbeat is live \(last [\d.]+ s ago\) but it is after collective #(\d+) \([^)]+\), "
        r"while rank 0 waited [\d.]+ s in collective #(\d+) \(backward, gradients synced\)",
        log0,
    )
    assert named, log0[-4000:]
    assert int(named.group(1)) < int(named.group(2))
    assert "stalled at epoch" in agent, agent[-3000:]  # the agent's report of rank 0's error says it too
    # rank 1 is alive but stuck: its heartbeat thread printed its stack, the sleeping frame in it
    stacks1 = _stacks_after(log1, "[lockstep] rank 1: rank 0's collective #")
    assert re.search(r'File ".+fault_run\.py", line \d+ in on_train_batch_end', stacks1), stacks1


def test_a_frozen_rank_is_named_and_the_survivor_prints_its_stack(tmp_path):
    log0, log1, agent = _stall(tmp_path, "stop")
    stacks0 = _stacks_after(log0, "[lockstep] rank 0: collective #")
    assert "in explain_failure" in stacks0, stacks0  # printed while the survivor explains its failure
    assert re.search(
        rf"Rank 1 on host {re.escape(socket.gethostname())} \(node 0\) stopped answering at epoch \d+, global step 7, "
        r"batch index \d+; last heard [\d.]+ s ago\. Rank 0 stopped because the collective it was waiting in "
        r"\(collective #\d+ \(backward, gradients synced\)\) could not complete without that rank\.",
        log0,
    ), log0[-4000:]
    assert "[lockstep] rank 1: rank 0's" not in log1  # frozen: it printed nothing until it was killed
