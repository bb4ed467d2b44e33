"""Lightning's ``_AcceleratorConnector``, as the libraries built on the Trainer use it.

``trainer._accelerator_connector`` (`trainer.lightning.attributes`) is a read-only view over the
Trainer's strategy (optuna-integration's ``PyTorchLightningPruningCallback`` reads its
``is_distributed`` when it is set up, to choose how trials report across processes). A library can
also build one from the Trainer's flags to resolve them as Lightning does, without a Trainer
(scvi-tools' ``parse_device_args``: ``_AcceleratorConnector(accelerator=..., devices=...)``, then
``_accelerator_flag`` and ``_devices_flag``).
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from trainer.strategies.process_group import ProcessGroupStrategy
from trainer.contracts.internals import StrategyInternals as Strategy


class AcceleratorConnector:
    """What Lightning's ``_AcceleratorConnector`` answers that integrations ask: of the Trainer's
    ``strategy``, or of the flags ``accelerator`` / ``devices`` / ``num_nodes`` resolved as Lightning does."""

    def __init__(self, strategy: Optional[Strategy] = None, *, accelerator: Any = "auto", devices: Any = "auto",
                 num_nodes: int = 1, **_other_flags: Any) -> None:
        self._strategy = strategy
        self._accelerator_flag = _resolved_accelerator(accelerator)
        self._devices_flag = _resolved_devices(self._accelerator_flag, devices)
        self._num_nodes_flag = num_nodes

    @property
    def is_distributed(self) -> bool:
        """Whether the run has a process group (DDP, FSDP and the like), as Lightning's answers."""
        if self._strategy is not None:
            return isinstance(self._strategy, ProcessGroupStrategy)
        count = len(self._devices_flag) if isinstance(self._devices_flag, list) else self._devices_flag
        return count * self._num_nodes_flag > 1


def _resolved_accelerator(accelerator: Any) -> str:
    # Lightning's accelerator objects name their kind (trainer.lightning.accelerators)
    flag = accelerator.lockstep_flag() if hasattr(accelerator, "lockstep_flag") else str(accelerator)
    if flag in ("auto", "gpu"):
        return "cuda" if torch.cuda.is_available() else "cpu" if flag == "auto" else _no_gpu()
    return flag


def _no_gpu() -> str:
    raise RuntimeError("No supported gpu backend found!")  # Lightning's words for accelerator='gpu' without one


def _resolved_devices(accelerator: str, devices: Any) -> Any:
    # Lightning's parse_devices: a count of processes on the CPU, a list of device indices on CUDA
    if accelerator != "cuda":
        return 1 if devices == "auto" else int(devices)
    if isinstance(devices, (list, tuple)):
        return [int(d) for d in devices]
    if isinstance(devices, str) and "," in devices:
        return [int(d) for d in devices.split(",") if d.strip()]
    count = torch.cuda.device_count() if devices in ("auto", -1, "-1") else int(devices)
    return list(range(count))


_AcceleratorConnector = AcceleratorConnector  # Lightning's name, for ``trainer.connectors.accelerator_connector``
