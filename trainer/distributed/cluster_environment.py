"""Where this process sits in the job: ranks, sizes and rendezvous address, read from the launcher.

``detect_cluster_environment()`` understands four launches:

- a Ray Train worker (``ray.train.torch.TorchTrainer``), which has its process group already,
- ``torchrun`` (or anything that sets the same ``env://`` variables, such as the test helpers),
- SLURM ``srun`` (one process per task),
- a single plain process.

Only reading and validating happens here; joining the process group is the Strategy's job.
"""
from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from typing import Callable, Iterator, Literal, Mapping

from trainer.contracts.rank import detect_global_rank, env_int, env_str, launch_source
from trainer.contracts.ray_worker import RayPlacement, ray_placement

__all__ = ["ClusterEnvironment", "detect_cluster_environment", "detect_global_rank", "expand_hostlist"]

_SLURM_PORT_BASE = 15000
_SLURM_PORT_RANGE = 20000


@dataclass(frozen=True)
class ClusterEnvironment:
    """Placement of this process in the job (all ranks 0-based)."""

    global_rank: int
    local_rank: int
    node_rank: int
    world_size: int
    local_world_size: int
    num_nodes: int
    master_addr: str
    master_port: int  # 0 for a single process: no rendezvous needed
    source: Literal["ray", "torchrun", "slurm", "single"]
    # how often the launcher restarted (torchrun) or requeued (SLURM) the job; under Ray 1 when
    # Ray hands the workers a checkpoint to resume from (a restart), else 0
    restart_count: int = 0

    @property
    def is_global_zero(self) -> bool:
        """Whether this is global rank 0."""
        return self.global_rank == 0

    @property
    def is_distributed(self) -> bool:
        """Whether there is more than one process in the job."""
        return self.world_size > 1


