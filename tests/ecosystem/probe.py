"""Resolve Lightning references in this interpreter and print, as one JSON line, what each is.

``python -m tests.ecosystem.probe FILE`` (plain: the installed Lightning) or
``python -m trainer.as_lightning -m tests.ecosystem.probe FILE`` (the runner: Lockstep), where FILE
holds a JSON list of references ``"module:attr.chain"`` (an empty chain: the module itself). A
chain is read as code reads it, one ``getattr`` at a time; a module's attribute that is a submodule
not imported yet is imported, as ``from module import submodule`` does.
"""
from __future__ import annotations

import importlib
import inspect
import json
import sys
import types
import warnings
from typing import Any


def kind(value: Any) -> str:
    """``module``, ``class``, ``function`` or ``other``: what a test compares across the two sides."""
    if isinstance(value, types.ModuleType):
        return "module"
    if isinstance(value, type):
        return "class"
    return "function" if inspect.isroutine(value) or callable(value) else "other"


def resolve(reference: str) -> Any:
    """The object ``reference`` (``"module:attr.chain"``) names; raises as the import or read would."""
    module, _, chain = reference.partition(":")
    value: Any = importlib.import_module(module)
    for part in chain.split(".") if chain else []:
        try:
            value = getattr(value, part)
        except AttributeError:
            if not isinstance(value, types.ModuleType):
                raise
            value = importlib.import_module(f"{value.__name__}.{part}")
    return value


def probe(references: list[str]) -> dict[str, str]:
    """Each reference's kind, or ``error: <exception>`` where it does not resolve."""
    seen: dict[str, str] = {}
    for reference in references:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                seen[reference] = kind(resolve(reference))
        except Exception as err:  # noqa: BLE001 - every failure is the answer for that reference
            seen[reference] = f"error: {type(err).__name__}: {str(err)[:300]}"
    return seen


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(json.dumps(probe(json.load(f))))
