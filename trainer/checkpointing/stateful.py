"""The objects a checkpoint saves under keys of their own: each serializes itself.

`stateful_objects` is the registry the connector walks, in restore order, as torchtitan's and
Accelerate's checkpointers walk theirs: a checkpoint holds each object's ``state_dict()`` under
its key, and restoring gives each object its entry back. What needs more than that stays with
the connector: the module's weights (its hook follows them), the DataModule (restored before the
loaders are made), the fit's position and every rank's random state.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence

if TYPE_CHECKING:
    from torch.optim import Optimizer

    from trainer.contracts.internals import TrainerInternals as Trainer

OPTIMIZER_STATES = "optimizer_states"


class Stateful(Protocol):
    """What the registry holds: an object that saves and restores its own state."""

    def state_dict(self) -> Any: ...
    def load_state_dict(self, state: Any) -> None: ...


class _Callbacks:
    """Every callback's state, under its ``state_key``."""

    def __init__(self, callbacks: Sequence[Any]) -> None:
        self.callbacks = callbacks

    def state_dict(self) -> dict[str, Any]:
        return {cb.state_key: cb.state_dict() for cb in self.callbacks}

    def load_state_dict(self, states: dict[str, Any]) -> None:
        for cb in self.callbacks:
            if cb.state_key in states:
                cb.load_state_dict(states[cb.state_key])


class _Optimizers:
    """Each optimizer's state, got and loaded through the strategy (FSDP shards it)."""

    def __init__(self, strategy: Any, optimizers: Sequence[Optimizer]) -> None:
        self.strategy, self.optimizers = strategy, optimizers

    def state_dict(self) -> list[Any]:
        return [self.strategy.optimizer_state(opt) for opt in self.optimizers]

    def load_state_dict(self, states: list[Any]) -> None:
        for opt, state in zip(self.optimizers, states):
            self.strategy.load_optimizer_state(opt, state)


class _Schedulers:
    """Each learning-rate scheduler's state, in the order of ``configure_optimizers``."""

    def __init__(self, configs: Sequence[Any]) -> None:
        self.configs = configs

    def state_dict(self) -> list[dict[str, Any]]:
        return [cfg.scheduler.state_dict() for cfg in self.configs]

    def load_state_dict(self, states: list[dict[str, Any]]) -> None:
        for cfg, state in zip(self.configs, states):
            cfg.scheduler.load_state_dict(state)


def stateful_objects(trainer: Trainer) -> dict[str, Stateful]:
    """The run's stateful objects by checkpoint key, in the order they are restored."""
    return {
        "callbacks": _Callbacks(trainer.callbacks),
        OPTIMIZER_STATES: _Optimizers(trainer.strategy, trainer.optimizers),
        "lr_schedulers": _Schedulers(trainer.lr_scheduler_configs),
        "precision": trainer.precision_plugin,
    }


def save_states(registry: dict[str, Stateful]) -> dict[str, Any]:
    """Each object's state under its key."""
    return {key: owner.state_dict() for key, owner in registry.items()}


def load_states(registry: dict[str, Stateful], checkpoint: dict[str, Any]) -> None:
    """Give each object its saved state, in the registry's order (a key the file lacks: nothing)."""
    for key, owner in registry.items():
        if key in checkpoint:
            owner.load_state_dict(checkpoint[key])