def detect_cluster_environment(environ: Mapping[str, str] = os.environ) -> ClusterEnvironment:
    """Read this process's placement from the launcher's environment variables.

    Checked in this order:

    0. **Ray Train**: this process runs a Ray Train training function (``ray.train`` is imported
       and ``ray.train.get_context()`` answers; never true in a process that has not imported
       Ray, which is not made to). Ranks and sizes are Ray's (its context; Ray also sets
       torchrun's variables, which would be read the same way), the rendezvous address
       ``MASTER_ADDR``/``MASTER_PORT`` when Ray set them; the process group is the one Ray
       created. First, because Ray sets torchrun's variables too, and a Ray worker must be
       recognised as Ray's: its restarts are Ray's (`trainer.contracts.ray_worker`). Read only
       when ``environ`` is ``os.environ`` (Ray's context belongs to the process, not to a dict).
    1. **torchrun**: any of ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
       ``GROUP_RANK`` is set. Then ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
       ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` are required. The node rank is
       ``GROUP_RANK`` (else ``NODE_RANK``, else ``RANK // LOCAL_WORLD_SIZE``); the node count is
       ``GROUP_WORLD_SIZE`` (else ``WORLD_SIZE / LOCAL_WORLD_SIZE``). This wins over SLURM, so
       ``srun torchrun ...`` works.
    2. **SLURM**, only for processes that ``srun`` started: ``SLURM_PROCID`` and ``SLURM_NTASKS``
       are set *and* ``SLURM_STEP_ID`` is an ordinary step number. An ``salloc`` shell (job name
       ``bash``/``interactive``) has no step id or the special "interactive" step, and an
       ``sbatch`` script that runs ``python`` without ``srun`` is the "batch" step, so both are
       a single process even though ``SLURM_NTASKS`` may be > 1 (treating them as ``srun``-
       launched would wait forever for tasks that do not exist); ``salloc`` followed by
       ``srun python ...`` is detected as SLURM. Rank, local rank and node rank come from
       ``SLURM_PROCID``, ``SLURM_LOCALID`` and ``SLURM_NODEID``; tasks per node from
       ``SLURM_STEP_TASKS_PER_NODE``, ``SLURM_TASKS_PER_NODE`` or ``SLURM_NTASKS_PER_NODE``
       (format ``2(x3),1``); ``MASTER_ADDR`` defaults to the first host of
       ``SLURM_STEP_NODELIST``/``SLURM_JOB_NODELIST``/``SLURM_NODELIST``, and ``MASTER_PORT``
       to ``15000 + SLURM_JOB_ID % 20000`` so every task of a job derives the same port.
       Known limit: ``srun -n4 --pty bash`` followed by ``python ...`` in that shell looks like a
       4-task ``srun`` launch; run such a shell with ``-n1``.
    3. **single**: one process, rank 0 of 1.

    Raises ``ValueError`` naming the variable when a launch is recognised but its variables are
    missing, not integers, or inconsistent (for example ``RANK`` >= ``WORLD_SIZE``).
    """
    ray = ray_placement() if environ is os.environ else None
    if ray is not None:
        return _from_ray(environ, ray)
    source = launch_source(environ)
    if source == "torchrun":
        return _from_torchrun(environ)
    if source == "slurm":
        return _from_slurm(environ)
    port = env_int(environ, "MASTER_PORT") if "MASTER_PORT" in environ else 0
    return ClusterEnvironment(
        global_rank=0,
        local_rank=0,
        node_rank=0,
        world_size=1,
        local_world_size=1,
        num_nodes=1,
        master_addr=environ.get("MASTER_ADDR") or "127.0.0.1",
        master_port=port,
        source="single",
    )


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a SLURM compressed host list, keeping order and zero padding.

    ``"node[01-03,7]"`` -> ``["node01", "node02", "node03", "node7"]``;
    ``"gpu-a[1-2],gpu-b3"`` -> ``["gpu-a1", "gpu-a2", "gpu-b3"]``; several bracket groups in one
    name expand to every combination (``"r[1-2]n[1-2]"`` -> ``r1n1, r1n2, r2n1, r2n2``).
    """
    text = hostlist.strip()
    if not text:
        raise ValueError("expand_hostlist: the host list is empty; expected e.g. 'node[01-04]'.")
    hosts: list[str] = []
    for entry in _split_outside_brackets(text, hostlist):
        # re.split with a capture group alternates literal text and bracket groups.
        pieces = re.split(r"(\[[^\[\]]*\])", entry)
        choices: list[list[str]] = []
        for i, piece in enumerate(pieces):
            if i % 2 == 1:
                choices.append(_expand_range_group(piece[1:-1], hostlist))
            elif "[" in piece or "]" in piece:
                raise ValueError(f"expand_hostlist: unbalanced brackets in {hostlist!r}.")
            else:
                choices.append([piece])
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
    return hosts


# ----------------------------------------------------------------------------------------------
# Ray Train
# ----------------------------------------------------------------------------------------------
def _from_ray(environ: Mapping[str, str], ray: RayPlacement) -> ClusterEnvironment:
    port = _port(environ) if environ.get("MASTER_PORT") else 0  # TorchConfig(init_method="tcp") sets none
    return ClusterEnvironment(
        global_rank=ray.global_rank,
        local_rank=ray.local_rank,
        node_rank=ray.node_rank,
        world_size=ray.world_size,
        local_world_size=ray.local_world_size,
        num_nodes=max(ray.node_rank + 1, -(-ray.world_size // ray.local_world_size)),
        master_addr=environ.get("MASTER_ADDR") or "127.0.0.1",
        master_port=port,
        source="ray",
        restart_count=int(ray.resumes),
    )


# ----------------------------------------------------------------------------------------------
# torchrun
# ----------------------------------------------------------------------------------------------
def _from_torchrun(environ: Mapping[str, str]) -> ClusterEnvironment:
    hint = (
        "The environment looks like a torchrun launch (env:// rendezvous) but is incomplete; "
        "launch with `torchrun` or set RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, "
        "MASTER_ADDR and MASTER_PORT together."
    )
    world_size = env_int(environ, "WORLD_SIZE", minimum=1, hint=hint)
    rank = env_int(environ, "RANK", hint=hint)
    local_world_size = env_int(environ, "LOCAL_WORLD_SIZE", minimum=1, hint=hint)
    local_rank = env_int(environ, "LOCAL_RANK", hint=hint)
    master_addr = env_str(environ, "MASTER_ADDR", hint=hint)
    master_port = _port(environ)
    _check_below(rank, "RANK", world_size, "WORLD_SIZE")
    if local_world_size > world_size:
        raise ValueError(
            f"LOCAL_WORLD_SIZE={local_world_size} is larger than WORLD_SIZE={world_size}; "
            "each node runs at most WORLD_SIZE processes."
        )
    _check_below(local_rank, "LOCAL_RANK", local_world_size, "LOCAL_WORLD_SIZE")
    if "GROUP_WORLD_SIZE" in environ:
        num_nodes = env_int(environ, "GROUP_WORLD_SIZE", minimum=1)
        nodes_var = "GROUP_WORLD_SIZE"
    elif world_size % local_world_size == 0:
        num_nodes = world_size // local_world_size
        nodes_var = "WORLD_SIZE // LOCAL_WORLD_SIZE"
    else:
        raise ValueError(
            f"WORLD_SIZE={world_size} is not a multiple of LOCAL_WORLD_SIZE={local_world_size} "
            "and GROUP_WORLD_SIZE (the number of nodes) is not set; set GROUP_WORLD_SIZE."
        )
    if "GROUP_RANK" in environ:
        node_rank = env_int(environ, "GROUP_RANK")
        node_var = "GROUP_RANK"
    elif "NODE_RANK" in environ:
        node_rank = env_int(environ, "NODE_RANK")
        node_var = "NODE_RANK"
    else:
        node_rank = rank // local_world_size
        node_var = "RANK // LOCAL_WORLD_SIZE"
    _check_below(node_rank, node_var, num_nodes, nodes_var)
    return _placement(
        environ, "torchrun", "TORCHELASTIC_RESTART_COUNT",
        ranks=(rank, local_rank, node_rank), sizes=(world_size, local_world_size, num_nodes),
        address=(master_addr, master_port),
    )


def _placement(
    environ: Mapping[str, str],
    source: Literal["torchrun", "slurm"],
    restarts_var: str,
    ranks: tuple[int, int, int],
    sizes: tuple[int, int, int],
    address: tuple[str, int],
) -> ClusterEnvironment:
    """What a launcher's variables said: ``ranks`` (global, local, node), ``sizes`` (world, this
    node's, nodes), ``address`` (master host, port); ``restarts_var`` counts the restarts, 0 unset."""
    global_rank, local_rank, node_rank = ranks
    world_size, local_world_size, num_nodes = sizes
    master_addr, master_port = address
    return ClusterEnvironment(
        global_rank=global_rank,
        local_rank=local_rank,
        node_rank=node_rank,
        world_size=world_size,
        local_world_size=local_world_size,
        num_nodes=num_nodes,
        master_addr=master_addr,
        master_port=master_port,
        source=source,
        restart_count=env_int(environ, restarts_var) if restarts_var in environ else 0,
    )


