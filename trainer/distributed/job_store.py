"""The store that lives as long as the job: what a restart of the workers must find there (the
run's token, whether a rank 0 ran before, the step each rank reached).

One source of truth, global rank 0's torchrun agent, decides which store that is
(`choose_job_store`), and rank 0 tells the other ranks through the group's store, so that every
rank of a group uses the same one however each node's agent was started:

- c10d with a port the workers can know (``--rdzv-endpoint HOST:PORT``, or no endpoint: torchrun's
  ``localhost:29400``): the agents' rendezvous store there. It outlives a restart of the workers
  and a change of the nodes; the workers' own store does not always (with
  ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, what a node joining an elastic run needs, worker rank
  0 hosts a new one in every round). torch does not tell its workers where the endpoint is, so it
  is read from the agent's command line (the worker's parent process, however the interpreter
  was started) with torchrun's own argument parser.
- Elsewhere (``--standalone`` or ``--rdzv-endpoint HOST:0``, whose port only the agent knows, a
  static rendezvous, Lockstep's own launcher, a parent that is no launcher, no ``/proc``): the
  group's store. Under an elastic agent that shares its store with the workers
  (``TORCHELASTIC_USE_AGENT_STORE=True``, torch's default) its host is the agent, which outlives
  the workers; where it does not, one line says that a restart of the workers is then another run.

The endpoint is connected with a bounded wait (`CONNECT_TIMEOUT_S`): an address that does not
answer is reported, never waited on for the whole rendezvous timeout.
"""
from __future__ import annotations

import datetime
import os
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch.distributed as dist
from trainer.contracts.user_line import user_stacklevel

_C10D_DEFAULT_PORT = 29400  # torchrun's port for a c10d endpoint given without one
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_PYTHON_OPTIONS_WITH_VALUE = "cmWX"  # the interpreter's one-letter options that take a value
CONNECT_TIMEOUT_S = 30.0  # the agents reached the endpoint before they started the workers
_CHOICE_KEY = "lockstep/job_store"  # rank 0's choice, in the group's store ("": the group's own)


@dataclass(frozen=True)
class ElasticLaunch:
    """What torchrun's agent was started with, as far as the job's store and the membership go."""

    endpoint: tuple[str, int] | None  # the c10d rendezvous store's host and port, when a worker can know it
    min_nodes: int
    max_nodes: int
    unknown_endpoint: str = ""  # why a c10d endpoint is not known ("--standalone", "--rdzv-endpoint h:0")


def _python_arguments(argv: Sequence[str]) -> tuple[str, str, list[str]] | None:
    """``("-m", module, arguments)`` or ``("script", path, arguments)`` of a ``python`` command
    line, past the interpreter's own options (``-u``, ``-X faulthandler``, ``-Wignore``,
    ``-mtorch.distributed.run``, ``-bB``); None for ``-c`` or no module or script."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--check-hash-based-pycs":
            i += 2
            continue
        if arg == "--":
            return ("script", argv[i + 1], list(argv[i + 2:])) if i + 1 < len(argv) else None
        if arg.startswith("--"):  # --help, --version: no value
            i += 1
            continue
        if not arg.startswith("-") or arg == "-":
            return "script", arg, list(argv[i + 1:])
        step = 1
        for j, letter in enumerate(arg[1:], start=2):
            if letter in _PYTHON_OPTIONS_WITH_VALUE:
                inline = arg[j:]
                value = inline or (argv[i + 1] if i + 1 < len(argv) else "")
                step = 1 if inline else 2
                if letter == "c":
                    return None
                if letter == "m":
                    return "-m", value, list(argv[i + step:])
                break
        i += step
    return None


def torchrun_arguments(argv: Sequence[str]) -> list[str] | None:
    """The arguments torchrun got, from its process's ``argv`` (``torchrun ...``, the console
    script run by an interpreter, or ``python [options] -m torch.distributed.run ...``), or None
    when ``argv`` is not torchrun's."""
    if not argv:
        return None
    if os.path.basename(argv[0]) == "torchrun":
        return list(argv[1:])
    found = _python_arguments(argv)
    if found is None:
        return None
    kind, name, args = found
    is_torchrun = name in _TORCHRUN_MODULES if kind == "-m" else os.path.basename(name) == "torchrun"
    return args if is_torchrun else None


