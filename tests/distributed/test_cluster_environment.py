"""Parsing of launcher environments; pure functions of a dict, so no processes are needed."""
from __future__ import annotations

import pytest

from trainer import rank_zero_info
from trainer.distributed.cluster_environment import (
    ClusterEnvironment,
    detect_cluster_environment,
    detect_global_rank,
    expand_hostlist,
)
from trainer.distributed.rank_zero import current_global_rank
from callbacks import Logger

pytestmark = pytest.mark.timeout(10)

TORCHRUN = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "GROUP_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_RESTART_COUNT": "2",
}

# What `srun` sets for task 4 of `sbatch -N3 --ntasks=5` laid out as 2,2,1.
SRUN = {
    "SLURM_PROCID": "4",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "2",
    "SLURM_NTASKS": "5",
    "SLURM_STEP_ID": "0",
    "SLURM_TASKS_PER_NODE": "2(x2),1",
    "SLURM_JOB_NODELIST": "node[07-08],gpu3",
    "SLURM_JOB_ID": "123456",
    "SLURM_JOB_NAME": "train.sh",
}


def test_single_process_defaults():
    env = detect_cluster_environment({})
    assert env == ClusterEnvironment(0, 0, 0, 1, 1, 1, "127.0.0.1", 0, "single")
    assert env.is_global_zero and not env.is_distributed


def test_torchrun():
    env = detect_cluster_environment(TORCHRUN)
    assert env == ClusterEnvironment(
        global_rank=3, local_rank=1, node_rank=1, world_size=4, local_world_size=2, num_nodes=2,
        master_addr="10.0.0.1", master_port=29500, source="torchrun", restart_count=2,
    )
    assert env.is_distributed and not env.is_global_zero


def test_torchrun_without_group_variables_derives_node_layout():
    environ = {k: v for k, v in TORCHRUN.items() if not k.startswith(("GROUP_", "TORCHELASTIC"))}
    env = detect_cluster_environment(environ)
    assert (env.node_rank, env.num_nodes, env.restart_count) == (1, 2, 0)


