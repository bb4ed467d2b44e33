"""Lightning's module tree, read from the installed Lightning (issue 41, build item 1).

``python -m tests.project.lightning_tree`` prints, as one JSON line, every module under `FAMILIES`
(``pkgutil.walk_packages``, and the old paths Lightning's ``_graveyard`` registers) and each one's
names with what each is; ``--write`` regenerates trainer/lightning/tree_index.json, the index the
runner mirrors the tree from. tests/project/test_lightning_tree.py checks the index against the
installed Lightning and every name under ``python -m trainer.as_lightning``.

A module's names: its ``__all__`` where it defines one, and each attribute (but dunders) that the
module defines (a ``def``, ``class`` or assignment at its top level) or imports from Lightning;
the public ones have no leading underscore, but libraries import private ones too
(``_CheckpointConnector``), so those are indexed as well. A submodule is a module of the tree,
not a name.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import json
import logging
import pkgutil
import sys
import types
import typing
import warnings
from pathlib import Path
from typing import Any

INDEX = Path(__file__).resolve().parents[2] / "trainer" / "lightning" / "tree_index.json"
# lightning_utilities: the Lightning project's helper package, whose names Lightning's modules re-export
_LIGHTNING = ("lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities")
FAMILIES = ["lightning.pytorch", "pytorch_lightning", "lightning.fabric", "lightning_fabric"]


def _is_lightning(module: str | None) -> bool:
    return bool(module) and str(module).split(".")[0] in _LIGHTNING


def _modules(family: str) -> list[str]:
    path = importlib.import_module(family).__path__
    names = [family, *(info.name for info in pkgutil.walk_packages(path, family + ".", onerror=lambda _: None))]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - `walk` reports it
            pass
    # and the old module paths Lightning's _graveyard registers as it imports (``accelerators.tpu``)
    names += [n for n in list(sys.modules) if n.startswith(family + ".")]
    # pytorch_lightning's __about__ / __version__ / __setup__ are its distribution's metadata, not the tree
    return sorted(n for n in set(names) if not n.rpartition(".")[2].startswith("__"))


def _top_level_names(module: types.ModuleType) -> set[str]:
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return set()
    names: set[str] = set()
    for statement in tree.body:
        for node in ast.walk(statement) if isinstance(statement, (ast.If, ast.Try)) else [statement]:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            elif isinstance(node, ast.ImportFrom) and (node.level or _is_lightning(node.module)):
                names |= {a.asname or a.name for a in node.names}
    return names


def module_names(module: types.ModuleType) -> list[str]:
    """``module``'s names (see the module's docstring), private ones included."""
    own = _top_level_names(module)
    return sorted({*getattr(module, "__all__", ()), *(
        n for n, v in vars(module).items()
        if not n.startswith("__") and not isinstance(v, types.ModuleType)
        and (n in own or ((inspect.isclass(v) or inspect.isroutine(v)) and _is_lightning(getattr(v, "__module__", None))))
    )})


def kind_of(value: Any) -> str:
    """What a stand-in for ``value`` must be: ``class``, ``exception:<builtin base>``, ``function``,
    ``logger``, ``typing`` (an annotation), or ``value:<type>``; for a class or function of
    lightning_utilities, ``from:<module>:<name>``: that object itself."""
    module = getattr(value, "__module__", None) or ""
    if module.startswith("lightning_utilities") and (inspect.isclass(value) or inspect.isroutine(value)):
        return f"from:{module}:{value.__qualname__}"
    if isinstance(value, type):
        if issubclass(value, BaseException):
            base = next(b for b in value.__mro__ if b.__module__ == "builtins")
            return f"exception:{base.__name__}"
        return "class"
    if isinstance(value, logging.Logger):
        return "logger"
    if inspect.isroutine(value) or isinstance(value, typing.TypeVar) or type(value).__module__ == "typing":
        return "function" if inspect.isroutine(value) else "typing"
    if callable(value) and not isinstance(value, (int, float, str)):
        return "function"
    return f"value:{type(value).__name__}"


def walk(families: list[str]) -> dict[str, Any]:
    """Every module of ``families`` and its names' kinds; the places each object is named."""
    warnings.simplefilter("ignore")
    modules: dict[str, dict[str, str]] = {}
    places: dict[int, list[str]] = {}
    failed: dict[str, str] = {}
    for family in families:
        for name in _modules(family):
            try:
                module = importlib.import_module(name)
            except Exception as err:  # noqa: BLE001 - a module the installed Lightning cannot import is reported
                failed[name] = f"{type(err).__name__}: {err}"
                continue
            modules[name] = {}
            for attr in module_names(module):
                if not hasattr(module, attr):
                    continue  # in __all__ but not defined (Lightning's own inconsistency)
                value = getattr(module, attr)
                if isinstance(value, types.ModuleType):
                    continue
                modules[name][attr] = kind_of(value)
                if not isinstance(value, (int, float, str, bool, type(None))):
                    places.setdefault(id(value), []).append(f"{name}:{attr}")
    groups = sorted(sorted(set(group), key=_depth) for group in places.values() if len(set(group)) > 1)
    return {"modules": modules, "groups": groups, "failed": failed}


def _depth(place: str) -> tuple[int, str]:
    return place.count("."), place


def _relative(place: str) -> str:
    for family, short in (("lightning.pytorch", "pytorch"), ("lightning.fabric", "fabric")):
        if place == family or place.startswith((family + ".", family + ":")):
            return short + place[len(family):]
    raise ValueError(place)


def index_json(walked: dict[str, Any]) -> str:
    """The text of `INDEX` for ``walk(["lightning.pytorch", "lightning.fabric"])``: ``tree`` maps each
    module (``pytorch.callbacks.early_stopping`` for ``lightning.pytorch.callbacks.early_stopping`` and
    ``pytorch_lightning.callbacks.early_stopping``; ``fabric.`` for ``lightning.fabric`` and
    ``lightning_fabric``) to its names and what each is (`kind_of`); each of ``same`` lists the places
    (``module:name``) that name one object, shallowest first."""
    modules = {_relative(m): names for m, names in walked["modules"].items()}
    groups = sorted([_relative(p) for p in group] for group in walked["groups"])
    return json.dumps({"lightning": "2.6.6", "tree": modules, "same": groups}, indent=0, sort_keys=True) + "\n"


if __name__ == "__main__":
    if "--write" in sys.argv:
        INDEX.write_text(index_json(walk(["lightning.pytorch", "lightning.fabric"])))
    else:
        print(json.dumps(walk(sys.argv[1:] or FAMILIES)))
