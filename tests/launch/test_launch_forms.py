"""Every way users start torchrun finds the job's store (trainer/distributed/job_store.py): two
workers of tests/scripts/elastic_fit.py (45 shuffled samples, global batch 12, a checkpoint every
step), rank 1 failing once at step 3 (``--mode fail``), the agent restarting both.

Each form is launched once (shared by its asserts and across ``pytest -n`` workers); each must
train to the parameters of one process with batch 12 (equal to a hand-written loop: see
tests/multinode/test_elastic.py), end within the launch's bound (none waits on an address that
cannot answer: ``--rdzv-endpoint 127.0.0.1:0`` did, for 30 minutes), and its restart must resume
its own run's checkpoint (step 2's, the last written before the failure). The c10d forms with a port the workers can know run with
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (what an elastic join needs), so that only the agents'
rendezvous store carries the run across the restart: the command line must have been read.

Lockstep's own launcher, ``ddp_spawn`` and a parent that is no launcher are
tests/launch/test_ddp_launch.py, tests/launch/test_fault_tolerance.py and
tests/checkpointing/test_run_identity.py; torchrun on several nodes and elastic ranges of nodes
are tests/multinode.

Also: a one-process start (``--nnodes=1:2 --nproc-per-node=1``) that a second agent joins
continues as the same run and computes no step again.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.helpers.distributed import free_port, read_rank_results, script_env
from tests.helpers.session_cache import once_per_session
from tests.multinode.elastic_launch import SCRIPT, restart_line

pytestmark = [pytest.mark.launches, pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(400)]
LAUNCH_TIMEOUT_S = 240  # far below the 30 minutes a worker waited on port 0
FAIL_AFTER = 3
RESUMED_FROM = FAIL_AFTER - 1  # ModelCheckpoint saves after the other callbacks (as in Lightning): step 3's is not written
_TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
_WORKERS = ["--nproc-per-node", "2", "--max-restarts", "1", "--monitor-interval", "0.5"]
_QUICK_C10D = ["--rdzv-conf", "last_call_timeout=1,join_timeout=120"]
_UNSHARED = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
_CONSOLE_SCRIPT = str(Path(sys.executable).parent / "torchrun")  # not a shell shim: torchrun's own


def _form(name: str, port: int) -> tuple[list[str], dict[str, str]]:
    """The agent's command line (up to the script) and extra environment of launch form ``name``."""
    endpoint = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", *_QUICK_C10D]
    return {
        "standalone": ([*_TORCHRUN, "--standalone", *_WORKERS], {}),
        "c10d-port": ([*_TORCHRUN, "--nnodes", "1:2", *endpoint, *_WORKERS], _UNSHARED),
        "c10d-port-0": ([*_TORCHRUN, "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", *_WORKERS], {}),
        "c10d-no-endpoint": ([*_TORCHRUN, "--rdzv-backend", "c10d", *_WORKERS], _UNSHARED),  # localhost:29400
        "static": ([*_TORCHRUN, "--nnodes", "1", "--master-addr", "127.0.0.1", "--master-port", str(port), *_WORKERS], {}),
        "interpreter-options": ([sys.executable, "-X", "faulthandler", "-Wignore", "-mtorch.distributed.run",
                                 "--nnodes", "1:2", *endpoint, *_WORKERS], _UNSHARED),
        "console-script": ([sys.executable, _CONSOLE_SCRIPT, "--nnodes", "1:2", *endpoint, *_WORKERS], _UNSHARED),
    }[name]


FORMS = ["standalone", "c10d-port", "c10d-port-0", "c10d-no-endpoint", "static", "interpreter-options", "console-script"]


