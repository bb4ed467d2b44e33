"""The job's store under torchrun: global rank 0's agent's command line decides (trainer/distributed/job_store.py).

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
    ["torchrun", *ELASTIC],
    ["python", "-u", "-m", "torch.distributed.run", *ELASTIC],
    ["python", "-m", "torch.distributed.launch", *ELASTIC],
    ["python", "-X", "faulthandler", "-m", "torch.distributed.run", *ELASTIC],
    ["python", "-W", "ignore", "-m", "torch.distributed.run", *ELASTIC],
    ["python", "-Wignore", "-Xdev", "-mtorch.distributed.run", *ELASTIC],
    ["python", "-mtorch.distributed.run", *ELASTIC],
    ["python", "-bBu", "-m", "torch.distributed.run", *ELASTIC],
    ["python", "--check-hash-based-pycs", "never", "-m", "torch.distributed.run", *ELASTIC],
    ["python", "-X", "faulthandler", "/usr/local/bin/torchrun", *ELASTIC],
])
def test_torchrun_s_arguments_are_found_however_it_was_started(argv):
    assert torchrun_arguments(argv) == ELASTIC
    assert elastic_launch(argv) == ElasticLaunch(("10.0.0.1", 29600), 2, 3)


@pytest.mark.parametrize("args, expected", [
    (["--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", "host", "x.py"], ElasticLaunch(("host", 29400), 2, 2)),
    # no endpoint: torchrun's own default, localhost:29400
    (["--nnodes=1:2", "--rdzv-backend=c10d", "x.py"], ElasticLaunch(("localhost", 29400), 1, 2)),
    # a port the agent picks: the workers cannot know it
    (["--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0", "x.py"], ElasticLaunch(None, 1, 1, "--rdzv-endpoint 127.0.0.1:0")),
    (["--standalone", "--nproc-per-node=2", "x.py"], ElasticLaunch(None, 1, 1, "--standalone")),
    (["--nnodes=2", "--master-addr=a", "--master-port=1", "x.py"], ElasticLaunch(None, 2, 2)),  # static
    (["--no-such-option"], None),  # no script: torchrun refuses it
    (["--nnodes=x:y", "x.py"], None),  # torchrun itself refuses it
])
def test_the_rendezvous_is_read_from_every_torchrun_command_line(args, expected):
    assert elastic_launch(["torchrun", *args]) == expected


@pytest.mark.parametrize("launch, environ, endpoint, warned", [
    (ElasticLaunch(("h", 5), 1, 2), {"TORCHELASTIC_RUN_ID": "j"}, ("h", 5), False),
    # the agent's store is the group's (torch's default): it outlives the workers, no word
    (ElasticLaunch(None, 1, 1, "--rdzv-endpoint h:0"), {"TORCHELASTIC_RUN_ID": "j", "TORCHELASTIC_USE_AGENT_STORE": "True"}, None, False),
    # the workers' own store, hosted by worker rank 0: one line on what restarts cannot do
    (ElasticLaunch(None, 1, 1, "--rdzv-endpoint h:0"), {"TORCHELASTIC_RUN_ID": "j", "TORCHELASTIC_USE_AGENT_STORE": "False"}, None, True),
    (None, {"TORCHELASTIC_RUN_ID": "j", "TORCHELASTIC_USE_AGENT_STORE": "False"}, None, True),  # no /proc, an unknown parent
    (None, {}, None, False),  # no launcher at all
])
def test_one_rule_chooses_the_job_store_and_says_when_restarts_cannot_find_the_run(launch, environ, endpoint, warned):
    chosen, said = job_store.choose_job_store(launch, environ)
    assert chosen == endpoint and (said is not None) == warned
    if said is not None:
        assert said.startswith("[lockstep] ") and "\n" not in said and "another run" in said
        if launch is not None:
            assert "h:0" in said


def test_an_endpoint_that_does_not_answer_falls_back_to_the_group_s_store_in_bounded_time(monkeypatch):
    """A closed port: rank 0 waits at most CONNECT_TIMEOUT_S, says so in one line, and tells the
    other ranks to use the group's store."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    group = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=10))
    monkeypatch.setattr(job_store, "CONNECT_TIMEOUT_S", 1.0)
    monkeypatch.setattr(job_store, "parent_elastic_launch", lambda environ=None: ElasticLaunch(("127.0.0.1", closed), 1, 1))
    monkeypatch.setattr(job_store, "_JOB_STORES", {})
    monkeypatch.setattr(job_store, "_MINE", [])
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "j")
    with pytest.warns(UserWarning, match=f"127.0.0.1:{closed} did not answer within 1 s"):
        store, address = job_store.job_store(group, ("127.0.0.1", group.port), datetime.timedelta(minutes=30), 0, group)
    assert store is group and address == f"127.0.0.1:{group.port}"
    assert job_store.job_store(group, ("127.0.0.1", group.port), datetime.timedelta(seconds=5), 1, group)[0] is group


def test_every_rank_uses_the_store_rank_0_chose(monkeypatch):
    """Rank 1's own agent may have been started otherwise (another spelling of the endpoint, or
    no command line to read): it takes rank 0's choice from the group's store."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=10))
    group = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=10))
    monkeypatch.setattr(job_store, "_JOB_STORES", {})
    monkeypatch.setattr(job_store, "_MINE", [])
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "j")
    monkeypatch.setattr(job_store, "parent_elastic_launch", lambda environ=None: ElasticLaunch(("127.0.0.1", server.port), 1, 2))
    zero, address = job_store.job_store(group, ("127.0.0.1", group.port), datetime.timedelta(seconds=10), 0, group)
    monkeypatch.setattr(job_store, "parent_elastic_launch", lambda environ=None: None)
    one, other = job_store.job_store(group, ("127.0.0.1", group.port), datetime.timedelta(seconds=10), 1, group)
    assert address == other == f"127.0.0.1:{server.port}"
    zero.set("lockstep/run_token", "t")
    assert one.get("lockstep/run_token") == b"t"


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
