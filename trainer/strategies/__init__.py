"""Strategies: how the module runs across processes (single device, DDP, all-reduce) and SyncBatchNorm.

Also ``lightning.pytorch.strategies`` under Lockstep's name (``pl.strategies.DDPStrategy``); the
classes are imported on first use, so importing one strategy's module does not import the others.
"""
from __future__ import annotations

import importlib
from typing import Any

from trainer.contracts.missing_names import missing_name

_PUBLIC = {
    "Strategy": "trainer.strategies.strategy",
    "SingleDeviceStrategy": "trainer.strategies.strategy",
    "DDPStrategy": "trainer.strategies.ddp",
    "FSDPStrategy": "trainer.strategies.fsdp",
    "AllReduceStrategy": "trainer.strategies.allreduce",
    "ProcessGroupStrategy": "trainer.strategies.process_group",
    "ParallelStrategy": "trainer.strategies.process_group",  # Lightning's name for the multi-process base
}
__all__ = list(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise missing_name(__name__, name)
    return getattr(importlib.import_module(_PUBLIC[name]), "ProcessGroupStrategy" if name == "ParallelStrategy" else name)

