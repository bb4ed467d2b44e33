"""Checking user arguments: a wrong type is a `TypeError`, a bad value a `ValueError`, both naming it.

``bool`` is a subclass of ``int`` and every object is truthy or falsy, so a plain ``if flag:`` or
``isinstance(x, int)`` silently accepts ``"no"`` or ``True``: these checks close that gap.
"""
from __future__ import annotations

import math
import os
from typing import Any


def check_bool(name: str, value: Any) -> None:
    """``value`` must be ``True`` or ``False`` (not ``"no"``, ``1`` or ``None``)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {value!r}")


def check_int(name: str, value: Any, minimum: int) -> None:
    """``value`` must be an int (not a bool or a float) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def check_number(name: str, value: Any, minimum: float, *, allow_none: bool = False) -> None:
    """``value`` must be a finite int or float (not a bool or a str) >= ``minimum``."""
    if value is None and allow_none:
        return
    expected = f"{'None or ' if allow_none else ''}a finite number >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {expected}, got {value!r}")
    if not math.isfinite(value) or value < minimum:
        raise ValueError(f"{name} must be {expected}, got {value!r}")


def check_path(name: str, value: Any, *, allow_none: bool = True) -> None:
    """``value`` must be a ``str`` or ``os.PathLike`` naming a text path (or None)."""
    if value is None and allow_none:
        return
    if not isinstance(value, (str, os.PathLike)) or not isinstance(os.fspath(value), str):
        raise TypeError(f"{name} must be a str or os.PathLike path, got {value!r}")


def check_str(name: str, value: Any, *, allow_none: bool = False) -> None:
    """``value`` must be a ``str`` (or None)."""
    if value is None and allow_none:
        return
    if not isinstance(value, str):
        expected = "None or a str" if allow_none else "a str"
        raise TypeError(f"{name} must be {expected}, got {value!r}")
