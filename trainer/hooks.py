"""Calling module and callback hooks in the documented order.

For every hook the module's method runs first, then each callback's in the order the callbacks
were given, so callbacks see what the module did (and logged). Only overridden hooks are called:
the table of callables is built once per run, so an unused hook costs one dict lookup.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from callbacks.callback import Callback

if TYPE_CHECKING:
    from trainer.module import TrainModule
    from trainer.trainer import Trainer

CALLBACK_HOOKS = tuple(
    name for name in vars(Callback) if name.startswith("on_") or name in ("setup", "teardown")
)


class HookDispatcher:
    """Calls ``hook(*args)`` on the module, then ``hook(trainer, module, *args)`` on callbacks."""

    def __init__(self, trainer: Trainer, module: TrainModule, callbacks: list[Callback]) -> None:
        from trainer.module import TrainModule

        self._module: dict[str, list[Callable[..., Any]]] = {}
        self._callbacks: dict[str, list[Callable[..., Any]]] = {}
        self._all: dict[str, list[Callable[..., Any]]] = {}
        for name in CALLBACK_HOOKS:
            base = getattr(TrainModule, name, None)
            own = getattr(type(module), name, None)
            self._module[name] = [getattr(module, name)] if base is not None and own is not base else []
            self._callbacks[name] = [
                _with_context(getattr(cb, name), trainer, module)
                for cb in callbacks
                if getattr(type(cb), name) is not getattr(Callback, name)
            ]
            self._all[name] = self._module[name] + self._callbacks[name]

    def call(self, name: str, *args: Any) -> None:
        """Run hook ``name`` on the module, then on every callback that overrides it."""
        for fn in self._all[name]:
            fn(*args)

    def call_module(self, name: str, *args: Any) -> None:
        """Run only the module's hook (for hooks split around metric aggregation)."""
        for fn in self._module[name]:
            fn(*args)

    def call_callbacks(self, name: str, *args: Any) -> None:
        """Run only the callbacks' hooks."""
        for fn in self._callbacks[name]:
            fn(*args)


def _with_context(fn: Callable[..., Any], trainer: Trainer, module: TrainModule) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        return fn(trainer, module, *args)

    return call
