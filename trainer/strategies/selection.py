"""Turning the Trainer's ``strategy`` / ``devices`` / ``num_nodes`` arguments into a Strategy.

Under a launcher (torchrun, SLURM ``srun``, our own launchers) the launcher's world is adopted;
an explicit ``devices`` / ``num_nodes`` that disagrees with it is an error, because peers that
silently ignore it train W independent copies of the model. Without a launcher and with more
than one process requested, the strategy gets a launcher that starts the workers.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from trainer.accelerators.accelerator import Accelerator
from trainer.contracts.config import DistributedConfig
from trainer.distributed.cluster_environment import detect_cluster_environment
from trainer.strategies.strategy import SingleDeviceStrategy, Strategy, lightning_rules

if TYPE_CHECKING:
    from trainer.strategies.process_group import ProcessGroupStrategy


def select_strategy(distributed: DistributedConfig, accelerator: Accelerator, precision: str = "32-true") -> Strategy:
    """The strategy for this run (``distributed``, as its section checked it), connected to
    ``accelerator`` and placed in the job."""
    strategy, per_node, num_nodes = distributed.strategy, distributed.devices, distributed.num_nodes
    if not isinstance(strategy, (Strategy, str)):
        raise TypeError(f"strategy must be a str or a Strategy instance, got {strategy!r}")
    cluster = detect_cluster_environment()
    if cluster.is_distributed and _alone_as_lightning(strategy, per_node, num_nodes):
        cluster = detect_cluster_environment({})  # this process only: no launcher's world to join
    options: dict[str, Any] = {
        "sync_batchnorm": distributed.sync_batchnorm,
        "use_distributed_sampler": distributed.use_distributed_sampler,
        "precision": precision,
    }
    if cluster.is_distributed:
        joined = _join_launched_job(strategy, per_node, num_nodes, accelerator, cluster)
        joined.connect(accelerator, cluster, **options)
        return joined
    if per_node == "auto":
        per_node = accelerator.device_count() if accelerator.kind == "cuda" else 1
    assert isinstance(per_node, int)  # parse_devices: "auto" or an int
    if accelerator.kind == "cuda" and per_node > accelerator.device_count():
        raise ValueError(
            f"devices={per_node} but this machine has {accelerator.device_count()} CUDA device(s)."
        )
    world = per_node * num_nodes
    if world == 1:
        # One process needs no process group, whatever strategy was named.
        single = strategy if isinstance(strategy, Strategy) else SingleDeviceStrategy()
        single.connect(accelerator, cluster, **options)
        return single
    chosen = _distributed_strategy(strategy)
    if chosen is None:
        name = strategy.name if isinstance(strategy, Strategy) else strategy
        raise ValueError(f"devices={per_node}, num_nodes={num_nodes} needs a distributed strategy, got {name!r}.")
    # This process stands for rank 0 of the job its launcher starts; every worker connects again
    # with its own place in it.
    job = dataclasses.replace(cluster, world_size=world, local_world_size=per_node, num_nodes=num_nodes)
    chosen.connect(accelerator, job, launcher=_launcher(strategy, per_node, num_nodes), **options)
    return chosen


def _distributed_strategy(strategy: str | Strategy) -> ProcessGroupStrategy | None:
    from trainer.strategies.process_group import ProcessGroupStrategy

    chosen = strategy if isinstance(strategy, Strategy) else _make(strategy)
    return chosen if isinstance(chosen, ProcessGroupStrategy) else None


def _join_launched_job(
    strategy: str | Strategy, per_node: int | str, num_nodes: int, accelerator: Accelerator, cluster: Any
) -> ProcessGroupStrategy:
    _check_matches_launcher(per_node, num_nodes, cluster)
    if accelerator.kind == "cuda" and cluster.local_world_size > accelerator.device_count():
        # Otherwise rank >= device_count fails deep in torch.cuda.set_device ("invalid device ordinal").
        raise ValueError(
            f"The launcher ({cluster.source}) started {cluster.local_world_size} processes on this "
            f"node but it has {accelerator.device_count()} CUDA device(s): one process per device. "
            "Launch fewer processes, or pass accelerator='cpu'."
        )
    chosen = _distributed_strategy(strategy)
    if chosen is None:
        raise ValueError(
            f"This process was launched as rank {cluster.global_rank} of {cluster.world_size} "
            f"({cluster.source}), but strategy={strategy!r} runs a single process. Use "
            "strategy='ddp' (or 'auto'), or launch one process."
        )
    return chosen


def _launcher(strategy: str | Strategy, per_node: int, num_nodes: int) -> Any:
    from trainer.launch.launcher import ElasticLauncher, SpawnLauncher

    if strategy == "ddp_spawn":
        if num_nodes > 1:
            raise ValueError("strategy='ddp_spawn' runs on one node; use torchrun or srun for several nodes.")
        return SpawnLauncher(per_node)
    return ElasticLauncher(per_node, num_nodes)


def _make(name: str) -> Strategy:
    from trainer.strategies.allreduce import AllReduceStrategy
    from trainer.strategies.ddp import DDPStrategy

    if name == "allreduce":
        return AllReduceStrategy()
    if name == "fsdp":
        from trainer.strategies.fsdp import FSDPStrategy

        return FSDPStrategy()
    if name == "single_device":
        return SingleDeviceStrategy()
    if name.startswith("ddp_find_unused_parameters_"):
        return DDPStrategy(find_unused_parameters=name.endswith("_true"))
    return DDPStrategy()  # "auto", "ddp", "ddp_spawn"


def _alone_as_lightning(strategy: str | Strategy, per_node: int | str, num_nodes: int) -> bool:
    # Lightning's reading (under the runner): an explicit devices=1 in a launched job is this process alone;
    # a library that fits on every rank and then builds Trainer(devices=1) to predict relies on it
    # (pytorch-forecasting's predict). Outside the runner it stays an error.
    single = strategy in ("auto", "single_device") or isinstance(strategy, SingleDeviceStrategy)
    return lightning_rules() and per_node == 1 and num_nodes == 1 and single


def _check_matches_launcher(per_node: int | str, num_nodes: int, cluster: Any) -> None:
    where = f"the launcher ({cluster.source}) started {cluster.world_size} processes"
    if per_node != "auto" and per_node != cluster.local_world_size:
        raise ValueError(
            f"Trainer(devices={per_node}) but {where}, {cluster.local_world_size} on this node "
            f"(LOCAL_WORLD_SIZE). Use devices='auto' to adopt the launcher's world, or launch "
            f"{per_node} processes per node."
        )
    if num_nodes != 1 and num_nodes != cluster.num_nodes:
        raise ValueError(
            f"Trainer(num_nodes={num_nodes}) but {where} on {cluster.num_nodes} node(s) "
            "(WORLD_SIZE / LOCAL_WORLD_SIZE). Leave num_nodes at its default to adopt the launcher's world."
        )