def _launch(base: Path, name: str) -> dict:
    command, env = _form(name, free_port())
    out, root = base / "out", base / "run"
    out.mkdir(parents=True)
    proc = subprocess.run([*command, SCRIPT, "--root", str(root), "--mode", "fail", "--step", str(FAIL_AFTER)],
                          env=script_env({"LOCKSTEP_TEST_OUT": str(out), **env}), capture_output=True, text=True,
                          timeout=LAUNCH_TIMEOUT_S)
    said = proc.stdout + proc.stderr
    resumed = root / "resumed.json"
    return {"returncode": proc.returncode, "output": said[-6000:],
            "ranks": read_rank_results(out) if proc.returncode == 0 else [],
            "resumed": json.loads(resumed.read_text()) if resumed.exists() else None}


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """``launched(name)``: launch form ``name`` once per test session."""
    def get(name: str) -> dict:
        key = f"tests/launch/test_launch_forms.py::launched::{name}"
        return once_per_session(tmp_path_factory, key, lambda: _launch(tmp_path_factory.mktemp(name), name))
    return get


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process with the global batch 12: what both ranks must end with."""
    def compute():
        out = tmp_path_factory.mktemp("reference")
        subprocess.run([sys.executable, SCRIPT, "--root", str(out), "--reference"],
                       env=script_env({"LOCKSTEP_TEST_OUT": str(out)}), check=True, timeout=120)
        return read_rank_results(out)[0]
    return once_per_session(tmp_path_factory, "tests/launch/test_launch_forms.py::reference", compute)


def _equal_to_reference(ranks, reference, world_size, accumulate):
    assert [(r["world_size"], r["accumulate"]) for r in ranks] == [(world_size, accumulate)] * world_size
    for r in ranks:
        assert r["global_step"] == reference["global_step"] == 8
        for a, b in zip(r["params"], reference["params"]):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", FORMS)
def test_each_launch_form_trains_two_ranks_to_one_process_s_parameters(launched, reference, name):
    run = launched(name)
    assert run["returncode"] == 0, run["output"]
    assert "planned failure" in run["output"]  # the first attempt failed; the restart finished
    _equal_to_reference(run["ranks"], reference, world_size=2, accumulate=3)


@pytest.mark.parametrize("name", FORMS)
def test_each_launch_form_s_restart_resumes_its_own_run(launched, name):
    run = launched(name)
    assert run["resumed"] is not None and run["resumed"]["from"] == RESUMED_FROM, run["output"]
    # the job's store was found: no line that restarts cannot find the run, or that it did not answer
    assert "another run" not in run["output"] and "did not answer" not in run["output"], run["output"]


def test_a_one_process_start_that_a_second_agent_joins_computes_no_step_again(tmp_path, reference):
    """``torchrun --nnodes=1:2 --nproc-per-node=1``, a second agent joins after step 2: the
    agents stop the lone worker (a pre-emption save) and the two workers continue its run."""
    port, out, root = free_port(), tmp_path / "out", tmp_path / "run"
    out.mkdir()
    command = [*_TORCHRUN, "--nnodes", "1:2", "--nproc-per-node", "1", "--max-restarts", "3", "--monitor-interval", "0.5",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "join",
               "--rdzv-conf", "last_call_timeout=1,join_timeout=120,keep_alive_interval=2,keep_alive_max_attempt=3"]
    env = script_env({"LOCKSTEP_TEST_OUT": str(out), **_UNSHARED})

    def agent(*args):
        return subprocess.Popen([*command, SCRIPT, "--root", str(root), *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)

    procs = [agent("--mode", "join", "--step", "2")]
    try:
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        while not (root / "ready").exists():  # the lone worker is past step 2 and waits
            assert procs[0].poll() is None and time.monotonic() < deadline, procs[0].communicate()[0][-4000:]
            time.sleep(0.2)
        procs.append(agent())
        outputs = [p.communicate(timeout=LAUNCH_TIMEOUT_S)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-4000:] for o in outputs)
    _equal_to_reference(read_rank_results(out), reference, world_size=2, accumulate=3)
    said = "\n".join(outputs)
    line = restart_line(said) or said[-4000:]
    assert "[lockstep] Restart: world size 1 -> 2, accumulation 6 -> 3 (global batch 12)" in line, line
    assert "0 step(s) computed again" in line, line
    assert sorted(p.name for p in (root / "ckpts").iterdir() if p.name.startswith("last")) == ["last.ckpt"]
