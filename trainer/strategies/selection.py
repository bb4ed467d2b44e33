"""Turning the Trainer's ``strategy`` / ``devices`` / ``num_nodes`` arguments into a Strategy.

Under a launcher (torchrun, SLURM ``srun``, our own launchers) the launcher's world is adopted;
an explicit ``devices`` / ``num_nodes`` that disagrees with it is an error, because peers that
silently ignore it train W independent copies of the model. Without a launcher and with more
than one process requested, the strategy gets a launcher that starts the workers.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from trainer.accelerators.accelerator import Accelerator
from trainer.contracts.arguments import check_int
from trainer.distributed.cluster_environment import detect_cluster_environment
from trainer.strategies.strategy import SingleDeviceStrategy, Strategy

STRATEGY_NAMES = (
    "auto",
    "single_device",
    "ddp",
    "ddp_spawn",
    "allreduce",
    "fsdp",
    # Lightning's names for DDP with DDP's own find_unused_parameters (a ported project keeps them)
    "ddp_find_unused_parameters_true",
    "ddp_find_unused_parameters_false",
)


def parse_devices(devices: Any) -> int | str:
    """``"auto"`` or a positive process count per node."""
    if isinstance(devices, bool) or not isinstance(devices, (int, str)):
        raise TypeError(f"devices must be 'auto' or an int >= 1 (processes per node), got {devices!r}")
    if devices == "auto":
        return "auto"
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    if not isinstance(devices, int) or devices < 1:
        raise ValueError(f"devices must be 'auto' or an int >= 1 (processes per node), got {devices!r}")
    return devices


def select_strategy(
    strategy: str | Strategy,
    *,
    accelerator: Accelerator,
    devices: Any,
    num_nodes: int,
    sync_batchnorm: bool,
    use_distributed_sampler: bool,
    precision: str = "32-true",
) -> Strategy:
    """The strategy for this run, connected to ``accelerator`` and placed in the job."""
    from trainer.strategies.process_group import ProcessGroupStrategy

    per_node = parse_devices(devices)
    check_int("num_nodes", num_nodes, minimum=1)
    if not isinstance(strategy, (Strategy, str)):
        raise TypeError(f"strategy must be a str or a Strategy instance, got {strategy!r}")
    if not isinstance(strategy, Strategy) and strategy not in STRATEGY_NAMES:
        raise ValueError(
            f"Unknown strategy {strategy!r}. Use one of {', '.join(map(repr, STRATEGY_NAMES))} or a Strategy."
        )
    cluster = detect_cluster_environment()
    options = {"sync_batchnorm": sync_batchnorm, "use_distributed_sampler": use_distributed_sampler, "precision": precision}
    if cluster.is_distributed:
        _check_matches_launcher(per_node, num_nodes, cluster)
        if accelerator.kind == "cuda" and cluster.local_world_size > accelerator.device_count():
            # Otherwise rank >= device_count fails deep in torch.cuda.set_device ("invalid device ordinal").
            raise ValueError(
                f"The launcher ({cluster.source}) started {cluster.local_world_size} processes on this "
                f"node but it has {accelerator.device_count()} CUDA device(s): one process per device. "
                "Launch fewer processes, or pass accelerator='cpu'."
            )
        chosen = strategy if isinstance(strategy, Strategy) else _make(strategy)
        if not isinstance(chosen, ProcessGroupStrategy):
            raise ValueError(
                f"This process was launched as rank {cluster.global_rank} of {cluster.world_size} "
                f"({cluster.source}), but strategy={strategy!r} runs a single process. Use "
                "strategy='ddp' (or 'auto'), or launch one process."
            )
        chosen.connect(accelerator, cluster, **options)
        return chosen

    if per_node == "auto":
        per_node = accelerator.device_count() if accelerator.kind == "cuda" else 1
    if accelerator.kind == "cuda" and per_node > accelerator.device_count():
        raise ValueError(
            f"devices={per_node} but this machine has {accelerator.device_count()} CUDA device(s)."
        )
    world = per_node * num_nodes
    if world == 1:
        # One process needs no process group, whatever strategy was named.
        chosen = strategy if isinstance(strategy, Strategy) else SingleDeviceStrategy()
        chosen.connect(accelerator, cluster, **options)
        return chosen
    chosen = strategy if isinstance(strategy, Strategy) else _make(strategy)
    if not isinstance(chosen, ProcessGroupStrategy):
        raise ValueError(f"devices={per_node}, num_nodes={num_nodes} needs a distributed strategy, got {chosen.name!r}.")
    from trainer.launch.launcher import ElasticLauncher, SpawnLauncher

    if strategy == "ddp_spawn":
        if num_nodes > 1:
            raise ValueError("strategy='ddp_spawn' runs on one node; use torchrun or srun for several nodes.")
        launcher: Any = SpawnLauncher(per_node)
    else:
        launcher = ElasticLauncher(per_node, num_nodes)
    # This process stands for rank 0 of the job its launcher starts; every worker connects again
    # with its own place in it.
    job = dataclasses.replace(cluster, world_size=world, local_world_size=per_node, num_nodes=num_nodes)
    chosen.connect(accelerator, job, launcher=launcher, **options)
    return chosen


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
