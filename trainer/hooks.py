"""Calling module and callback hooks in the documented order (Lightning 2.x's).

For every hook the callbacks run first, in the order the callbacks were given, then the module's
method: a module hook sees what callbacks changed (e.g. ``on_train_epoch_start`` sees the
accumulation `GradientAccumulationScheduler` set). ``on_train_epoch_end`` is split by the loop:
callbacks that monitor metrics (checkpointing, early stopping) run after the module, so they can
monitor what the module logs there. Only overridden hooks are called: the table of callables is
built once per run, so an unused hook costs one dict lookup.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Sequence

from trainer.contracts.hook_names import CALLBACK_HOOKS
from trainer.contracts.hook_table import CALLBACK, HOOKS, HOOKS_BY_NAME, MODULE

if TYPE_CHECKING:
    from trainer.contracts.protocols import CallbackView
    from trainer.module import TrainModule
    from trainer.contracts.internals import ModuleInternals, TrainerInternals as Trainer

__all__ = ["CALLBACK_HOOKS", "HookDispatcher"]

# The module's hooks that callbacks do not have (Lightning's), from the hook table: each is looked
# up once per run (`module_override`) and called only when the module overrides it, or its default
# runs inline.
MODULE_ONLY_HOOKS = tuple(h.name for h in HOOKS if MODULE in h.implementers and CALLBACK not in h.implementers)


class HookDispatcher:
    """Calls ``hook(trainer, module, *args)`` on callbacks, then ``hook(*args)`` on the module.

    Without a module (``module=None``: before the first run) it calls nothing.
    """

    def __init__(
        self, trainer: Trainer, module: TrainModule | None, callbacks: Sequence[CallbackView], callback_base: type
    ) -> None:
        from trainer.module import TrainModule

        self._module: dict[str, list[Callable[..., Any]]] = {}
        self._callbacks: dict[str, list[Callable[..., Any]]] = {}
        self._by_role: dict[tuple[str, bool], list[Callable[..., Any]]] = {}
        self._all: dict[str, list[Callable[..., Any]]] = {}
        for name in CALLBACK_HOOKS:
            # a callback hook the module may not implement (``on_exception``, the sanity check's)
            # is never called on it, whatever it defines
            base = getattr(TrainModule, name) if MODULE in HOOKS_BY_NAME[name].implementers else None
            overridden = module is not None and base is not None and getattr(type(module), name) is not base
            self._module[name] = [_timed(trainer, "Module", module, name, getattr(module, name))] if overridden else []
            own_cbs = [
                cb
                for cb in callbacks
                if module is not None and getattr(type(cb), name) is not getattr(callback_base, name)
            ]
            self._callbacks[name] = [
                _timed(trainer, "Callback", cb, name, _with_context(getattr(cb, name), trainer, module))
                for cb in own_cbs
            ]
            for monitoring in (False, True):
                self._by_role[name, monitoring] = [
                    fn for cb, fn in zip(own_cbs, self._callbacks[name]) if cb.monitors_metrics == monitoring
                ]
            self._all[name] = self._callbacks[name] + self._module[name]

    def implemented(self, name: str) -> bool:
        """Whether a callback or the module implements hook ``name``."""
        return bool(self._all[name])

    def callables(self, name: str) -> list[Callable[..., Any]]:
        """What `call` runs for hook ``name``, in order: a hot path fetches it once per run and calls
        each itself, so a hook nobody overrides costs nothing per step."""
        return self._all[name]

    def call(self, name: str, *args: Any) -> None:
        """Run hook ``name`` on every callback that overrides it, then on the module."""
        for fn in self._all[name]:
            fn(*args)

    def call_module(self, name: str, *args: Any) -> None:
        """Run only the module's hook (for hooks split around metric aggregation)."""
        for fn in self._module[name]:
            fn(*args)

    def call_callbacks(self, name: str, *args: Any, monitoring: bool | None = None) -> None:
        """Run only the callbacks' hooks: all, or only those that do (not) monitor metrics."""
        for fn in self._callbacks[name] if monitoring is None else self._by_role[name, monitoring]:
            fn(*args)


def module_override(trainer: Trainer, module: ModuleInternals, name: str) -> Callable[..., Any] | None:
    """The module's ``name`` if its class overrides `TrainModule`'s (timed by the profiler), else None.

    Looked up once per run, so a hook left alone costs nothing per step.
    """
    from trainer.module import TrainModule

    if MODULE not in HOOKS_BY_NAME[name].implementers:  # a typo, or a hook missing from the table
        raise KeyError(f"{name!r} is not a module hook of trainer/contracts/hook_table.py")
    if getattr(type(module), name) is getattr(TrainModule, name):
        return None
    return _timed(trainer, "Module", module, name, getattr(module, name))


def takes_batch_idx(step: Callable[..., Any]) -> bool:
    """Whether a step method takes ``batch_idx`` after ``batch`` (Lightning's rule: a parameter of
    that name, ``*args``, or a second positional parameter); ``training_step(self, batch)`` does not."""
    import inspect

    step = getattr(step, "__wrapped__", step)
    try:
        params = list(inspect.signature(step).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable: pass it, as before
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return (
        any(p.name == "batch_idx" for p in params)
        or any(p.kind is p.VAR_POSITIONAL for p in params)
        or len(positional) >= 2
    )


def _with_context(fn: Callable[..., Any], trainer: Trainer, module: TrainModule | None) -> Callable[..., Any]:
    # a partial adds no Python frame to each call of a callback's hook
    return functools.partial(fn, trainer, module)


def _timed(trainer: Trainer, kind: str, owner: Any, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` timed by the Trainer's profiler as ``[Module]Name.hook`` / ``[Callback]Name.hook``."""
    if not trainer.profiler.active:
        return fn
    return trainer.profiler.wrap(f"[{kind}]{type(owner).__name__}.{name}", fn)
