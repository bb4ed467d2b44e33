"""Strategies own the processes, the device, the model wrapper and the collectives.

`Strategy` is the base the training loop talks to; `SingleDeviceStrategy` is one process, where
every collective is the identity. The distributed strategies live in their own modules.
"""
from __future__ import annotations

import contextlib
import datetime
import os
from typing import Any, ContextManager, Iterator, Mapping, TypeVar

import torch
from torch import nn

from trainer.accelerators.accelerator import Accelerator
from trainer.checkpoint_io.file_format import atomic_save
from trainer.checkpoint_io.sharded_read import load_full
from trainer.contracts import storage
from trainer.contracts.loader import ShardingLoader
from trainer.contracts.protocols import CheckpointIOPlugin
from trainer.seed import global_seed
from trainer.data.distributed_sampler import distribute_dataloader, set_epoch
from trainer.data.lightning_sampler import lightning_distributed
from trainer.distributed.cluster_environment import ClusterEnvironment
from trainer.distributed.stall import CollectiveProgress
from trainer.strategies.placement import JobPlacement

T = TypeVar("T")

# Set (to "1") by `python -m trainer.as_lightning` for the run and every process it starts
# (trainer.lightning.alias): there Lockstep reads as Lightning does where its own reading differs.
# Several ranks get Lightning's DistributedSampler shares in every stage (trainer.data.lightning_sampler),
# evaluation's values stay rank-local unless logged with sync_dist and predict returns each rank's own
# outputs (trainer.loops.evaluation_loop), a sync_dist step value is reduced as it is logged
# (trainer.metrics.metric_store), each run of a process group reseeds as seed_everything left the
# generators (trainer.strategies.process_group), DDP's first evaluation step after training gets rank 0's
# buffers (trainer.strategies.ddp); an explicit devices=1 in a launched job is a Trainer of that
# process alone (trainer.strategies.selection). docs/migration.md, "Library census".
LIGHTNING_RULES = "LOCKSTEP_LIGHTNING_RULES"


def lightning_rules() -> bool:
    """Whether this process reads as Lightning where Lockstep's reading differs (under the runner)."""
    return os.environ.get(LIGHTNING_RULES) == "1"

# Stateless and reusable: the per-step "no context" costs no allocation.
NO_CONTEXT = contextlib.nullcontext()

# a process group's collectives time out after this (the strategies' ``timeout=`` default)
DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)


