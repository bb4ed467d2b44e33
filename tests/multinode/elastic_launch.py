"""Elastic torchrun jobs on the namespace cluster (tests/multinode/cluster.py) running
tests/scripts/elastic_fit.py: shared by tests/multinode/test_elastic.py and benchmarks/elastic.py.

torchrun is told to notice a membership change quickly (`ELASTIC_ARGS`; with its defaults a dead
node is dropped after about 45 s), and ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` lets a node join
(docs/fault-tolerance.md, Elastic).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from tests.helpers.distributed import REPO_ROOT, script_env
from tests.multinode.cluster import Cluster, finish

SCRIPT = str(REPO_ROOT / "tests" / "scripts" / "elastic_fit.py")
RUN_TIMEOUT_S = 240
ELASTIC_ARGS = (
    "--nnodes", "2:3", "--nproc_per_node", "1", "--rdzv-backend", "c10d", "--max-restarts", "3",
    "--monitor-interval", "0.5",
    "--rdzv-conf", "join_timeout=120,last_call_timeout=10,keep_alive_interval=2,keep_alive_max_attempt=3",
)


def start_agent(cluster: Cluster, node: int, port: int, out: Path, root: Path, *args: str,
                torchrun_args: Sequence[str] = ()) -> subprocess.Popen:
    """torchrun on ``node`` (its workers' output with its own on stdout), rendezvous on node 0."""
    env = script_env({"LOCKSTEP_TEST_OUT": str(out), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
    command = [sys.executable, "-m", "torch.distributed.run", *ELASTIC_ARGS,
               "--rdzv-endpoint", f"{cluster.addresses[0]}:{port}", "--rdzv-id", f"elastic{port}",
               *torchrun_args, SCRIPT, "--root", str(root), *args]
    return cluster.popen(node, command, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(path: Path, procs: Sequence[subprocess.Popen], timeout: float = RUN_TIMEOUT_S) -> None:
    """Until ``path`` exists; fails with the agents' output when one ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        ended = [p for p in procs if p.poll() is not None]
        if ended or time.monotonic() > deadline:
            outputs = "\n".join(out[-3000:] for _, out in finish(procs, timeout=5))
            raise AssertionError(f"{path} did not appear ({len(ended)} agent(s) ended early):\n{outputs}")
        time.sleep(0.2)


def restart_line(output: str) -> str:
    """Lockstep's one line about the restart in an agent's output ("" if none)."""
    return next((line for line in output.splitlines() if "[lockstep] Restart:" in line), "")


def first_step_after_restart(root: Path) -> dict[str, Any]:
    """What the restarted run's rank 0 wrote at its first optimizer step: its ``time``, ``step``
    and the step it resumed ``from``."""
    return json.loads((root / "resumed.json").read_text())