def elastic_launch(argv: Sequence[str]) -> ElasticLaunch | None:
    """The rendezvous of the torchrun command line ``argv`` (None: not torchrun, or a command
    line torchrun refuses). torchrun's ``PET_*`` variables count, as for torchrun: a worker's
    environment is its agent's."""
    args = torchrun_arguments(argv)
    if args is None:
        return None
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint
    from torch.distributed.run import get_args_parser, parse_min_max_nnodes

    try:
        parsed, _ = get_args_parser().parse_known_args(args)
        low, high = parse_min_max_nnodes(str(parsed.nnodes))
    except (SystemExit, ValueError, RuntimeError):  # not a command line torchrun accepts
        return None
    if parsed.standalone:  # torchrun picks a free port for it: only the agent knows which
        return ElasticLaunch(None, 1, 1, "--standalone")
    if parsed.rdzv_backend != "c10d":  # static (the default), etcd, ...: the group's store
        return ElasticLaunch(None, low, high)
    try:
        host, port = parse_rendezvous_endpoint(parsed.rdzv_endpoint or "", _C10D_DEFAULT_PORT)
    except ValueError:
        return None
    if port == 0:
        return ElasticLaunch(None, low, high, f"--rdzv-endpoint {parsed.rdzv_endpoint}")
    return ElasticLaunch((host, port), low, high)


def parent_elastic_launch(environ: Mapping[str, str] = os.environ) -> ElasticLaunch | None:
    """The rendezvous of the torchrun agent that started this worker, or None."""
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


def choose_job_store(launch: ElasticLaunch | None, environ: Mapping[str, str] = os.environ) -> tuple[tuple[str, int] | None, str | None]:
    """The job's store as this process's agent sees it: the rendezvous endpoint, or None for the
    group's store; and the one line to say when that store does not outlive the workers."""
    if launch is not None and launch.endpoint is not None:
        return launch.endpoint, None
    if not environ.get("TORCHELASTIC_RUN_ID") or environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return None, None  # no elastic agent, or the agent hosts the group's store: it outlives the workers
    return None, _restarts_are_new_runs(launch.unknown_endpoint if launch is not None else "")


def _restarts_are_new_runs(why: str) -> str:
    cause = (f"torchrun {why} gives its workers no port of the agents' rendezvous store" if why
             else "the agents' rendezvous store is not known to the workers")
    return (
        f"[lockstep] {cause}, and with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 their own store is hosted by "
        "worker rank 0: a restart of the workers cannot find this run, so it starts as another run "
        "(it does not resume this run's checkpoint by itself). Give --rdzv-endpoint a fixed port to "
        "resume on restarts."
    )


_JOB_STORES: dict[tuple[tuple[str, int], str], Any] = {}
_MINE: list[Any] = []  # this process's job store, once it joined one
_REACHED_KEY = "lockstep/reached/rank{}"


def _connect(endpoint: tuple[str, int], timeout: datetime.timedelta) -> Any:
    """The job's keys in the store at ``endpoint``: waits at most `CONNECT_TIMEOUT_S` for it to
    answer, then ``timeout`` for each request. Several jobs may meet at one endpoint, told apart by
    their ``--rdzv-id``: each keeps its own keys."""
    job = os.environ.get("TORCHELASTIC_RUN_ID", "")
    store = _JOB_STORES.get((endpoint, job))
    if store is None:
        connect = datetime.timedelta(seconds=min(CONNECT_TIMEOUT_S, timeout.total_seconds()))
        client = dist.TCPStore(endpoint[0], endpoint[1], is_master=False, timeout=connect)
        client.set_timeout(timeout)
        store = dist.PrefixStore(f"lockstep-job/{job}", client)
        _JOB_STORES[(endpoint, job)] = store
    return store