class Strategy(JobPlacement):
    """How training is spread over processes. Subclasses override what differs."""

    name = "base"

    def __init__(self, accelerator: str | Accelerator | None = None) -> None:
        # Lightning's ``DDPStrategy(accelerator="gpu")``: the Trainer's ``accelerator="auto"`` takes it
        self.requested_accelerator = _accelerator_name(accelerator)
        self._accelerator: Accelerator | None = None
        self._cluster_environment: ClusterEnvironment | None = None
        # Lightning's plugin from Trainer(plugins=[...]), checked against the detected placement
        self._environment_plugin: Any = None
        self.sync_batchnorm = False
        self.use_distributed_sampler = True
        self.model: nn.Module | None = None
        # Lightning's ``strategy.optimizers``, which libraries read (finetuning-scheduler, rl4co): the Trainer's
        self.optimizers: list[torch.optim.Optimizer] = []
        self.launcher: Any = None  # set when this process must start the workers itself
        self.control_group: Any = None  # a CPU group for small host-side agreements (None: default group)
        self._backward_sync_blocked = 0  # depth of `block_backward_sync` contexts
        self.precision = "32-true"  # the Trainer's (normalized), given by `connect`
        # which collective the training thread is in, for naming a rank that stalls
        self.collectives = CollectiveProgress()
        # a library's own checkpoint I/O (Lightning's ``Trainer(plugins=[CheckpointIO])``): None, Lockstep's own files
        self.checkpoint_io: CheckpointIOPlugin | None = None

    # -- set-up -----------------------------------------------------------------------------
    def connect(
        self,
        accelerator: Accelerator,
        cluster_environment: ClusterEnvironment,
        *,
        sync_batchnorm: bool = False,
        use_distributed_sampler: bool = True,
        launcher: Any = None,
        precision: str = "32-true",
    ) -> None:
        """The one set-up entry point, for a strategy named or given alike (before
        ``setup_environment``): the device kind, this process's place in the job (where a
        ``launcher`` will start the workers, the job it will start), the Trainer's BatchNorm,
        sampler and precision options (used by the distributed strategies)."""
        self.precision = precision
        self._accelerator = accelerator
        self._cluster_environment = cluster_environment
        self.sync_batchnorm = sync_batchnorm
        self.use_distributed_sampler = use_distributed_sampler
        self.launcher = launcher

    @property
    def accelerator(self) -> Accelerator:
        """The device kind, given by `connect`."""
        if self._accelerator is None:
            raise RuntimeError(self._not_connected())
        return self._accelerator

    @property
    def cluster_environment(self) -> Any:
        """This process's place in the job (ranks, sizes, rendezvous address, restart count): the
        one reading of the launcher's environment, given by `connect` (a
        `trainer.distributed.cluster_environment.ClusterEnvironment`); the Lightning plugin given
        in ``Trainer(plugins=[...])`` instead when there is one, as in Lightning."""
        return self.placement if self._environment_plugin is None else self._environment_plugin

    @property
    def placement(self) -> ClusterEnvironment:
        """Lockstep's reading of this process's place in the job, given by `connect` (the
        `cluster_environment` when no Lightning plugin was given)."""
        if self._cluster_environment is None:
            raise RuntimeError(self._not_connected())
        return self._cluster_environment

    def use_environment_plugin(self, plugin: Any) -> None:
        """Take Lightning's cluster-environment ``plugin`` (``Trainer(plugins=[...])``, checked
        against `placement` by `trainer.lightning.environments.connect_environment_plugin`) as
        `cluster_environment`."""
        self._environment_plugin = plugin

    def _not_connected(self) -> str:
        return (
            f"{type(self).__name__} is not connected yet: pass it to a Trainer "
            "(Trainer(strategy=...)), which connects it to an accelerator and the cluster environment."
        )

    @property
    def _job_ranks(self) -> ClusterEnvironment:
        return self.placement

    @property
    def is_global_zero(self) -> bool:
        """Whether this is global rank 0 (the one that logs and writes)."""
        # JobPlacement's, in one call: read every step (tests/loops/test_step_call_budget.py)
        return self.placement.global_rank == 0

    @property
    def root_device(self) -> torch.device:
        """The device this process trains on."""
        return self.accelerator.device_for(self.local_rank)

    def setup_environment(self) -> None:
        """Pin the device and join the process group."""
        self.accelerator.pin_device(self.root_device)

    def module_init_context(self) -> ContextManager[Any]:
        """Where ``configure_model`` builds layers: directly on this process's device."""
        return torch.device(self.root_device)

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move the module to its device and return what the loop calls (possibly a wrapper)."""
        self.model = module.to(self.root_device)
        return self.model

    def setup_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> None:
        """See the optimizers once they exist (kept as ``optimizers``, as Lightning's strategy keeps them)."""
        self.optimizers = list(optimizers)

    def on_failure(self, exc: BaseException, where: str, global_step: int = 0) -> BaseException | None:
        """Called when the run raised on this rank at ``where`` (its epoch, step and batch), after
        ``global_step`` optimizer steps; may return a clearer error to raise instead."""
        return None

    def teardown(self) -> None:
        """Leave the process group (also called when the run raised)."""

    def overrides(self, name: str) -> bool:
        """Whether this strategy's class replaces `Strategy`'s method ``name``: the loop calls a
        step method that does nothing here (``no_sync``, ``after_backward_window``...) only then."""
        return getattr(type(self), name) is not getattr(Strategy, name)

    # -- the training step --------------------------------------------------------------------
    def training_step(self, module: Any, *args: Any) -> Any:
        """Run the module's ``training_step(batch[, batch_idx])`` through the model wrapper, if there is one."""
        return module.training_step(*args)

    def manual_training_step(self, module: Any, *args: Any) -> Any:
        """``training_step`` under manual optimization, where `sync_gradients` syncs the gradients."""
        return self.training_step(module, *args)

    def sync_gradients(self) -> None:
        """Average the module's gradients over all ranks now (after a ``manual_backward``), unless
        inside `block_backward_sync`."""

    @contextlib.contextmanager
    def block_backward_sync(self) -> Iterator[None]:
        """Manual optimization: ``manual_backward`` inside does not sync gradients (Lightning's name).

        The first synced backward after it averages the accumulated sum, which is linear: N micro
        batches accumulated this way give the gradient of their whole batch.
        """
        self._backward_sync_blocked += 1
        try:
            yield
        finally:
            self._backward_sync_blocked -= 1

    @property
    def backward_sync_blocked(self) -> bool:
        """Whether a `block_backward_sync` context is open."""
        return self._backward_sync_blocked > 0

    def no_sync(self, sync: bool) -> ContextManager[Any]:
        """Context for a micro batch's forward and backward; ``sync=False`` skips the gradient sync."""
        return NO_CONTEXT

    def after_backward_window(self) -> None:
        """Called once after the last backward of a window, before unscaling and clipping."""

    def agree_on_batch_count(self, num_batches: int | None) -> tuple[int | None, bool]:
        """The training batches per epoch every rank will run, and whether ranks must agree
        batch by batch (when some loader has no length). One process: its own count."""
        return num_batches, False

    def process_dataloader(self, dataloader: Any, stage: str) -> Any:
        """Adapt a DataLoader to this strategy (e.g. shard it across ranks); a loader that shards
        itself (a `ShardingLoader`, e.g. a `DALILoader`) gets this rank's shard (``shard_id =
        global rank``, ``num_shards = world size``).

        A training DataLoader gets a `GlobalBatchSampler` on any number of ranks, one included
        (unless ``use_distributed_sampler=False``): the epoch's order and its optimizer steps are
        the same whatever the world size (trainer/data/global_batch_sampler.py)."""
        if isinstance(dataloader, ShardingLoader):
            return dataloader.sharded(self.global_rank, self.world_size, training=stage == "fit")
        if stage == "fit" and self.use_distributed_sampler:
            lightning_kwargs = getattr(self, "distributed_sampler_kwargs", None)
            if lightning_kwargs is not None:
                # a Lightning strategy subclass naming its sampler's arguments (Ray Train's
                # RayDDPStrategy) gets Lightning's DistributedSampler: its order, padding included
                return lightning_distributed(dataloader, stage, **{"seed": global_seed(), **lightning_kwargs})
            if self.world_size > 1 and lightning_rules():
                # under the runner several ranks train on Lightning's shares, so they give Lightning's numbers
                return self.lightning_share(dataloader, stage)
            return distribute_dataloader(
                dataloader, num_replicas=self.world_size, rank=self.global_rank, seed=global_seed(),
                share_seed=self.broadcast if self.world_size > 1 else None,
            )
        return dataloader

    def lightning_share(self, dataloader: Any, stage: str) -> Any:
        """``dataloader`` with this rank's share in ``stage`` as Lightning's DDP gives it (under the runner)."""
        return lightning_distributed(dataloader, stage, num_replicas=self.world_size, rank=self.global_rank, seed=global_seed())

    def before_evaluation(self) -> None:
        """Called before an evaluation run's first step (validation inside fit too)."""

    def on_epoch_start(self, dataloader: Any, epoch: int) -> None:
        """Reseed per-epoch shuffling (``set_epoch``) before an epoch's first batch."""
        set_epoch(dataloader, epoch)

    @property
    def in_group(self) -> bool:
        """Whether collectives can run now (a distributed strategy's group exists only during a run)."""
        return True

    # -- checkpoints ------------------------------------------------------------------------------
    def module_state(self, module: nn.Module) -> dict[str, Any]:
        """The module's state for a checkpoint (this rank's shards under a sharding strategy)."""
        return module.state_dict()

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """An optimizer's state for a checkpoint."""
        return optimizer.state_dict()

    def load_module_state(self, module: nn.Module, state: Mapping[str, Any]) -> None:
        """Load a checkpoint's module state (as `module_state` gave it) into ``module``."""
        module.load_state_dict(state)

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
        """Load a checkpoint's optimizer state (as `optimizer_state` gave it) into ``optimizer``."""
        # torch takes a dict (a ShardedState is one: kept as it is)
        optimizer.load_state_dict(state if isinstance(state, dict) else dict(state))

    def write_checkpoint(self, checkpoint: dict[str, Any], path: str, alone: bool = False) -> None:
        """Write ``checkpoint`` (every rank calls it) as one file that global rank 0 writes atomically
        (or through `checkpoint_io`, which then decides how).

        ``alone=True``: only this rank calls it (a failing run): no collective.
        """
        if self.is_global_zero:
            if self.checkpoint_io is None:
                atomic_save(checkpoint, path)
            else:
                self.checkpoint_io.save_checkpoint(checkpoint, path)
        if not alone:
            self.barrier("save_checkpoint")

    def read_checkpoint(self, path: str, weights_only: bool = True) -> dict[str, Any]:
        """The checkpoint at ``path`` on the CPU: a file, or a sharded directory read whole (or what
        `checkpoint_io` loads)."""
        if self.checkpoint_io is not None:
            return self.checkpoint_io.load_checkpoint(path, weights_only=weights_only)
        return load_full(path, weights_only)

    def remove_checkpoint(self, path: str) -> None:
        """Delete the checkpoint at ``path`` (global rank 0; through `checkpoint_io` when there is one)."""
        if not self.is_global_zero:
            return
        if self.checkpoint_io is None:
            storage.remove(path)
        else:
            self.checkpoint_io.remove_checkpoint(path)

    def wait_for_checkpoint(self) -> None:
        """Block until a checkpoint being written in the background is complete (none here)."""

    # -- collectives (identities for one process) ---------------------------------------------
    def reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        """Reduce ``tensor`` over all ranks with ``op`` in mean/sum/max/min."""
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Stack ``tensor`` from every rank into shape ``[W, *tensor.shape]``."""
        return tensor.unsqueeze(0)

    def all_gather_object(self, obj: T) -> list[T]:
        """Every rank's picklable ``obj``, in rank order."""
        return [obj]

    def broadcast(self, obj: T, src: int = 0) -> T:
        """Every rank gets rank ``src``'s ``obj`` (any picklable object)."""
        return obj

    def is_restart(self) -> bool:
        """Whether this run is a restart of the job (it resumes from its last checkpoint then)."""
        return self.placement.restart_count > 0

    def steps_reached_before(self, world_size: int) -> int | None:
        """On a restart: the most optimizer steps the ``world_size`` ranks before it had done
        when they ended, or None when not known (one process keeps no such note)."""
        return None

    def barrier(self, name: str | None = None) -> None:
        """Wait until every rank gets here."""

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """Agree on a boolean: with ``all=True`` every rank must say True, else any rank."""
        return decision


class SingleDeviceStrategy(Strategy):
    """One process on one device."""

    name = "single_device"

    def setup_environment(self) -> None:
        """Pin the device; under an elastic agent, join the job's store as a group's rank would
        (`trainer.distributed.rendezvous.join_job_alone`): a node that joins later continues this run."""
        super().setup_environment()
        if os.environ.get("TORCHELASTIC_RUN_ID"):
            from trainer.distributed.rendezvous import join_job_alone

            join_job_alone(DEFAULT_TIMEOUT)

    def is_restart(self) -> bool:
        """A restart count above 0, or an earlier process of rank 0 in the job's store."""
        from trainer.distributed.rendezvous import is_restart as rejoined_job

        return super().is_restart() or rejoined_job()

    def on_failure(self, exc: BaseException, where: str, global_step: int = 0) -> BaseException | None:
        """Keep the steps done for the restart's report, as a group's rank does."""
        from trainer.distributed.job_store import note_reached

        note_reached(0, global_step)
        return None


def _accelerator_name(accelerator: str | Accelerator | None) -> str | None:
    if accelerator is None or isinstance(accelerator, str):
        return accelerator
    if isinstance(accelerator, Accelerator):
        return accelerator.kind
    raise TypeError(f"accelerator must be a str such as 'cpu' or 'gpu', or None; got {accelerator!r}")
