"""A second torchrun job launched with the same command line (the same --rdzv-id and endpoint) into
the same root is another run: it must not resume the first job's checkpoint, whose job store
(the first agents' rendezvous store) is gone. tests/scripts/elastic_fit.py on 2 local workers,
torch's c10d rendezvous on 127.0.0.1."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers.distributed import free_port, read_rank_results, script_env
from tests.multinode.elastic_launch import SCRIPT

pytestmark = [pytest.mark.launches, pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(300)]


def _torchrun(port, root, out, *args):
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "same-job",
               SCRIPT, "--root", str(root), *args]
    return subprocess.Popen(command, env=script_env({"LOCKSTEP_TEST_OUT": str(out)}), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_the_same_command_again_is_another_run_and_does_not_resume_the_first(tmp_path):
    port, root = free_port(), tmp_path / "run"
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = _torchrun(port, root, tmp_path / "first", "--mode", "join", "--step", "2")
    deadline = time.monotonic() + 150
    while not (root / "ready").exists():  # past step 2, a last.ckpt of the first job on disk
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0][-4000:]
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # the whole first job (agent and workers) gone at once
    first.wait(timeout=30)
    assert (root / "ckpts" / "last.ckpt").exists()
    second = _torchrun(port, root, tmp_path / "second")
    said, _ = second.communicate(timeout=200)
    assert second.returncode == 0, said[-4000:]
    assert "Resumed from" not in said and "[lockstep] Restart:" not in said, said[-4000:]
    assert not (root / "resumed.json").exists()
    assert [r["global_step"] for r in read_rank_results(tmp_path / "second")] == [8, 8]  # all 8 steps trained
