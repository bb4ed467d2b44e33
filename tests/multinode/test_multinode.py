"""Training and faults across nodes on a simulated cluster: three network namespaces on a private
subnet (tests/multinode/cluster.py), gloo over the veth links. One cluster for the module, removed
after it.

- three nodes launched by Lockstep's own launcher (`python script.py` with `Trainer(num_nodes=3)`,
  `MASTER_ADDR`/`NODE_RANK` per node), DDP and then FSDP in the same launch: the agents find
  each other, `prepare_data` runs once per node, and every rank ends with the parameters of one
  process with the global batch 3 x 4 (the last window of each epoch shorter);

The faults run one torchrun agent and worker on each of nodes 0 and 1, torch's dynamic (c10d)
rendezvous on node 0:

- a worker killed on node 1: both nodes restart, resume from the same checkpoint and end with
  the uninterrupted run's parameters;
- node 1 lost (every process on it SIGKILLed): node 0's rank names rank 1, its host and node;
- node 0 lost (the store host): node 1's rank names the store as lost.
"""
from __future__ import annotations

import itertools
import subprocess
import sys
import time

import pytest
import torch

from tests.helpers.distributed import REPO_ROOT, read_rank_results, script_env
from tests.helpers.models import one_process_regression
from tests.helpers.references import fault_run_straight
from tests.multinode.cluster import finish

SCRIPT = str(REPO_ROOT / "tests" / "scripts" / "fault_run.py")
FIT_SCRIPT = str(REPO_ROOT / "tests" / "scripts" / "ddp_fit.py")  # 32 samples, micro batch 4, 2 epochs
RUN_TIMEOUT_S = 150
pytestmark = [pytest.mark.multinode, pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(2 * RUN_TIMEOUT_S + 60)]
_PORTS = itertools.count(29400)  # a fresh network: any port is free, one per job


def _start(cluster, tmp_path, name, *args, torchrun_args=()):
    """One torchrun agent per node (one worker each) running fault_run.py; (procs, out dir)."""
    out = tmp_path / name
    out.mkdir()
    port = next(_PORTS)
    env = script_env({"LOCKSTEP_TEST_OUT": str(out)})
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{cluster.addresses[0]}:{port}", "--rdzv-id", f"job{port}",
        *torchrun_args, SCRIPT, "--root", str(tmp_path / "run"), *args,
    ]
    procs = [cluster.popen(node, command, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for node in range(2)]
    return procs, out


def _wait_for(path, timeout=RUN_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted run at world size 2 (on one node: the same numbers as on two)."""
    return fault_run_straight(tmp_path_factory)


def test_a_worker_killed_on_node_1_restarts_both_nodes_from_the_same_checkpoint(cluster, tmp_path, straight):
    procs, out = _start(cluster, tmp_path, "out", "--mode", "kill", "--rank", "1", torchrun_args=["--max-restarts", "1"])
    results = finish(procs, RUN_TIMEOUT_S)
    assert all(code == 0 for code, _ in results), results[0][1][-3000:] + results[1][1][-3000:]
    restarted = read_rank_results(out)
    assert [r["start_step"] for r in restarted] == [6, 6]  # killed at step 7: both resume at step 6
    for r, s in zip(restarted, straight):
        assert r["step"] == s["step"] == 12
        for a, b in zip(r["params"], s["params"]):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_a_lost_node_is_named_with_its_host(cluster, tmp_path):
    procs, _ = _start(cluster, tmp_path, "out", "--mode", "hold", "--rank", "1", "--step", "3")
    _wait_for(tmp_path / "run" / "holding")  # rank 1 (node 1) is at step 3, rank 0 waits for it
    cluster.kill_node(1)
    killed = time.monotonic()
    (code0, err0), _ = finish(procs, RUN_TIMEOUT_S)
    print(f"node 0 ended {time.monotonic() - killed:.1f} s after node 1 was lost")
    assert code0 != 0
    assert "Rank 1 on host lsnode1 (node 1) stopped answering at epoch 0, global step 3" in err0, err0[-4000:]


def test_a_lost_store_host_is_named_as_such(cluster, tmp_path):
    procs, _ = _start(cluster, tmp_path, "out", "--mode", "hold", "--rank", "0", "--step", "3")
    _wait_for(tmp_path / "run" / "holding")  # rank 0 (node 0, with the store) holds, rank 1 waits
    cluster.kill_node(0)
    killed = time.monotonic()
    _, (code1, err1) = finish(procs, RUN_TIMEOUT_S)
    print(f"node 1 ended {time.monotonic() - killed:.1f} s after node 0 (the store host) was lost")
    assert code1 != 0
    assert "The rendezvous store at" in err1 and "stopped answering" in err1 and "store host, node 0" in err1, err1[-4000:]


@pytest.fixture(scope="module")
def one_process_reference():
    """One process with the global batch of three nodes x micro batch 4: what every rank must end with."""
    return one_process_regression(12)


def test_three_nodes_launched_by_lockstep_equal_one_process(cluster, tmp_path, one_process_reference):
    """One launch fits with DDP, then with FSDP (a fresh model each): the second group of the
    same workers rendezvouses through the same store."""
    port = next(_PORTS)
    procs = []
    for node in range(3):
        env = script_env({"LOCKSTEP_TEST_OUT": str(tmp_path), "MASTER_ADDR": cluster.addresses[0],
                          "MASTER_PORT": str(port), "NODE_RANK": str(node)})
        command = [sys.executable, FIT_SCRIPT, "--devices", "1", "--num-nodes", "3", "--strategy", "ddp,fsdp"]
        procs.append(cluster.popen(node, command, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = finish(procs, RUN_TIMEOUT_S)
    assert all(code == 0 for code, _ in results), "\n".join(err[-2000:] for _, err in results)
    # prepare_data once per node (its local rank 0) and fit
    prepared = (tmp_path / "prepare_data.txt").read_text().splitlines()
    assert sorted(prepared) == sorted([f"node={n} local=0 global={n}" for n in range(3)] * 2)
    for strategy in ("ddp", "fsdp"):
        ranks = read_rank_results(tmp_path / strategy)
        assert [(r["global_rank"], r["node_rank"], r["world_size"]) for r in ranks] == [(0, 0, 3), (1, 1, 3), (2, 2, 3)]
        for r in ranks:
            assert r["global_step"] == one_process_reference["global_step"] == 6  # 32 samples: 3 steps an epoch
            for a, b in zip(r["params"], one_process_reference["params"]):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=lambda m: f"{strategy}: {m}")


def test_a_lost_node_is_named_under_lockstep_s_own_launcher(cluster, tmp_path):
    """The same power cut with `python script.py` and `Trainer(num_nodes=2)` on each node."""
    port = next(_PORTS)
    procs = []
    for node in range(2):
        env = script_env({"MASTER_ADDR": cluster.addresses[0], "MASTER_PORT": str(port), "NODE_RANK": str(node)})
        command = [sys.executable, SCRIPT, "--root", str(tmp_path / "run"), "--num-nodes", "2",
                   "--mode", "hold", "--rank", "1", "--step", "3"]
        procs.append(cluster.popen(node, command, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    _wait_for(tmp_path / "run" / "holding")
    cluster.kill_node(1)
    (code0, err0), _ = finish(procs, RUN_TIMEOUT_S)
    assert code0 != 0
    assert "Rank 1 on host lsnode1 (node 1) stopped answering at epoch 0, global step 3" in err0, err0[-4000:]
