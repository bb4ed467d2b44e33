"""The type names of Lightning Fabric's ``lightning.fabric.utilities.types``, which libraries built
on Lightning import for their annotations (pytorch-forecasting's base model does).

Under ``python -m trainer.as_lightning`` that module resolves here; the rest of Fabric is not
provided (its names raise an error pointing to the Trainer). Same names, same meaning; written
for Lockstep.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Protocol, TypeVar, Union, runtime_checkable

import torch

__all__ = ["UntypedStorage", "Optimizable", "Steppable", "CollectibleGroup"]

UntypedStorage = torch.UntypedStorage
_PATH = Union[str, Path]
_DEVICE = Union[torch.device, str, int]
# what torch.load's ``map_location`` takes
_MAP_LOCATION_TYPE = Optional[
    Union[_DEVICE, Callable[[UntypedStorage, str], Optional[UntypedStorage]], Dict[_DEVICE, _DEVICE]]
]
_PARAMETERS = Iterator[torch.nn.Parameter]
_DictKey = TypeVar("_DictKey")


@runtime_checkable
class _Stateful(Protocol[_DictKey]):
    """An object with ``state_dict`` / ``load_state_dict`` (checked with ``isinstance``)."""

    def state_dict(self) -> dict[_DictKey, Any]: ...

    def load_state_dict(self, state_dict: dict[_DictKey, Any]) -> None: ...


@runtime_checkable
class CollectibleGroup(Protocol):
    """A process group: its size and this process's rank in it."""

    def size(self) -> int: ...

    def rank(self) -> int: ...


@runtime_checkable
class Steppable(Protocol):
    """Anything with an optimizer's ``step(closure=None)``."""

    def step(self, closure: Optional[Callable[[], float]] = ...) -> Optional[float]: ...


@runtime_checkable
class Optimizable(Steppable, Protocol):
    """An optimizer, structurally: ``param_groups``, ``defaults``, ``state`` and its state dict."""

    param_groups: list[dict[Any, Any]]
    defaults: dict[Any, Any]
    state: Any

    def state_dict(self) -> dict[str, dict[Any, Any]]: ...

    def load_state_dict(self, state_dict: dict[str, dict[Any, Any]]) -> None: ...
