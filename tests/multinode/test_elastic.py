"""Elastic training that stays the same run: torchrun ``--nnodes=2:3`` on three network-namespace
nodes (tests/multinode/cluster.py), `Trainer(global_batch_size=12)` with micro batch 2
(tests/scripts/elastic_fit.py: 45 shuffled samples, 2 epochs, a checkpoint every step).

- a node lost (every process on node 2 SIGKILLed after step 3): the two agents left restart their
  workers on world size 2; they resume from the newest checkpoint with A = 3 instead of 2, say so
  in one line, and end with the parameters and ``global_step`` of one process with batch 12
  (DDP and FSDP);
- a node that joins a run on two nodes: the agents stop their workers (a pre-emption save), and
  the three restart with A = 2 and end the same;
- a global batch that no world size of the range divides is refused before any step.

The jobs are started by tests/multinode/elastic_launch.py. Each test prints the seconds from the change to the next
optimizer step (benchmarks/elastic.py measures the same for benchmarks/RESULTS.md).
"""
from __future__ import annotations

import itertools
import subprocess
import sys
import time

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.distributed import read_rank_results, script_env
from tests.helpers.models import Regression, regression_data
from tests.multinode.cluster import finish
from tests.multinode.elastic_launch import (
    RUN_TIMEOUT_S, SCRIPT, first_step_after_restart, restart_line, start_agent, wait_for,
)

pytestmark = [pytest.mark.multinode, pytest.mark.distributed, pytest.mark.slow, pytest.mark.launches,
              pytest.mark.timeout(RUN_TIMEOUT_S + 120)]
_PORTS = itertools.count(29700)  # a fresh network: any port is free, one per job


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process with the global batch 12 (equal to a hand-written loop): what every rank of an
    elastic run must end with."""
    out = tmp_path_factory.mktemp("reference")
    env = script_env({"LOCKSTEP_TEST_OUT": str(out)})
    subprocess.run([sys.executable, SCRIPT, "--root", str(out), "--reference"], env=env, check=True, timeout=120)
    (result,) = read_rank_results(out)
    for a, b in zip(result["params"], _handwritten()):  # the reference is plain PyTorch's numbers
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    return result


def _handwritten():
    """elastic_fit.py's training as a hand-written loop: one process, batch 12, shuffle=True."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Regression("sgd")
        optimizer = model.configure_optimizers()
        for _ in range(2):
            for x, y in DataLoader(regression_data(45), batch_size=12, shuffle=True):
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
    return [p.detach() for p in model.parameters()]


def _assert_equal_to_reference(out, reference, world_size, accumulate):
    ranks = read_rank_results(out)
    assert [(r["world_size"], r["accumulate"]) for r in ranks] == [(world_size, accumulate)] * world_size
    for r in ranks:
        assert r["global_step"] == reference["global_step"] == 8  # 45 samples / 12: 4 steps an epoch
        for a, b in zip(r["params"], reference["params"]):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_lost_node_shrinks_the_run_which_ends_as_one_process_with_the_global_batch(
    cluster, tmp_path, reference, strategy
):
    port, out, root = next(_PORTS), tmp_path / "out", tmp_path / "run"
    out.mkdir()
    procs = [start_agent(cluster, node, port, out, root, "--mode", "leave", "--step", "3", "--strategy", strategy)
             for node in range(3)]
    wait_for(root / "holding", procs)  # node 2's rank is past step 3; the others wait for it
    cluster.kill_node(2)
    killed = time.time()
    results = finish(procs[:2], RUN_TIMEOUT_S)
    assert all(code == 0 for code, _ in results), "\n".join(o[-4000:] for _, o in results)
    _assert_equal_to_reference(out, reference, world_size=2, accumulate=3)
    said = results[0][1]
    assert "[lockstep] Restart: world size 3 -> 2, accumulation 2 -> 3 (global batch 12), resumed from global step" in said, said[-4000:]
    resumed, line = first_step_after_restart(root), restart_line(said)
    seconds = resumed["time"] - killed
    print(f"{strategy}: node 2 lost -> next optimizer step (step {resumed['step']}) {seconds:.1f} s later; {line}")
    assert f"resumed from global step {resumed['from']}; " in line
    assert resumed["from"] == 3 or "step(s) computed again (the ranks before had reached step 3)" in line, line


def test_a_node_that_joins_grows_the_run_which_ends_as_one_process_with_the_global_batch(cluster, tmp_path, reference):
    port, out, root = next(_PORTS), tmp_path / "out", tmp_path / "run"
    out.mkdir()
    procs = [start_agent(cluster, node, port, out, root, "--mode", "join", "--step", "2") for node in range(2)]
    wait_for(root / "ready", procs)  # the run on two nodes is past step 2; rank 0 waits for the change
    procs.append(start_agent(cluster, 2, port, out, root))
    joined = time.time()
    results = finish(procs, RUN_TIMEOUT_S)
    assert all(code == 0 for code, _ in results), "\n".join(o[-4000:] for _, o in results)
    _assert_equal_to_reference(out, reference, world_size=3, accumulate=2)
    said = results[0][1]
    line = restart_line(said) or said[-4000:]
    assert "[lockstep] Restart: world size 2 -> 3, accumulation 3 -> 2 (global batch 12)" in line, line
    assert "0 step(s) computed again" in line, line  # the agents' SIGTERM made the workers save first
    resumed = first_step_after_restart(root)
    seconds = resumed["time"] - joined
    print(f"node 2 joined -> next optimizer step (step {resumed['step']}) {seconds:.1f} s later; {line}")


def test_a_global_batch_no_world_size_divides_is_refused_before_any_step(cluster, tmp_path):
    port, out, root = next(_PORTS), tmp_path / "out", tmp_path / "run"
    out.mkdir()
    # (no restarts: a global batch that does not divide fails the same way every time)
    procs = [start_agent(cluster, node, port, out, root, "--global-batch", "8", torchrun_args=["--max-restarts", "0"])
             for node in range(3)]
    results = finish(procs, RUN_TIMEOUT_S)
    assert all(code != 0 for code, _ in results)
    said = results[0][1]
    assert "world size 3 does not divide" in said and "The world sizes that work: 1, 2, 4" in said, said[-4000:]
    assert not (root / "ckpts").exists() or not any((root / "ckpts").iterdir())
