"""Lightning's module tree under ``python -m trainer.as_lightning``: every module of
``lightning.pytorch`` / ``pytorch_lightning`` and ``lightning.fabric`` / ``lightning_fabric`` imports,
and every name Lightning has there resolves (`trainer.lightning.tree_index`, generated from
Lightning 2.6.6; private names included, as libraries import some).

The alias (`trainer.lightning.alias`) reads a name first from the Lockstep module the Lightning
package folds onto; where that lacks it, `lightning_name` looks for the same object under the
other places Lightning names it (``callbacks.early_stopping.rank_zero_warn`` is
``utilities.rank_zero_warn``), and where Lockstep has none, gives a stand-in of Lightning's kind
that imports and raises, naming what to use, only when used: a class to subclass and test with
``isinstance`` whose instances are refused, a function that refuses the call, a value that refuses
every use. Lightning's exception and warning classes stand in as plain subclasses of the same
built-in base (Lockstep never raises them), a module's logger is ``logging.getLogger`` of it, and a
class or function Lightning re-exports from ``lightning_utilities`` (the Lightning project's helper
package, which Lockstep does not need) is that object where it is installed.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import types
from typing import Any, Callable, NoReturn

from trainer.lightning.tree_index import SAME, TREE
from trainer.lightning.unsupported import NOT_PROVIDED_NAMES, NotProvidedError, refused_class

# Lightning's module name prefixes and the index's family of each
_FAMILIES = (
    ("lightning.pytorch", "pytorch"), ("pytorch_lightning", "pytorch"),
    ("lightning.fabric", "fabric"), ("lightning_fabric", "fabric"),
)
_PLACES: dict[str, list[str]] = {place: group for group in SAME for place in group}
_STAND_INS: dict[str, Any] = {}
# what a stand-in names when neither the name nor its package has an entry in NOT_PROVIDED_NAMES
_FABRIC_ALTERNATIVE = "the Trainer and its arguments (Lightning Fabric is not part of Lockstep)"
_DEFAULT_ALTERNATIVE = "the Trainer's arguments, hooks and callbacks (docs/migration.md, section 5)"


def index_key(module: str) -> str | None:
    """The index's key for Lightning's module ``module`` (``pytorch.callbacks``); None outside the tree."""
    for prefix, family in _FAMILIES:
        if module == prefix or module.startswith(prefix + "."):
            key = family + module[len(prefix):]
            return key if key in TREE else None
    return None


def is_tree_module(module: str) -> bool:
    """Whether ``module`` is one of the Lightning modules the tree mirrors."""
    return index_key(module) is not None


def lightning_name(module: str, name: str, folded: Callable[[str], types.ModuleType | None]) -> Any:
    """Lightning's public ``name`` of ``module``, as Lockstep provides it (see the module's docstring).

    ``folded(lightning_module)`` is the Lockstep module a Lightning module's names are read from
    (None: no such module). Raises `AttributeError` if ``name`` is not a public name of ``module``
    in Lightning 2.6.6.
    """
    key = index_key(module)
    kind = TREE[key].get(name) if key else None
    if key is None or kind is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    place = f"{key}:{name}"
    for other in _PLACES.get(place, []):
        value = _provided(other, folded)
        if value is not None:
            return value
    if kind == "logger":
        return logging.getLogger(module)
    if kind.startswith("from:"):  # lightning_utilities' own object (not Lightning, which is not imported)
        with contextlib.suppress(ImportError, AttributeError):
            return _imported(kind)
        kind = "function"
    home = _PLACES.get(place, [place])[0]  # one stand-in per object, whichever place names it
    if home not in _STAND_INS:
        _STAND_INS[home] = _stand_in(kind, name, _alternative(key, name))
    return _STAND_INS[home]


def _imported(kind: str) -> Any:
    _, module, qualname = kind.split(":")
    value: Any = importlib.import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def _provided(place: str, folded: Callable[[str], types.ModuleType | None]) -> Any:
    key, _, name = place.partition(":")
    family, _, rest = key.partition(".")
    lightning_module = ("lightning." + family) + (f".{rest}" if rest else "")
    target = folded(lightning_module)
    try:
        return None if target is None else getattr(target, name)
    except AttributeError:  # NotProvidedAttributeError too: that place lacks it as well
        return None


def _alternative(key: str, name: str) -> str:
    family, _, rest = key.partition(".")
    package = rest.split(".")[0]
    for entry in (f"{package}.{name}", name, package):
        if entry in NOT_PROVIDED_NAMES:
            return NOT_PROVIDED_NAMES[entry]
    return _FABRIC_ALTERNATIVE if family == "fabric" else _DEFAULT_ALTERNATIVE


def _stand_in(kind: str, name: str, alternative: str) -> Any:
    if kind == "class":
        return refused_class(__name__, name, alternative)
    if kind.startswith("exception:"):
        base = getattr(importlib.import_module("builtins"), kind.partition(":")[2])
        doc = f"Lightning's ``{name}`` (Lockstep never raises it)."
        return type(name, (base,), {"__module__": __name__, "__doc__": doc})
    message = f"Lightning's `{name}` can be imported under Lockstep but not used; use {alternative} (docs/migration.md)."
    if kind == "function":
        return _refusing_function(name, message)
    return _RefusedValue(name, message)  # a constant, an instance, a type alias


def _refusing_function(name: str, message: str) -> Callable[..., NoReturn]:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotProvidedError(message, name=name)

    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Lightning's ``{name}``: calling it raises `NotProvidedError` naming what to use."
    return refuse


class _RefusedValue:
    """Lightning's value ``name`` (a constant, a registry, a type alias): it imports; any use raises."""

    def __init__(self, name: str, message: str) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_message", message)

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        name = object.__getattribute__(self, "_name")
        raise NotProvidedError(object.__getattribute__(self, "_message"), name=name)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)  # copy, pickle and typing probe dunders: answer as for a plain object
        self._refuse()

    def __repr__(self) -> str:
        return f"<Lightning's {object.__getattribute__(self, '_name')}: not provided by Lockstep>"

    __call__ = __getitem__ = __iter__ = __len__ = __bool__ = __contains__ = __setattr__ = _refuse
