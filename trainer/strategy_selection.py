"""Turning the Trainer's ``strategy`` / ``devices`` / ``num_nodes`` arguments into a Strategy."""
from __future__ import annotations

import os
from typing import Any

from trainer.accelerator import Accelerator
from trainer.strategy import SingleDeviceStrategy, Strategy

STRATEGY_NAMES = ("auto", "single_device", "ddp", "ddp_spawn", "allreduce")


def parse_devices(devices: Any) -> int | str:
    """``"auto"`` or a positive process count per node."""
    if devices == "auto":
        return "auto"
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
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
) -> Strategy:
    """The strategy for this run, connected to ``accelerator``."""
    per_node = parse_devices(devices)
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise ValueError(f"num_nodes must be an int >= 1, got {num_nodes!r}")
    if isinstance(strategy, Strategy):
        strategy.connect(accelerator)
        return strategy
    if strategy not in STRATEGY_NAMES:
        raise ValueError(f"Unknown strategy {strategy!r}. Use one of {', '.join(map(repr, STRATEGY_NAMES))} or a Strategy.")
    launched_world = int(os.environ.get("WORLD_SIZE", "1"))
    wants_many = per_node != "auto" and per_node > 1
    if wants_many or num_nodes > 1 or launched_world > 1 or strategy in ("ddp", "ddp_spawn", "allreduce"):
        raise NotImplementedError(
            "Multi-process training (devices > 1, num_nodes > 1, a launcher's WORLD_SIZE > 1, or "
            f"strategy={strategy!r}) is the distributed data parallel feature, not built yet."
        )
    chosen = SingleDeviceStrategy()
    chosen.connect(accelerator)
    return chosen
