"""`ProcessGroupStrategy`: what every multi-process strategy shares.

Joining and leaving the process group, device pinning by local rank, BatchNorm conversion,
sharding dataloaders, and the collectives the Trainer and callbacks use.
"""
from __future__ import annotations

import datetime
import math
import os
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from trainer.accelerators.accelerator import Accelerator
from trainer.contracts.arguments import check_str
from trainer.contracts.loader import ShardingLoader
from trainer.seed import global_seed, reset_seed
from trainer.distributed.heartbeat import Heartbeat
from trainer.contracts.ray_worker import RayStorageNotes
from trainer.distributed.job_store import note_reached, take_reached, use_job_store
from trainer.launch.failure_notes import explain_failure, note_early_exit, reaches_every_rank
from trainer.distributed.rendezvous import fresh_store, is_restart as rejoined_job, mark_group_joined
from trainer.strategies.strategy import DEFAULT_TIMEOUT, Strategy, lightning_rules
from trainer.launch.worker_process import die_with_elastic_agent
from trainer.contracts.user_line import user_stacklevel

T = TypeVar("T")

_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


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
        accelerator: str | Accelerator | None = None,
    ) -> None:
        super().__init__(accelerator)
        bad_timeout = f"timeout must be a positive number of seconds or a timedelta, got {timeout!r}"
        if not isinstance(timeout, datetime.timedelta):
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(bad_timeout)
            if not (math.isfinite(timeout) and timeout > 0):  # NaN would pass `timeout <= 0`
                raise ValueError(bad_timeout)
            timeout = datetime.timedelta(seconds=timeout)
        elif timeout <= datetime.timedelta(0):
            raise ValueError(bad_timeout)
        check_str("process_group_backend", process_group_backend, allow_none=True)
        self.timeout = timeout
        self.process_group_backend = process_group_backend
        self._store: Any = None  # the rendezvous store of the current group
        self._heartbeat: Heartbeat | None = None
        self._owns_group = False
        self._uneven_counts_warned: list[int] | None = None

    # -- process group ------------------------------------------------------------------------
    def setup_environment(self) -> None:
        """Pin this rank's device, then join the group (NCCL needs the device first)."""
        if lightning_rules():  # as Lightning's DDP at each run's start: the generators as seed_everything left them
            reset_seed()
        cluster = self.placement
        die_with_elastic_agent()  # a torchrun killed with SIGKILL must not leave its workers training
        device = self.root_device
        self.accelerator.pin_device(device)
        if dist.is_initialized():
            if dist.get_world_size() != self.world_size or dist.get_rank() != self.global_rank:
                raise RuntimeError(
                    f"A process group already exists with rank {dist.get_rank()}/{dist.get_world_size()}, "
                    f"but this run is rank {self.global_rank}/{self.world_size}."
                )
            if cluster.source == "ray":  # Ray's storage outlives its restarts: the steps reached go there
                use_job_store(RayStorageNotes())
            return
        os.environ.setdefault("MASTER_ADDR", cluster.master_addr)
        any_port = "MASTER_PORT" not in os.environ and not cluster.master_port
        os.environ.setdefault("MASTER_PORT", str(cluster.master_port))
        try:
            self._store, prefix = fresh_store(cluster, self.timeout)
        finally:
            if any_port:  # "0" (any free port) left in the environment would be read as a bad port by later runs
                del os.environ["MASTER_PORT"]
        kwargs: dict[str, Any] = {
            "backend": self.process_group_backend or self.accelerator.distributed_backend,
            "store": self._store,
            "rank": self.global_rank,
            "world_size": self.world_size,
            "timeout": self.timeout,
        }
        if device.type == "cuda":
            kwargs["device_id"] = device  # binds NCCL to this device eagerly
        dist.init_process_group(**kwargs)
        self._owns_group = True
        mark_group_joined()
        if self.world_size > 1:  # who stopped answering, when a collective fails
            self._heartbeat = Heartbeat(
                cluster.master_addr, cluster.master_port, prefix, self.global_rank, cluster.node_rank, self.collectives
            )
        if kwargs["backend"] != "gloo":  # host-side flags must not wait on the accelerator
            self.control_group = dist.new_group(backend="gloo", timeout=self.timeout)

    def is_restart(self) -> bool:
        """Whether the job restarted, as global rank 0 sees it: its restart count, or an earlier
        process of its rank that joined a group in the job's store (on every node, also where
        the elastic agent's restart count stayed 0 because the failed worker was elsewhere)."""
        return bool(self.broadcast(super().is_restart() or rejoined_job()))

    def steps_reached_before(self, world_size: int) -> int | None:
        """On global rank 0 of a restart: the most optimizer steps a rank of the workers it
        replaces (``world_size`` of them) had done when they ended, or None when not known."""
        return take_reached(world_size) if self.global_rank == 0 else None

    def on_failure(self, exc: BaseException, where: str, global_step: int = 0) -> BaseException | None:
        """Name the rank whose own failure came first (see `trainer.launch.failure_notes`); keep
        the steps done for the restart's report (`steps_reached_before`)."""
        store = self._store
        if self.world_size == 1:
            return None
        if store is None:  # a group joined, not created (Ray Train's): no peers' notes, but this rank is named
            note_reached(self.global_rank, global_step)
            if not reaches_every_rank(exc) and hasattr(exc, "add_note"):
                exc.add_note(f"[lockstep] rank {self.global_rank} failed at {where}")
            return None
        if type(exc) is SystemExit:  # sys.exit() in the middle of a fit: the peers must hear of it
            note_early_exit(store, self.global_rank, where, exc)
            return None
        if reaches_every_rank(exc):  # pre-emption and Ctrl-C reach every rank: nothing to explain
            note_reached(self.global_rank, global_step)
            return None
        address = f"{self.placement.master_addr}:{self.placement.master_port}"
        clearer = explain_failure(store, self.global_rank, self.world_size, exc, where, address, self.collectives.record())
        note_reached(self.global_rank, global_step)
        if clearer is None and hasattr(exc, "add_note"):  # Python >= 3.11: shown under the traceback
            exc.add_note(f"[lockstep] rank {self.global_rank} failed at {where}")
        return clearer

    def teardown(self) -> None:
        """Destroy the group this strategy created (also after an exception)."""
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.stop()
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_group = False
        self.control_group = None

    # -- model and data -----------------------------------------------------------------------
    def _prepare_module(self, module: nn.Module, move: bool = True) -> nn.Module:
        if move:
            module = module.to(self.root_device)
        if self.sync_batchnorm and self.world_size > 1:
            from trainer.strategies.sync_batchnorm import convert_sync_batchnorm

            module = convert_sync_batchnorm(module, use_torch_impl=self.root_device.type == "cuda")
        return module

    def process_dataloader(self, dataloader: Any, stage: str) -> Any:
        """Shard ``dataloader`` across ranks (exactly once each for evaluation; for predict in
        consecutive blocks, so the gathered predictions are in dataset order)."""
        if stage == "fit" or not self.use_distributed_sampler or self.world_size == 1 or isinstance(dataloader, ShardingLoader):
            return super().process_dataloader(dataloader, stage)
        if lightning_rules():  # under the runner: Lightning's padded shares, predict's strided ones
            return self.lightning_share(dataloader, stage)
        from trainer.data.distributed_sampler import distribute_dataloader

        return distribute_dataloader(
            dataloader,
            num_replicas=self.world_size,
            rank=self.global_rank,
            seed=global_seed(),
            evaluation=True,
            contiguous=stage == "predict",
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
            from trainer.distributed.rank_zero import rank_zero_warn

            rank_zero_warn(
                f"Ranks have different numbers of training batches per epoch ({counts}); every rank "
                f"trains {agreed} so none waits for the others. Use the Trainer's DistributedSampler "
                "(use_distributed_sampler=True) to give every rank the same share.",
                stacklevel=user_stacklevel(),
            )
        return agreed, False

    @property
    def in_group(self) -> bool:
        """Whether the process group exists (it is destroyed when fit/validate/test end)."""
        return dist.is_initialized()

    def sync_gradients(self) -> None:
        """Average every existing gradient over the ranks: one flat all-reduce per dtype.

        Manual optimization calls it after each ``manual_backward``, except inside
        `block_backward_sync`. Every rank must hold gradients
        for the same parameters (the same ones took part in its backward passes). Syncing twice is
        harmless: the gradients are then equal on every rank, and their mean is themselves.
        """
        assert self.model is not None
        if self.backward_sync_blocked:
            return
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for param in self.model.parameters():  # a DDP wrapper's are its module's
            if param.grad is not None:
                by_dtype.setdefault(param.grad.dtype, []).append(param.grad)
        for grads in by_dtype.values():
            flat = torch.cat([g.reshape(-1) for g in grads])
            with self.collectives.inside("gradient all_reduce (manual_backward)"):
                dist.all_reduce(flat)
            flat /= self.world_size
            for grad, part in zip(grads, flat.split([g.numel() for g in grads])):
                grad.copy_(part.view_as(grad))

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
        with self.collectives.inside(f"all_reduce ({op})"):
            dist.all_reduce(out, op=_OPS[op])
        if op == "mean":
            out /= self.world_size
        return out

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """``[W, *shape]``: every rank's ``tensor`` (same shape on every rank)."""
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        with self.collectives.inside("all_gather"):
            dist.all_gather(parts, tensor.contiguous())
        return torch.stack(parts)

    def all_gather_object(self, obj: T) -> list[T]:
        """Every rank's picklable ``obj``, in rank order."""
        out: list[Any] = [None] * self.world_size
        with self.collectives.inside("all_gather_object"):
            dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: T, src: int = 0) -> T:
        """Rank ``src``'s picklable ``obj`` on every rank."""
        box = [obj]
        with self.collectives.inside(f"broadcast from rank {src}"):
            dist.broadcast_object_list(box, src=src)
        return box[0]

    def barrier(self, name: str | None = None) -> None:
        """Wait for every rank (bounded by the group's timeout)."""
        if not dist.is_initialized():
            return
        with self.collectives.inside(f"barrier {name!r}" if name else "barrier"):
            if self.root_device.type == "cuda":
                dist.barrier(device_ids=[self.root_device.index])
            else:
                dist.barrier()

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """One answer on every rank: all ranks True (``all=True``) or any rank True."""
        flag = torch.tensor(int(bool(decision)), device=self.root_device)
        with self.collectives.inside("all_reduce (decision)"):
            dist.all_reduce(flag, op=dist.ReduceOp.SUM)
        count = int(flag.item())
        return count == self.world_size if all else count > 0