def job_store(group_store: Any, group_address: tuple[str, int], timeout: datetime.timedelta,
              rank: int = 0, group: Any = None) -> tuple[Any, str]:
    """This job's store and its ``host:port``: `choose_job_store` as global rank 0 sees it.

    ``group`` (a store only this group uses) carries rank 0's choice to the other ranks;
    without it (one process) the choice is this process's own. A rank that cannot reach the
    endpoint rank 0 chose fails, naming the rank and the address."""
    if rank == 0:
        launch = parent_elastic_launch()
        warning = shared_store_warning(launch)
        if warning is not None:
            warnings.warn(warning, stacklevel=user_stacklevel())
        endpoint, said = choose_job_store(launch)
        store = None
        if endpoint is not None:
            host, port = endpoint
            try:
                store = _connect(endpoint, timeout)
            except (RuntimeError, OSError) as exc:  # DistNetworkError, DistStoreError are RuntimeErrors
                endpoint, said = None, (
                    f"[lockstep] the agents' rendezvous store at {host}:{port} did not answer within "
                    f"{CONNECT_TIMEOUT_S:g} s ({type(exc).__name__}): the job's store is the workers' own, so a "
                    "restart of the workers after a change of the nodes may start as another run."
                )
        if said is not None:
            warnings.warn(said, stacklevel=user_stacklevel())
        if group is not None:
            group.set(_CHOICE_KEY, "" if endpoint is None else "{}:{}".format(*endpoint))
    else:
        chosen = group.get(_CHOICE_KEY).decode()
        endpoint = None
        if chosen:
            host, _, port = chosen.rpartition(":")
            endpoint = (host, int(port))
            try:
                store = _connect(endpoint, timeout)
            except (RuntimeError, OSError) as exc:
                raise RuntimeError(
                    f"rank {rank} cannot reach the job's store at {chosen} (torchrun's --rdzv-endpoint, as "
                    f"global rank 0's agent was started with) within {CONNECT_TIMEOUT_S:g} s: {exc}"
                ) from exc
    if endpoint is None:
        _MINE[:] = [group_store]
        return group_store, "{}:{}".format(*group_address)
    _MINE[:] = [store]
    return store, "{}:{}".format(*endpoint)


def lone_job_store(timeout: datetime.timedelta, environ: Mapping[str, str] = os.environ) -> tuple[Any, str] | None:
    """The job's store of a one-process run under an elastic agent (a start that others may join),
    or None when it has none that outlives it (then one line says so). The agent's own store at
    ``MASTER_ADDR:MASTER_PORT`` stands in for the group's."""
    if not environ.get("TORCHELASTIC_RUN_ID"):
        return None
    if choose_job_store(parent_elastic_launch(environ), environ)[0] is None and environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        agent_address = (environ.get("MASTER_ADDR", "127.0.0.1"), int(environ.get("MASTER_PORT", "0") or 0))
        try:
            connect = datetime.timedelta(seconds=min(CONNECT_TIMEOUT_S, timeout.total_seconds()))
            agent = dist.TCPStore(agent_address[0], agent_address[1], is_master=False, timeout=connect)
        except (RuntimeError, OSError):
            return None
        agent.set_timeout(timeout)
        return job_store(agent, agent_address, timeout)
    store, address = job_store(None, ("", 0), timeout)
    return (store, address) if store is not None else None


def use_job_store(store: Any) -> None:
    """Make ``store`` this process's job store: where a launcher that builds the group itself
    (Ray Train) keeps what outlives its restarts of the workers (`RayStorageNotes`)."""
    _MINE[:] = [store]


def note_reached(rank: int, global_step: int) -> None:
    """Keep the optimizer steps this rank had done when its run ended in failure (a lost peer,
    a membership change's SIGTERM), for the restart to say how many it computes again."""
    if not _MINE or _MINE[0] is None:
        return
    try:
        _MINE[0].set(_REACHED_KEY.format(rank), str(global_step))
    except Exception:  # noqa: BLE001 - the store went with its host: the restart cannot say it
        pass


def take_reached(ranks: int) -> int | None:
    """The most optimizer steps any of ranks ``0..ranks-1`` of the workers before this process
    had done (`note_reached`), or None when none said; the notes are removed, so that the next
    restart reads only its own predecessors'."""
    if not _MINE or _MINE[0] is None:
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
