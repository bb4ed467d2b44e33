"""The error a namespace package raises for a name it lacks (its PEP 562 ``__getattr__``).

Python's `AttributeError` unless a layer above explains the name: the Lightning face
(`trainer.lightning.unsupported.not_provided`, which ``import trainer`` registers) names what a
Lightning project uses instead, so ``pl.strategies.DeepSpeedStrategy`` says so while the
strategies package imports nothing of the Lightning layer.
"""
from __future__ import annotations

from typing import Callable

Explain = Callable[[str, str], Exception]

_explain: list[Explain] = []


def explain_missing_names(explain: Explain) -> None:
    """Make `missing_name` answer with ``explain(module, name)`` (one explainer; the last one registered)."""
    _explain[:] = [explain]


def missing_name(module: str, name: str) -> Exception:
    """The error for reading ``module.name`` where ``module`` lacks it (raise it from ``__getattr__``)."""
    if _explain:
        return _explain[0](module, name)
    return AttributeError(f"module {module!r} has no attribute {name!r}")
