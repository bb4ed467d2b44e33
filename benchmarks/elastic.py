"""What losing a node costs an elastic run: ``python -m benchmarks.elastic`` (needs root: it builds
the three-node network-namespace cluster of tests/multinode/cluster.py).

torchrun ``--nnodes=2:3`` on three nodes runs tests/scripts/elastic_fit.py (`Trainer(global_batch_size=12)`,
8 optimizer steps) with a checkpoint every K steps; the rank on node 2 stops after step 7 and
its node's power is cut (every process SIGKILLed). Measured per repeat: the seconds from the
cut to the restarted run's first optimizer step (on world size 2), and the steps computed
again (Lockstep's restart line). torchrun's settings are tests/multinode/elastic_launch.py's.
"""
from __future__ import annotations

import argparse
import itertools
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.multinode.cluster import Cluster, finish, unavailable
from tests.multinode.elastic_launch import RUN_TIMEOUT_S, first_step_after_restart, restart_line, start_agent, wait_for

KILL_AFTER_STEP = 7
_PORTS = itertools.count(29900)


def lose_a_node(cluster: Cluster, every: int, workdir: Path) -> tuple[float, int]:
    """One run: (seconds from the node's loss to the next optimizer step, steps computed again)."""
    port = next(_PORTS)
    out, root = workdir / f"out{port}", workdir / f"run{port}"
    out.mkdir()
    procs = [start_agent(cluster, node, port, out, root, "--mode", "leave", "--step", str(KILL_AFTER_STEP),
                         "--every", str(every)) for node in range(3)]
    wait_for(root / "holding", procs)
    cluster.kill_node(2)
    killed = time.time()
    results = finish(procs[:2], RUN_TIMEOUT_S)
    if any(code != 0 for code, _ in results):
        raise RuntimeError("the elastic run failed:\n" + "\n".join(o[-3000:] for _, o in results))
    again = re.search(r"(\d+) step\(s\) computed again", restart_line(results[0][1]))
    if again is None:
        raise RuntimeError(f"no restart line in the output:\n{results[0][1][-3000:]}")
    return first_step_after_restart(root)["time"] - killed, int(again.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--every", type=int, nargs="+", default=[1, 4], help="checkpoint cadences (steps)")
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason is not None:
        print(f"benchmarks.elastic: {reason}", file=sys.stderr)
        return 2
    cluster = Cluster(3)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            print("| checkpoint every | node lost -> next step (s), median [min, max] | steps computed again |")
            print("| --- | --- | --- |")
            for every in args.every:
                runs = [lose_a_node(cluster, every, Path(tmp)) for _ in range(args.repeats)]
                seconds = [s for s, _ in runs]
                print(f"| {every} step(s) | {statistics.median(seconds):.1f} [{min(seconds):.1f}, {max(seconds):.1f}] "
                      f"| {', '.join(str(n) for _, n in runs)} |", flush=True)
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