# ----------------------------------------------------------------------------------------------
# SLURM
# ----------------------------------------------------------------------------------------------
def _from_slurm(environ: Mapping[str, str]) -> ClusterEnvironment:
    hint = "The process was started by `srun` but SLURM's task variables are incomplete."
    world_size = env_int(environ, "SLURM_NTASKS", minimum=1, hint=hint)
    rank = env_int(environ, "SLURM_PROCID", hint=hint)
    local_rank = env_int(environ, "SLURM_LOCALID", hint=hint)
    node_rank = env_int(environ, "SLURM_NODEID", hint=hint)
    _check_below(rank, "SLURM_PROCID", world_size, "SLURM_NTASKS")

    tasks_var = _first_set(
        environ, ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE")
    )
    if tasks_var is None:
        raise ValueError(
            f"SLURM_TASKS_PER_NODE is not set (nor SLURM_STEP_TASKS_PER_NODE or "
            f"SLURM_NTASKS_PER_NODE), so the tasks per node are unknown. {hint}"
        )
    tasks_per_node = _expand_tasks_per_node(environ[tasks_var], tasks_var)

    nodelist_var = _first_set(environ, ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"))
    hosts = expand_hostlist(environ[nodelist_var]) if nodelist_var else []
    if len(tasks_per_node) == 1 and len(hosts) > 1:
        # `--ntasks-per-node=N` gives a single number for every node.
        tasks_per_node = tasks_per_node * len(hosts)
    if nodelist_var and hosts and len(hosts) != len(tasks_per_node):
        raise ValueError(
            f"{tasks_var}={environ[tasks_var]!r} describes {len(tasks_per_node)} node(s) but "
            f"{nodelist_var}={environ[nodelist_var]!r} lists {len(hosts)}."
        )
    if sum(tasks_per_node) != world_size:
        raise ValueError(
            f"{tasks_var}={environ[tasks_var]!r} adds up to {sum(tasks_per_node)} tasks but "
            f"SLURM_NTASKS={world_size}."
        )
    num_nodes = len(tasks_per_node)
    _check_below(node_rank, "SLURM_NODEID", num_nodes, f"the number of nodes in {tasks_var}")
    local_world_size = tasks_per_node[node_rank]
    _check_below(local_rank, "SLURM_LOCALID", local_world_size, f"the tasks on this node ({tasks_var})")

    if environ.get("MASTER_ADDR"):
        master_addr = environ["MASTER_ADDR"]
    elif hosts:
        master_addr = hosts[0]
    else:
        raise ValueError(
            "SLURM_JOB_NODELIST is not set (nor SLURM_STEP_NODELIST or SLURM_NODELIST), so the "
            "master node is unknown; set MASTER_ADDR to the host name of the first node."
        )
    if "MASTER_PORT" in environ:
        master_port = _port(environ)
    else:
        job_var = _first_set(environ, ("SLURM_JOB_ID", "SLURM_JOBID"))
        if job_var is None:
            raise ValueError(
                "SLURM_JOB_ID is not set, so no MASTER_PORT can be derived; set MASTER_PORT."
            )
        master_port = _SLURM_PORT_BASE + env_int(environ, job_var) % _SLURM_PORT_RANGE
    return _placement(
        environ, "slurm", "SLURM_RESTART_COUNT",
        ranks=(rank, local_rank, node_rank), sizes=(world_size, local_world_size, num_nodes),
        address=(master_addr, master_port),
    )


def _expand_tasks_per_node(value: str, name: str) -> list[int]:
    counts: list[int] = []
    bad = f"{name}={value!r} is not a SLURM tasks-per-node list; expected e.g. '2(x3),1'."
    for match in _each_item(r"\s*(\d+)\s*(?:\(x(\d+)\))?\s*", value, lambda item: bad):
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def _each_item(pattern: str, text: str, bad: Callable[[str], str]) -> Iterator[re.Match[str]]:
    """The match of ``pattern`` for each comma-separated item of ``text``; ``bad(item)`` says why not."""
    for item in text.split(","):
        match = re.fullmatch(pattern, item)
        if match is None:
            raise ValueError(bad(item))
        yield match


def _split_outside_brackets(text: str, original: str) -> list[str]:
    entries, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            raise ValueError(f"expand_hostlist: unbalanced brackets in {original!r}.")
        if char == "," and depth == 0:
            entries.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"expand_hostlist: unbalanced brackets in {original!r}.")
    entries.append(text[start:])
    if any(not entry.strip() for entry in entries):
        raise ValueError(f"expand_hostlist: empty host name in {original!r}.")
    return [entry.strip() for entry in entries]


def _expand_range_group(group: str, original: str) -> list[str]:
    def bad(item: str) -> str:
        return f"expand_hostlist: bad range {item!r} in {original!r}; expected e.g. '01-03' or '7'."

    values: list[str] = []
    for match in _each_item(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", group, bad):
        item = match.string
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise ValueError(f"expand_hostlist: range {item!r} in {original!r} runs backwards.")
        # SLURM pads every number to the width of the range's first number: 01-10 -> 01..10.
        values.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return values


# ----------------------------------------------------------------------------------------------
# reading variables
# ----------------------------------------------------------------------------------------------
def _first_set(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((name for name in names if environ.get(name, "").strip()), None)


def _port(environ: Mapping[str, str]) -> int:
    port = env_int(environ, "MASTER_PORT", minimum=1)
    if port > 65535:
        raise ValueError(f"MASTER_PORT={port} is not a TCP port (1..65535).")
    return port


def _check_below(value: int, name: str, bound: int, bound_name: str) -> None:
    if value >= bound:
        raise ValueError(
            f"{name}={value} is out of range: it must be below {bound_name}={bound} "
            f"(valid: 0..{bound - 1})."
        )
