"""Argument checks shared by the optimizers and the warmup scheduler.

Each check raises at construction time with the argument's name and the accepted range, so a
bad hyperparameter fails where it was written instead of as a NaN many steps later.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Tuple


def _check_real(name: str, value: Any) -> float:
    # bool is an int subclass; `lr=True` is a typo, not a learning rate.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def _check_non_negative(name: str, value: Any) -> float:
    value = _check_real(name, value)
    if value < 0.0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


def _check_positive(name: str, value: Any) -> float:
    value = _check_real(name, value)
    if value <= 0.0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return value


def _check_unit_interval(name: str, value: Any) -> float:
    """Accept `value` in [0, 1): a decay rate of 1 would never forget and never learn."""
    value = _check_real(name, value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return value


def _check_betas(value: Any) -> Tuple[float, float]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"betas must be a pair (beta1, beta2), got {value!r}")
    return (
        _check_unit_interval("betas[0]", value[0]),
        _check_unit_interval("betas[1]", value[1]),
    )


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value
