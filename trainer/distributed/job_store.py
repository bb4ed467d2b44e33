"""The store that lives as long as the job: what a restart of the workers must find there (the
run's token, whether a rank 0 ran before, the step each rank reached).

The workers' own store (``MASTER_ADDR:MASTER_PORT``) does not always outlive a restart. Under
torchrun's c10d rendezvous with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (what a node joining
an elastic run needs, docs/fault-tolerance.md), worker rank 0 hosts a new one on a new port in
every round; the shared one is hosted by the agent that was rank 0, which a lost node takes
with it. The agents' rendezvous store at torchrun's ``--rdzv-endpoint`` lives as long as the job.
torch does not tell its workers where it is, so it is read from the agent's command line (the
worker's parent process) with torchrun's own argument parser. Elsewhere (a static rendezvous,
``--standalone``, Lockstep's own launcher, no ``/proc``) the group's store is the job's store:
its host outlives the workers there.
"""
from __future__ import annotations

import datetime
import os
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch.distributed as dist

_C10D_DEFAULT_PORT = 29400  # torchrun's port for a c10d endpoint given without one
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


@dataclass(frozen=True)
class ElasticLaunch:
    """What torchrun's agent was started with, as far as the job's store and the membership go."""

    endpoint: tuple[str, int]  # the c10d rendezvous store's host and port
    min_nodes: int
    max_nodes: int


def torchrun_arguments(argv: Sequence[str]) -> list[str] | None:
    """The arguments torchrun got, from its process's ``argv`` (``torchrun ...`` or ``python -m
    torch.distributed.run ...``), or None when ``argv`` is not torchrun's."""
    if argv and os.path.basename(argv[0]) == "torchrun":
        return list(argv[1:])
    for i in range(1, len(argv)):  # the interpreter's options, then its module or script
        if argv[i] == "-m":
            return list(argv[i + 2:]) if argv[i + 1:i + 2] and argv[i + 1] in _TORCHRUN_MODULES else None
        if not argv[i].startswith("-"):
            return list(argv[i + 1:]) if os.path.basename(argv[i]) == "torchrun" else None
    return None


def elastic_launch(argv: Sequence[str]) -> ElasticLaunch | None:
    """The c10d rendezvous of the torchrun command line ``argv`` (None: another rendezvous,
    ``--standalone``, or not torchrun). torchrun's ``PET_*`` variables count, as for torchrun:
    a worker's environment is its agent's."""
    args = torchrun_arguments(argv)
    if args is None:
        return None
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint
    from torch.distributed.run import get_args_parser, parse_min_max_nnodes

    try:
        parsed, _ = get_args_parser().parse_known_args(args)
    except SystemExit:  # not a command line torchrun accepts
        return None
    if parsed.standalone or parsed.rdzv_backend != "c10d" or not parsed.rdzv_endpoint:
        return None
    low, high = parse_min_max_nnodes(str(parsed.nnodes))
    return ElasticLaunch(parse_rendezvous_endpoint(parsed.rdzv_endpoint, _C10D_DEFAULT_PORT), low, high)


def parent_elastic_launch(environ: Mapping[str, str] = os.environ) -> ElasticLaunch | None:
    """The c10d rendezvous of the torchrun agent that started this worker, or None."""
    if not environ.get("TORCHELASTIC_RUN_ID"):
        return None
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:  # no /proc: the group's store stands in
        return None
    return elastic_launch(argv)


def shared_store_warning(launch: ElasticLaunch | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """What to set for an elastic node range (``--nnodes=MIN:MAX``) that torch's shared worker
    store does not survive, or None."""
    if launch is None or launch.min_nodes == launch.max_nodes:
        return None
    if environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0") == "1":
        return None
    return (
        f"torchrun --nnodes={launch.min_nodes}:{launch.max_nodes}: set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "
        "on every node. With torch's shared worker store a node that joins later waits for an address "
        "the agents never write again, and the loss of the node that hosts it ends the job "
        "(docs/fault-tolerance.md, Elastic)."
    )


_JOB_STORES: dict[tuple[tuple[str, int], str], Any] = {}
_MINE: list[Any] = []  # this process's job store, once it joined a group
_REACHED_KEY = "lockstep/reached/rank{}"


def job_store(group_store: Any, group_address: tuple[str, int], timeout: datetime.timedelta) -> tuple[Any, str]:
    """This job's store and its ``host:port``: the agents' rendezvous store under an elastic
    torchrun, else ``group_store`` (at ``group_address``). Connected once per process."""
    launch = parent_elastic_launch()
    warning = shared_store_warning(launch)
    if warning is not None:
        warnings.warn(warning, stacklevel=2)
    if launch is None:
        _MINE[:] = [group_store]
        return group_store, "{}:{}".format(*group_address)
    # Several jobs may meet at one endpoint, told apart by their --rdzv-id: each keeps its own keys.
    job = os.environ.get("TORCHELASTIC_RUN_ID", "")
    store = _JOB_STORES.get((launch.endpoint, job))
    if store is None:
        host, port = launch.endpoint
        store = dist.PrefixStore(f"lockstep-job/{job}", dist.TCPStore(host, port, is_master=False, timeout=timeout))
        _JOB_STORES[(launch.endpoint, job)] = store
    _MINE[:] = [store]
    return store, "{}:{}".format(*launch.endpoint)


def use_job_store(store: Any) -> None:
    """Make ``store`` this process's job store: where a launcher that builds the group itself
    (Ray Train) keeps what outlives its restarts of the workers (`RayStorageNotes`)."""
    _MINE[:] = [store]


def note_reached(rank: int, global_step: int) -> None:
    """Keep the optimizer steps this rank had done when its run ended in failure (a lost peer,
    a membership change's SIGTERM), for the restart to say how many it computes again."""
    if not _MINE:
        return
    try:
        _MINE[0].set(_REACHED_KEY.format(rank), str(global_step))
    except Exception:  # noqa: BLE001 - the store went with its host: the restart cannot say it
        pass


def take_reached(ranks: int) -> int | None:
    """The most optimizer steps any of ranks ``0..ranks-1`` of the workers before this process
    had done (`note_reached`), or None when none said; the notes are removed, so that the next
    restart reads only its own predecessors'."""
    if not _MINE:
        return None
    store, steps = _MINE[0], []
    try:
        for rank in range(ranks):
            key = _REACHED_KEY.format(rank)
            if store.check([key]):
                steps.append(int(store.get(key)))
                store.delete_key(key)
    except Exception:  # noqa: BLE001 - an unreadable store: not known
        return None
    return max(steps) if steps else None