def test_torchrun_wins_over_slurm():
    # `srun torchrun ...`: the per-process torchrun variables describe this process.
    assert detect_cluster_environment({**SRUN, **TORCHRUN}).source == "torchrun"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"RANK": "4"}, r"RANK=4 is out of range: it must be below WORLD_SIZE=4"),
        ({"LOCAL_RANK": "2"}, r"LOCAL_RANK=2 is out of range: it must be below LOCAL_WORLD_SIZE=2"),
        ({"GROUP_RANK": "2"}, r"GROUP_RANK=2 is out of range: it must be below GROUP_WORLD_SIZE=2"),
        ({"WORLD_SIZE": "two"}, r"WORLD_SIZE='two' is not an integer"),
        ({"WORLD_SIZE": "0"}, r"WORLD_SIZE=0 must be >= 1"),
        ({"LOCAL_WORLD_SIZE": "8"}, r"LOCAL_WORLD_SIZE=8 is larger than WORLD_SIZE=4"),
        ({"MASTER_PORT": "70000"}, r"MASTER_PORT=70000 is not a TCP port"),
        ({"MASTER_ADDR": None}, r"MASTER_ADDR is not set\. The environment looks like a torchrun"),
        ({"LOCAL_RANK": None}, r"LOCAL_RANK is not set"),
        ({"RANK": None}, r"RANK is not set"),
    ],
)
def test_torchrun_inconsistent(change, message):
    environ = {**TORCHRUN, **change}
    environ = {k: v for k, v in environ.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        detect_cluster_environment(environ)


def test_srun():
    env = detect_cluster_environment(SRUN)
    assert env == ClusterEnvironment(
        global_rank=4, local_rank=0, node_rank=2, world_size=5, local_world_size=1, num_nodes=3,
        master_addr="node07", master_port=15000 + 123456 % 20000, source="slurm",
    )


def test_srun_respects_master_variables_and_step_layout():
    environ = {
        **SRUN,
        "MASTER_ADDR": "head",
        "MASTER_PORT": "1234",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "0",
        # The step may use fewer nodes than the job: its own layout and node list win.
        "SLURM_NTASKS": "4",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_STEP_NODELIST": "node[08,07]",
        "SLURM_RESTART_COUNT": "1",
    }
    env = detect_cluster_environment(environ)
    assert (env.master_addr, env.master_port, env.num_nodes, env.local_world_size) == ("head", 1234, 2, 2)
    assert env.restart_count == 1


def test_srun_single_number_ntasks_per_node_applies_to_every_node():
    environ = {**SRUN, "SLURM_NTASKS": "6", "SLURM_NTASKS_PER_NODE": "2"}
    del environ["SLURM_TASKS_PER_NODE"]
    env = detect_cluster_environment(environ)
    assert (env.num_nodes, env.local_world_size) == (3, 2)


@pytest.mark.parametrize(
    "change",
    [
        {"SLURM_JOB_NAME": "bash", "SLURM_STEP_ID": None},  # salloc shell, python typed by hand
        {"SLURM_JOB_NAME": "interactive", "SLURM_STEP_ID": "4294967290"},  # interactive step
        {"SLURM_STEP_ID": "4294967294"},  # sbatch script running python without srun
        {"SLURM_STEP_ID": "batch"},
        {"SLURM_PROCID": None},  # salloc without any step: no task variables
    ],
)
def test_slurm_allocation_without_srun_is_a_single_process(change):
    environ = {k: v for k, v in {**SRUN, **change}.items() if v is not None}
    assert detect_cluster_environment(environ).source == "single"


def test_srun_inside_salloc_is_slurm():
    assert detect_cluster_environment({**SRUN, "SLURM_JOB_NAME": "bash"}).source == "slurm"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"SLURM_PROCID": "5"}, r"SLURM_PROCID=5 is out of range: it must be below SLURM_NTASKS=5"),
        ({"SLURM_NTASKS": "6"}, r"SLURM_TASKS_PER_NODE='2\(x2\),1' adds up to 5 tasks but SLURM_NTASKS=6"),
        ({"SLURM_NODEID": "3"}, r"SLURM_NODEID=3 is out of range"),
        ({"SLURM_LOCALID": "1"}, r"SLURM_LOCALID=1 is out of range: it must be below the tasks on this node"),
        ({"SLURM_TASKS_PER_NODE": "2,x"}, r"SLURM_TASKS_PER_NODE='2,x' is not a SLURM tasks-per-node list"),
        ({"SLURM_TASKS_PER_NODE": None}, r"SLURM_TASKS_PER_NODE is not set"),
        (
            {"SLURM_JOB_NODELIST": "node[1-2]"},
            r"describes 3 node\(s\) but SLURM_JOB_NODELIST='node\[1-2\]' lists 2",
        ),
        ({"SLURM_JOB_NODELIST": None}, r"SLURM_JOB_NODELIST is not set .* set MASTER_ADDR"),
        ({"SLURM_JOB_ID": None}, r"SLURM_JOB_ID is not set, so no MASTER_PORT can be derived"),
        ({"SLURM_LOCALID": None}, r"SLURM_LOCALID is not set"),
    ],
)
def test_srun_inconsistent(change, message):
    environ = {k: v for k, v in {**SRUN, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        detect_cluster_environment(environ)


@pytest.mark.parametrize(
    "hostlist, hosts",
    [
        ("node1", ["node1"]),
        ("node[01-03,7]", ["node01", "node02", "node03", "node7"]),
        ("gpu-a[1-2],gpu-b3", ["gpu-a1", "gpu-a2", "gpu-b3"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a[1],b[2-3]-ib", ["a1", "b2-ib", "b3-ib"]),
        (" h1,h2 ", ["h1", "h2"]),
    ],
)
def test_expand_hostlist(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize(
    "hostlist, message",
    [
        ("", r"the host list is empty"),
        ("node[1-3", r"unbalanced brackets in 'node\[1-3'"),
        ("node1-3]", r"unbalanced brackets"),
        ("node[[1]]", r"unbalanced brackets"),
        ("node[a-b]", r"bad range 'a-b' in 'node\[a-b\]'"),
        ("node[3-1]", r"range '3-1' in 'node\[3-1\]' runs backwards"),
        ("node1,,node2", r"empty host name"),
    ],
)
def test_expand_hostlist_rejects_bad_input(hostlist, message):
    with pytest.raises(ValueError, match=message):
        expand_hostlist(hostlist)


_LAUNCH_VARIABLES = {*TORCHRUN, *SRUN, "SLURM_STEP_ID", "SLURM_STEPID", "NODE_RANK", "SLURM_RESTART_COUNT"}


@pytest.mark.parametrize("launch, rank", [("torchrun", 3), ("srun", 4), ("none", 0)])
def test_rank_zero_helpers_read_the_rank_as_the_cluster_environment_does(
    launch, rank, monkeypatch, capsys, caplog
):
    """rank_zero_info/rank_zero_only read the rank as the Trainer's cluster environment does."""
    for name in _LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in {"torchrun": TORCHRUN, "srun": SRUN, "none": {}}[launch].items():
        monkeypatch.setenv(name, value)
    assert current_global_rank() == detect_cluster_environment().global_rank == rank
    assert detect_global_rank() == rank
    # a logger before the Trainer's setup: the same rank (it writes files on rank 0 only)
    assert Logger().is_global_zero == (rank == 0)
    caplog.set_level("INFO")
    rank_zero_info("epoch 0 done")
    # one behaviour: printed to stdout on rank 0 only, nothing sent to `logging`
    assert capsys.readouterr().out == ("epoch 0 done\n" if rank == 0 else "")
    assert caplog.records == []


def test_the_rank_alone_follows_the_same_rules():
    """Rank-zero helpers may run where only the rank is set (a script, a test): same precedence."""
    assert detect_global_rank({"RANK": "2"}) == 2
    assert detect_global_rank({**SRUN, "RANK": "1"}) == 1  # torchrun wins, as in detection
    assert detect_global_rank({**SRUN, "SLURM_STEP_ID": "batch"}) == 0  # not an srun task
    assert detect_global_rank({"SLURM_PROCID": "3"}) == 0  # idem: no srun step
    with pytest.raises(ValueError, match="RANK='x' is not an integer"):
        detect_global_rank({"RANK": "x"})


@pytest.mark.timeout(120)  # importing Ray takes a few seconds
def test_a_process_that_imported_ray_but_runs_no_training_function_is_not_a_ray_worker(monkeypatch):
    """Ray's driver (and any process that imported Ray) is read as what launched it, not as Ray's."""
    pytest.importorskip("ray.train")
    from trainer.contracts.ray_worker import ray_placement, ray_resume_path, ray_train_context
    from trainer.contracts.run_identity import run_id

    for name, value in TORCHRUN.items():
        monkeypatch.setenv(name, value)
    assert ray_train_context() is None and ray_placement() is None and ray_resume_path() is None
    assert detect_cluster_environment().source == "torchrun"
    assert not run_id().startswith("ray-")


def test_a_process_that_did_not_import_ray_is_not_made_to(monkeypatch):
    import sys

    from trainer.contracts.ray_worker import ray_train_context

    for name in [n for n in sys.modules if n == "ray" or n.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    assert ray_train_context() is None
    assert "ray.train" not in sys.modules
    assert detect_cluster_environment().source in ("single", "torchrun", "slurm")
