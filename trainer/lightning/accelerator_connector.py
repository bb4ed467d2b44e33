"""``trainer._accelerator_connector`` (`trainer.lightning.attributes`): the one private Trainer
attribute of Lightning's that published integrations read, as a read-only view (optuna-integration's
``PyTorchLightningPruningCallback`` reads ``trainer._accelerator_connector.is_distributed`` when it
is set up, to choose how trials report across processes).
"""
from __future__ import annotations

from trainer.strategies.process_group import ProcessGroupStrategy
from trainer.contracts.internals import StrategyInternals as Strategy


class AcceleratorConnector:
    """What Lightning's ``_AcceleratorConnector`` answers that integrations ask, read from the strategy."""

    def __init__(self, strategy: Strategy) -> None:
        self._strategy = strategy

    @property
    def is_distributed(self) -> bool:
        """Whether the strategy runs a process group (DDP, FSDP and the like), as Lightning's answers."""
        return isinstance(self._strategy, ProcessGroupStrategy)


_AcceleratorConnector = AcceleratorConnector  # Lightning's name, for ``trainer.connectors.accelerator_connector``
