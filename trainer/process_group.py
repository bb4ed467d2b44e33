"""`ProcessGroupStrategy`: what every multi-process strategy shares.

Joining and leaving the process group, device pinning by local rank, BatchNorm conversion,
sharding dataloaders, and the collectives the Trainer and callbacks use.
"""
from __future__ import annotations

import atexit
import datetime
import itertools
import os
import time
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from trainer.cluster_environment import ClusterEnvironment, detect_cluster_environment
from trainer.strategy import Strategy

T = TypeVar("T")

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


# The rendezvous store of this process, kept for its lifetime, and how many groups used it.
# A script may fit several times under one launcher (same MASTER_PORT): torch names every new
# default group alike, so a rank that re-joins early would read the previous group's addresses
# from the store (or reach a store its owner is about to close) and fail or hang. Reusing one
# store with a fresh key prefix per group avoids both.
_STORES: dict[tuple[str, str, int, int], Any] = {}
_GROUPS_CREATED = itertools.count()


def _fresh_store(rank: int, world_size: int, timeout: datetime.timedelta) -> Any:
    key = (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"], rank, world_size)
    store = _STORES.get(key)
    if store is None:
        store, _, _ = next(dist.rendezvous("env://", rank=rank, world_size=world_size, timeout=timeout))
        _STORES[key] = store
    return dist.PrefixStore(f"lockstep/group{next(_GROUPS_CREATED)}", store)


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


_FAILURE_KEY = "lockstep/failure"
_PEER_NOTE_WAIT_S = 3.0


class RankFailedError(RuntimeError):
    """Another rank failed, so this rank's collective could not complete."""


def _looks_like_peer_loss(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return any(w in text for w in ("connection", "timed out", "timeout", "closed", "reset by peer", "distbackend", "gloo", "nccl"))


def _read_note(store: Any) -> tuple[int, str] | None:
    try:
        if not store.check([_FAILURE_KEY]):
            return None
        rank, _, text = store.get(_FAILURE_KEY).decode().partition("|")
        return int(rank), text
    except Exception:
        return None


class ProcessGroupStrategy(Strategy):
    """Base of the data-parallel strategies: one process per device, torch.distributed collectives.

    Args:
        timeout: how long a collective may wait for the other ranks before it fails (a
            ``timedelta`` or seconds). A rank that died then surfaces as an error, not a hang.
        process_group_backend: override the backend (default: NCCL on CUDA, gloo on CPU).
    """

    def __init__(
        self,
        timeout: datetime.timedelta | float = DEFAULT_TIMEOUT,
        process_group_backend: str | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(timeout, datetime.timedelta):
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
                raise ValueError(f"timeout must be a positive number of seconds or a timedelta, got {timeout!r}")
            timeout = datetime.timedelta(seconds=timeout)
        self.timeout = timeout
        self.process_group_backend = process_group_backend
        self.sync_batchnorm = False
        self.use_distributed_sampler = True
        self.cluster: ClusterEnvironment | None = None
        self._owns_group = False
        self._uneven_counts_warned: list[int] | None = None

    def configure(self, cluster: ClusterEnvironment, sync_batchnorm: bool, use_distributed_sampler: bool) -> None:
        """Receive the process's place in the job and the Trainer's data/BatchNorm options."""
        self.cluster = cluster
        self.global_rank = cluster.global_rank
        self.local_rank = cluster.local_rank
        self.node_rank = cluster.node_rank
        self.world_size = cluster.world_size
        self.num_nodes = cluster.num_nodes
        self.sync_batchnorm = sync_batchnorm
        self.use_distributed_sampler = use_distributed_sampler

    # -- process group ------------------------------------------------------------------------
    def setup_environment(self) -> None:
        """Pin this rank's device, then join the group (NCCL needs the device first)."""
        if self.cluster is None:
            self.configure(detect_cluster_environment(), self.sync_batchnorm, self.use_distributed_sampler)
        assert self.cluster is not None
        device = self.root_device
        self.accelerator.pin_device(device)
        if dist.is_initialized():
            if dist.get_world_size() != self.world_size or dist.get_rank() != self.global_rank:
                raise RuntimeError(
                    f"A process group already exists with rank {dist.get_rank()}/{dist.get_world_size()}, "
                    f"but this run is rank {self.global_rank}/{self.world_size}."
                )
            return
        os.environ.setdefault("MASTER_ADDR", self.cluster.master_addr)
        os.environ.setdefault("MASTER_PORT", str(self.cluster.master_port))
        kwargs: dict[str, Any] = {
            "backend": self.process_group_backend or self.accelerator.distributed_backend,
            "store": self._new_store(),
            "rank": self.global_rank,
            "world_size": self.world_size,
            "timeout": self.timeout,
        }
        if device.type == "cuda":
            kwargs["device_id"] = device  # binds NCCL to this device eagerly
        dist.init_process_group(**kwargs)
        self._owns_group = True
        _GROUPS_JOINED[:] = [True]
        if kwargs["backend"] != "gloo":  # host-side flags must not wait on the accelerator
            self.control_group = dist.new_group(backend="gloo", timeout=self.timeout)

    def _new_store(self) -> Any:
        self._store = _fresh_store(self.global_rank, self.world_size, self.timeout)
        return self._store

    def on_failure(self, exc: BaseException) -> BaseException | None:
        """Name the rank that failed first.

        The first rank to fail writes its error to the rendezvous store before it leaves the
        group; a rank whose collective then breaks finds that note and reports *that* rank's
        error instead of an anonymous "connection closed" (or a timeout).
        """
        store = getattr(self, "_store", None)
        if store is None or self.world_size == 1 or isinstance(exc, (SystemExit, KeyboardInterrupt)):
            return None  # pre-emption and Ctrl-C reach every rank: nothing to explain
        deadline = time.monotonic() + (_PEER_NOTE_WAIT_S if _looks_like_peer_loss(exc) else 0.0)
        while True:
            note = _read_note(store)
            if note is not None:
                rank, text = note
                if rank == self.global_rank:
                    return None
                return RankFailedError(
                    f"Rank {rank} failed: {text}. Rank {self.global_rank} stopped because the collective "
                    "it was waiting in could not complete without that rank."
                )
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        try:
            store.set(_FAILURE_KEY, f"{self.global_rank}|{type(exc).__name__}: {exc}".splitlines()[0][:2000])
        except Exception:  # the store may be gone with the rank that hosted it
            pass
        return None

    def teardown(self) -> None:
        """Destroy the group this strategy created (also after an exception)."""
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_group = False
        self.control_group = None

    # -- model and data -----------------------------------------------------------------------
    def _prepare_module(self, module: nn.Module) -> nn.Module:
        module = module.to(self.root_device)
        if self.sync_batchnorm and self.world_size > 1:
            from trainer.sync_batchnorm import convert_sync_batchnorm

            module = convert_sync_batchnorm(module, use_torch_impl=self.root_device.type == "cuda")
        self.module = module
        return module

    def process_dataloader(self, dataloader: Any, stage: str) -> Any:
        """Shard ``dataloader`` across ranks (exactly once each for evaluation)."""
        if not self.use_distributed_sampler or self.world_size == 1:
            return dataloader
        from trainer.distributed_sampler import distribute_dataloader

        return distribute_dataloader(
            dataloader,
            num_replicas=self.world_size,
            rank=self.global_rank,
            seed=int(os.environ.get("LOCKSTEP_GLOBAL_SEED", 0)),
            evaluation=stage != "fit",
        )

    def agree_on_batch_count(self, num_batches: int | None) -> tuple[int | None, bool]:
        """Every rank trains the smallest rank's batch count, so no rank waits in an all-reduce
        that the others never start; loaders without a length agree batch by batch instead."""
        mine = torch.tensor([-1 if num_batches is None else num_batches], device=self.root_device)
        counts = self.all_gather(mine).flatten().tolist()
        if min(counts) < 0:
            return None, True
        agreed = int(min(counts))
        if agreed != max(counts) and self.is_global_zero and counts != self._uneven_counts_warned:
            self._uneven_counts_warned = counts
            from trainer.rank_zero import rank_zero_warn

            rank_zero_warn(
                f"Ranks have different numbers of training batches per epoch ({counts}); every rank "
                f"trains {agreed} so none waits for the others. Use the Trainer's DistributedSampler "
                "(use_distributed_sampler=True) to give every rank the same share."
            )
        return agreed, False

    # -- collectives ----------------------------------------------------------------------------
    def reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        """All-reduce a copy of ``tensor`` (``mean`` = sum / W)."""
        if op not in _OPS:
            raise ValueError(f"reduce op must be one of {sorted(_OPS)}, got {op!r}")
        out = tensor.detach().clone()
        if out.dtype in (torch.bool,):
            out = out.int()
        if not out.is_floating_point() and op == "mean":
            out = out.float()
        dist.all_reduce(out, op=_OPS[op])
        if op == "mean":
            out /= self.world_size
        return out

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """``[W, *shape]``: every rank's ``tensor`` (same shape on every rank)."""
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.stack(parts)

    def all_gather_object(self, obj: T) -> list[T]:
        """Every rank's picklable ``obj``, in rank order."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: T, src: int = 0) -> T:
        """Rank ``src``'s picklable ``obj`` on every rank."""
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def barrier(self, name: str | None = None) -> None:
        """Wait for every rank (bounded by the group's timeout)."""
        if dist.is_initialized():
            if self.root_device.type == "cuda":
                dist.barrier(device_ids=[self.root_device.index])
            else:
                dist.barrier()

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """One answer on every rank: all ranks True (``all=True``) or any rank True."""
        flag = torch.tensor(int(bool(decision)), device=self.root_device)
        dist.all_reduce(flag, op=dist.ReduceOp.SUM)
        count = int(flag.item())
        return count == self.world_size if all else count > 0
