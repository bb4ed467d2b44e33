"""The job's store under torchrun: read from the agent's command line (trainer/distributed/job_store.py).

The elastic runs that need it are tests/multinode/test_elastic.py; here, the command lines torchrun
is started with, the warning for an elastic range, and the notes a restart reads.
"""
from __future__ import annotations

import datetime

import pytest
import torch.distributed as dist

from trainer.distributed import job_store
from trainer.distributed.job_store import ElasticLaunch, elastic_launch, shared_store_warning, torchrun_arguments

pytestmark = pytest.mark.timeout(60)
ELASTIC = ["--nnodes=2:3", "--nproc-per-node=1", "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.1:29600", "train.py"]


@pytest.mark.parametrize("argv", [
    ["/usr/bin/python3", "/usr/local/bin/torchrun", *ELASTIC],
    ["python", "-u", "-m", "torch.distributed.run", *ELASTIC],
    ["python", "-m", "torch.distributed.launch", *ELASTIC],
])
def test_torchrun_s_arguments_are_found_however_it_was_started(argv):
    assert torchrun_arguments(argv) == ELASTIC
    assert elastic_launch(argv) == ElasticLaunch(("10.0.0.1", 29600), 2, 3)


@pytest.mark.parametrize("args, expected", [
    (["--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", "host", "x.py"], ElasticLaunch(("host", 29400), 2, 2)),
    (["--standalone", "--nproc-per-node=2", "x.py"], None),  # its endpoint is chosen at run time
    (["--nnodes=2", "--master-addr=a", "--master-port=1", "x.py"], None),  # static: the group's store is the job's
    (["--no-such-option"], None),
])
def test_only_a_c10d_rendezvous_with_an_endpoint_names_a_job_store(args, expected):
    assert elastic_launch(["torchrun", *args]) == expected


def test_a_process_that_is_not_torchrun_has_no_elastic_launch():
    assert torchrun_arguments(["python", "train.py", "--nnodes=2:3"]) is None
    assert job_store.parent_elastic_launch({}) is None  # no TORCHELASTIC_RUN_ID: not a torchrun worker


def test_an_elastic_range_without_the_unshared_store_is_warned_about():
    elastic, fixed = ElasticLaunch(("h", 1), 2, 3), ElasticLaunch(("h", 1), 2, 2)
    said = shared_store_warning(elastic, {})
    assert said is not None and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in said and "--nnodes=2:3" in said
    assert shared_store_warning(elastic, {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}) is None
    assert shared_store_warning(fixed, {}) is None and shared_store_warning(None, {}) is None


def test_a_restart_reads_the_steps_its_predecessors_reached_once(monkeypatch):
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=10))
    monkeypatch.setattr(job_store, "_MINE", [])
    assert job_store.take_reached(2) is None  # no store joined yet
    monkeypatch.setattr(job_store, "_MINE", [store])
    job_store.note_reached(0, 7)
    job_store.note_reached(2, 9)  # a rank the restart does not count: there were 2 before
    job_store.note_reached(1, 8)
    assert job_store.take_reached(2) == 8
    assert job_store.take_reached(2) is None  # read once: the next restart reads its own predecessors


def test_a_script_s_own_arguments_do_not_make_it_torchrun():
    assert torchrun_arguments(["python", "train.py", "--launcher", "torchrun"]) is None
    assert torchrun_arguments(["python", "-m", "mypkg.run", "-m", "torch.distributed.run"]) is None
    assert torchrun_arguments(["/opt/bin/torchrun", "--nnodes=2", "x.py"]) == ["--nnodes=2", "x.py"]


def test_two_jobs_that_meet_at_one_endpoint_keep_their_own_keys(monkeypatch):
    """Two torchrun jobs with other --rdzv-ids on one endpoint share its store: neither may read
    the other's run token (it would take the other's identity) or restart count."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=10))
    launch = ElasticLaunch(("127.0.0.1", server.port), 2, 2)
    monkeypatch.setattr(job_store, "parent_elastic_launch", lambda environ=None: launch)
    monkeypatch.setattr(job_store, "_JOB_STORES", {})
    monkeypatch.setattr(job_store, "_MINE", [])
    tokens = []
    for job in ("job-a", "job-b", "job-a"):
        monkeypatch.setenv("TORCHELASTIC_RUN_ID", job)
        store, address = job_store.job_store(None, ("unused", 1), datetime.timedelta(seconds=10))
        assert address == f"127.0.0.1:{server.port}"
        tokens.append(store.compare_set("lockstep/run_token", "", f"token of {job}").decode())
    assert tokens == ["token of job-a", "token of job-b", "token of job-a"]
