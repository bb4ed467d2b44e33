"""A partitioned node on the simulated cluster (tests/multinode/cluster.py): its link to the switch
is cut while its rank holds in its training thread, so no connection is reset and rank 0's
collective runs into the process group's short timeout (`fault_run.py --timeout`). Rank 0 prints
its stacks and names rank 1 with its host, node and the collective it waited in. One torchrun
agent and worker on each of nodes 0 and 1, torch's dynamic (c10d) rendezvous on node 0."""
from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from tests.helpers.distributed import REPO_ROOT, script_env

SCRIPT = str(REPO_ROOT / "tests" / "scripts" / "fault_run.py")
GROUP_TIMEOUT_S = 10
RUN_TIMEOUT_S = 150
CLUSTER_NODES = 2
pytestmark = [pytest.mark.multinode, pytest.mark.distributed, pytest.mark.slow, pytest.mark.launches,
              pytest.mark.timeout(RUN_TIMEOUT_S + 60)]


def test_a_partitioned_node_is_named_and_the_survivor_prints_its_stack(cluster, tmp_path):
    env = script_env({"LOCKSTEP_TEST_OUT": str(tmp_path / "out")})
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{cluster.addresses[0]}:29400", "--rdzv-id", "stall",
        SCRIPT, "--root", str(tmp_path / "run"), "--mode", "hold", "--rank", "1", "--step", "3",
        "--timeout", str(GROUP_TIMEOUT_S),
    ]
    procs = [cluster.popen(node, command, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for node in range(2)]
    holding = tmp_path / "run" / "holding"
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not holding.exists():
        assert time.monotonic() < deadline and procs[0].poll() is None, "rank 1 never reached step 3"
        time.sleep(0.2)
    cluster.partition(1)  # rank 1 holds (node 1), rank 0 waits for it in its next collective
    try:
        _, err0 = procs[0].communicate(timeout=max(deadline - time.monotonic(), 1))
    finally:
        cluster.kill_node(1)  # cut off, it would wait for its agent's rendezvous for long
    assert procs[0].returncode != 0
    header = err0.find("[lockstep] rank 0: collective #")
    assert header >= 0, err0[-4000:]
    assert re.search(r'^Current thread 0x[0-9a-f]+ \(most recent call first\):\n  File ".+", line \d+ in ',
                     err0[header:], re.M), err0[header:header + 4000]
    assert re.search(
        r"Rank 1 on host lsnode1 \(node 1\) stopped answering at epoch 0, global step 3, batch index \d+; "
        r"last heard [\d.]+ s ago\. Rank 0 stopped because the collective it was waiting in "
        r"\(collective #\d+ \(backward, gradients synced\)\) could not complete without that rank\.",
        err0,
    ), err0[-4000:]
