"""The rendezvous store of a process and the end of a process that joined a gloo group."""
from __future__ import annotations

import atexit
import datetime
import os
import time
import uuid
from typing import Any

import torch.distributed as dist

from trainer.contracts.run_identity import adopt_job
from trainer.distributed.cluster_environment import ClusterEnvironment
from trainer.distributed.job_store import job_store, lone_job_store

# The rendezvous store of this process, kept for its lifetime. A script may fit several times
# under one launcher (same MASTER_PORT): torch names every new default group alike, so a rank
# that re-joins early would read the previous group's addresses from the store (or reach a store
# its owner is about to close) and fail or hang. Reusing one store with a fresh key prefix per
# group avoids both.
_STORES: dict[tuple[str, int, int, int], Any] = {}
# How many earlier processes of this rank had joined this job when this process first joined
# it (None: no group yet). More than 0: this process is a restart.
_JOINED_BEFORE: list[int] = []
_JOINS_KEY = "lockstep/joins/rank{}"
_PROCESSES_KEY = "lockstep/processes/rank{}"
_RUN_TOKEN_KEY = "lockstep/run_token"


def fresh_store(cluster: ClusterEnvironment, timeout: datetime.timedelta) -> tuple[Any, str]:
    """This process's rendezvous store (made once; ``MASTER_ADDR``/``MASTER_PORT`` must be in
    the environment, as ``env://`` reads them), under a key prefix no earlier group used; and
    that prefix."""
    rank, world_size = cluster.global_rank, cluster.world_size
    key = (cluster.master_addr, cluster.master_port, rank, world_size)
    store = _STORES.get(key)
    first = store is None
    if store is None:
        store, _, _ = next(dist.rendezvous("env://", rank=rank, world_size=world_size, timeout=timeout))
        _STORES[key] = store
    prefix = f"lockstep/join{group_number(store, rank)}"
    group = dist.PrefixStore(prefix, store)
    if first:
        job, address = job_store(store, (cluster.master_addr, cluster.master_port), timeout, rank, group)
        _join_job(job, address, rank)
    return group, prefix


def join_job_alone(timeout: datetime.timedelta) -> None:
    """A one-process run under an elastic agent (``torchrun --nnodes=1:2 --nproc-per-node=1``)
    joins the job's store as every rank of a group does, so that the group a later node makes
    with it is the same run and resumes where it stopped. Once per process."""
    if _JOINED_BEFORE:
        return
    found = lone_job_store(timeout)
    if found is not None:
        _join_job(*found, rank=0)


def _join_job(job: Any, address: str, rank: int) -> None:
    """Once per process: this run's token and whether an earlier process of this rank ran in the job."""
    # set by whichever process of the run asks first; a restart's processes read the same one
    adopt_job(address, job.compare_set(_RUN_TOKEN_KEY, "", uuid.uuid4().hex).decode())
    if not _JOINED_BEFORE:
        _JOINED_BEFORE.append(int(job.add(_PROCESSES_KEY.format(rank), 1)) - 1)


def group_number(store: Any, rank: int) -> int:
    """The number of this group in the job, the same on every rank and every node (1, 2, ...).

    Each rank counts the groups it joins in the store, which outlives a restart of the workers
    (torch's elastic agent keeps serving it): the n-th group of every rank is the same group, and
    the workers of a restart, on every node, count on from where the workers they replace
    stopped. So no group reads the keys of an earlier one (a dead worker's gloo address), and
    every rank agrees on it, unlike ``TORCHELASTIC_RESTART_COUNT``, which torch raises only on
    the node whose worker failed. (A rank that died before it joined its group would count one
    less: the group then times out instead of mixing attempts.)
    """
    return int(store.add(_JOINS_KEY.format(rank), 1))


def is_restart() -> bool:
    """Whether an earlier process of this rank joined this job (this one is its restart); counted
    in the job's store, which outlives the workers' (`trainer.distributed.job_store`)."""
    return bool(_JOINED_BEFORE) and _JOINED_BEFORE[0] > 0


def _busy_gloo_workers() -> int | None:
    """How many of torch's gloo worker threads are running or runnable (None: cannot tell)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    busy = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread just ended
            continue
        name, state = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2]
        if name.startswith("pt_gloo") and state not in "SIDTtZX":  # not asleep: R (running/runnable)
            busy += 1
    return busy


def _let_gloo_workers_finish(max_wait_s: float = 2.0) -> None:
    """At exit, before the interpreter finalizes: let torch's gloo worker threads go idle.

    A gloo process group's worker threads outlive ``destroy_process_group`` as long as anything
    still references the group, and a DistributedDataParallel model keeps it referenced for good.
    After a collective completes, its worker thread still drops its reference to the work, which
    can free a Python tensor and so needs the GIL. If the main thread reaches interpreter
    finalization first (a script that ends right after ``fit``: the Trainer's last barrier is
    the last thing it does), the worker thread is stopped inside that destructor and the process
    aborts ("terminate called without an active exception", exit code -6) after a run that
    succeeded, which the launcher then reports as a failed worker. Sleeping here releases the GIL
    until no gloo worker is running or runnable (three polls in a row), at most ``max_wait_s``.
    """
    if not _GROUPS_JOINED:
        return
    deadline = time.monotonic() + max_wait_s
    quiet = 0
    while quiet < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
        busy = _busy_gloo_workers()
        if busy is None:  # no /proc: a fixed grace period
            time.sleep(0.05)
            return
        quiet = quiet + 1 if busy == 0 else 0


# Whether this process joined a group (so the exit handler has something to wait for).
_GROUPS_JOINED: list[bool] = []
atexit.register(_let_gloo_workers_finish)


def mark_group_joined() -> None:
    """Record that this process joined a group: wait for its gloo threads at exit."""
    _GROUPS_JOINED[:] = [True]
