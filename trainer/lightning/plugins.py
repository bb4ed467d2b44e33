"""``lightning.pytorch.plugins`` under ``python -m trainer.as_lightning``: Lightning's checkpoint I/O
(`CheckpointIO`, `TorchCheckpointIO`), which a library subclasses and passes as
``Trainer(plugins=[...])``; the strategy then writes, reads and removes every checkpoint through it
(`checkpoint_io_plugin`; `connect_plugins` gives the Trainer's strategy its plugins). Lightning's
other plugins (precision, environments, layer sync) are not
provided but for the cluster environments (``lightning.pytorch.plugins.environments``,
`trainer.lightning.environments`): ``precision=...`` and a Strategy object do their work.
"""
from __future__ import annotations

from typing import Any

from trainer.contracts.protocols import CheckpointIOPlugin
from trainer.lightning import environments
from trainer.lightning.fabric_io import CheckpointIO, TorchCheckpointIO
from trainer.lightning.unsupported import NOT_PROVIDED_NAMES, is_checkpoint_io, not_provided, refused_class
from trainer.strategies.strategy import Strategy

__all__ = ["CheckpointIO", "Precision", "TorchCheckpointIO", "environments"]

AsyncCheckpointIO = refused_class(
    __name__, "AsyncCheckpointIO", "a CheckpointIO subclass that writes in the background, or FSDPStrategy(async_checkpoint=True)"
)
# Lightning's (and Fabric's) precision plugin base: libraries name it in signatures (anomalib's
# SingleXPUStrategy); the Trainer's ``precision=...`` does its work
Precision = refused_class(__name__, "Precision", "Trainer(precision=...) ('32-true', 'bf16-mixed', ...)")
XLACheckpointIO = refused_class(__name__, "XLACheckpointIO", "accelerator='cpu' or 'cuda' (TPUs are not supported)")


def checkpoint_io_plugin(plugins: Any, strategy: Strategy) -> CheckpointIOPlugin | None:
    """The library's own checkpoint I/O among ``Trainer(plugins=...)`` (None if there is none); the
    other plugins were refused before (`trainer.lightning.unsupported.check_trainer_supported`)."""
    given = [p for p in (plugins if isinstance(plugins, (list, tuple)) else [plugins]) if is_checkpoint_io(p)]
    if len(given) > 1:
        raise ValueError(
            f"Trainer(plugins=...) holds {len(given)} checkpoint I/O plugins "
            f"({', '.join(type(p).__name__ for p in given)}); give one, as Lightning requires."
        )
    if given and type(strategy).write_checkpoint is not Strategy.write_checkpoint:
        raise NotImplementedError(
            f"Trainer(plugins=[{type(given[0]).__name__}()]) with {type(strategy).__name__}: this strategy "
            "writes its own sharded checkpoints, so a checkpoint I/O plugin would not be used; drop the plugin "
            "or use strategy='ddp' (docs/migration.md)."
        )
    return given[0] if given else None


def connect_plugins(strategy: Strategy, plugins: Any) -> None:
    """Give ``strategy`` what ``Trainer(plugins=...)`` holds for it: a library's own checkpoint I/O
    (every checkpoint file then goes through it) and a cluster-environment plugin."""
    strategy.checkpoint_io = checkpoint_io_plugin(plugins, strategy)
    environments.connect_environment_plugin(strategy, plugins)


def __getattr__(name: str) -> object:
    raise not_provided("pytorch_lightning.plugins", name, NOT_PROVIDED_NAMES["plugins"])
