"""The shared distributed test helpers do what every distributed test relies on. run_script's
two-node mode (two torchrun agents) is checked where it is used, by
tests/launch/test_ddp_launch.py::test_two_nodes_prepare_data_once_per_node_rank_zero_once."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.helpers.distributed import descendants, free_port, read_rank_results, run_ranks, run_script

SCRIPT = str(Path(__file__).parents[1] / "scripts" / "report_cluster_env.py")

pytestmark = pytest.mark.distributed


def _report(rank, world_size, offset):
    value = torch.tensor([float(rank + offset)])
    dist.all_reduce(value)
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMP_NUM_THREADS")
    env = {k: os.environ[k] for k in names}
    return rank, world_size, dist.get_rank(), value.item(), env, torch.get_num_threads()


def _join_group_myself(rank, world_size):
    was_initialized = dist.is_initialized()
    dist.init_process_group("gloo")  # from the env:// variables run_ranks set
    value = torch.ones(1)
    dist.all_reduce(value)
    dist.destroy_process_group()
    return was_initialized, value.item()


def _rank1_raises(rank, world_size):
    if rank == 1:
        raise ValueError("boom from rank 1")
    dist.barrier()  # rank 0 blocks here like a real peer of a crashed rank


def _hang(rank, world_size):
    time.sleep(600)


def _running_children() -> set[int]:
    """This process's live descendants (a zombie has finished), but multiprocessing's resource
    tracker and run_ranks' fork server (not the ranks forked from it), which the first launch
    starts and which stay for the life of the test process."""
    alive = set()
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        server = b"resource_tracker" in command or (b"forkserver" in command and int(ppid) == os.getpid())
        if state != "Z" and not server:
            alive.add(pid)
    return alive


@pytest.mark.timeout(60)
def test_results_come_back_in_rank_order():
    results = run_ranks(_report, args=(10,))
    assert [r[:4] for r in results] == [(0, 2, 0, 21.0), (1, 2, 1, 21.0)]
    assert results[1][4] == {
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "OMP_NUM_THREADS": "1",
    }
    assert results[0][5] == 1


@pytest.mark.timeout(60)
def test_without_init_group_only_the_environment_is_set():
    assert run_ranks(_join_group_myself, init_group=False) == [(False, 2.0), (False, 2.0)]


@pytest.mark.timeout(60)
def test_a_raising_rank_fails_with_its_number_and_traceback():
    with pytest.raises(AssertionError, match=r"rank 1 failed") as info:
        run_ranks(_rank1_raises)
    assert "ValueError: boom from rank 1" in str(info.value)
    assert "_rank1_raises" in str(info.value)  # the traceback, not just the message


@pytest.mark.timeout(120)
def test_a_hang_is_killed_at_the_timeout():
    # Checked: it waited for the timeout, said why, and left no process behind. How soon after
    # the timeout it returns depends on the machine's load (the test's own timeout bounds it).
    before = _running_children()
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"rank\(s\) \[0, 1\] did not finish within timeout=5s"):
        run_ranks(_hang, timeout=5)
    assert time.monotonic() - start >= 5
    assert _running_children() - before == set()


def test_bad_arguments():
    with pytest.raises(TypeError, match="cannot be pickled .* top-level function"):
        run_ranks(lambda rank, world_size: None)
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        run_ranks(_hang, world_size=0)
    with pytest.raises(ValueError, match="launcher must be 'torchrun' or 'python'"):
        run_script([SCRIPT], launcher="mpirun")
    assert 0 < free_port() < 65536


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_run_script_torchrun_one_node(tmp_path):
    proc = run_script([SCRIPT], nproc=2, env={"LOCKSTEP_TEST_OUT": str(tmp_path)}, timeout=100)
    assert proc.returncode == 0, proc.stderr
    results = read_rank_results(tmp_path)
    assert [r["env"]["global_rank"] for r in results] == [0, 1]
    assert [r["env"]["local_rank"] for r in results] == [0, 1]
    assert {r["env"]["source"] for r in results} == {"torchrun"}
    assert [r["sum"] for r in results] == [1.0, 1.0]


@pytest.mark.timeout(60)
def test_run_script_python(tmp_path):
    proc = run_script([SCRIPT], launcher="python", env={"LOCKSTEP_TEST_OUT": str(tmp_path)}, timeout=50)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "rank 0 done"
    [result] = read_rank_results(tmp_path)
    assert result["env"]["source"] == "single" and result["sum"] is None


@pytest.mark.timeout(120)
def test_run_script_kills_a_hanging_script():
    before = _running_children()
    with pytest.raises(subprocess.TimeoutExpired):
        run_script(["-c", "import time; time.sleep(300)"], launcher="python", timeout=3)
    assert _running_children() - before == set()


def test_read_rank_results_reports_missing_ranks(tmp_path):
    torch.save(1, tmp_path / "rank1.pt")
    with pytest.raises(AssertionError, match=r"found ranks \[1\]; a rank probably failed"):
        read_rank_results(tmp_path)
