"""Checking user arguments: a wrong type is a `TypeError`, a bad value a `ValueError`, both naming it.

One message style everywhere: ``"{name} must be {expected}, got {value!r}"``, where ``name`` is a
Trainer argument (``accumulate_grad_batches``), an optimizer's hyperparameter (``lr``) or a
callback's argument (``ModelCheckpoint(save_top_k)``).

``bool`` is a subclass of ``int`` and every object is truthy or falsy, so a plain ``if flag:`` or
``isinstance(x, int)`` silently accepts ``"no"`` or ``True``: these checks close that gap. A NaN
compares false with everything, so a number must also be finite (it would disable a check).
"""
from __future__ import annotations

import difflib
import functools
import inspect
import math
import numbers
import os
from typing import Callable, Concatenate, Literal, ParamSpec, TypeVar, overload


def _fail(error: type[Exception], name: str, expected: str, value: object) -> Exception:
    return error(f"{name} must be {expected}, got {value!r}")


def _or_none(expected: str, allow_none: bool) -> str:
    return f"None or {expected}" if allow_none else expected


# each check returns the checked value: typed by whether None is allowed
@overload
def check_bool(name: str, value: object, *, allow_none: Literal[False] = False) -> bool: ...
@overload
def check_bool(name: str, value: object, *, allow_none: bool) -> bool | None: ...
def check_bool(name: str, value: object, *, allow_none: bool = False) -> bool | None:
    """``value`` must be ``True`` or ``False`` (not ``"no"``, ``1``; ``None`` only if allowed)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, bool):
        raise _fail(TypeError, name, _or_none("a bool (True or False)", allow_none), value)
    return value


@overload
def check_int(name: str, value: object, minimum: int, *, allow_none: Literal[False] = False) -> int: ...
@overload
def check_int(name: str, value: object, minimum: int, *, allow_none: bool) -> int | None: ...
def check_int(name: str, value: object, minimum: int, *, allow_none: bool = False) -> int | None:
    """``value`` must be an int (not a bool or a float) >= ``minimum``; returns it."""
    if value is None and allow_none:
        return None
    what = _or_none(f"an int >= {minimum}", allow_none)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(TypeError, name, what, value)
    if value < minimum:
        raise _fail(ValueError, name, what, value)
    return value


@overload
def check_number(
    name: str, value: object, minimum: float | None = None, *, above: float | None = None,
    below: float | None = None, maximum: float | None = None, allow_none: Literal[False] = False,
) -> float: ...
@overload
def check_number(
    name: str, value: object, minimum: float | None = None, *, above: float | None = None,
    below: float | None = None, maximum: float | None = None, allow_none: bool,
) -> float | None: ...
def check_number(
    name: str,
    value: object,
    minimum: float | None = None,
    *,
    above: float | None = None,
    below: float | None = None,
    maximum: float | None = None,
    allow_none: bool = False,
) -> float | None:
    """``value`` must be a finite real number (not a bool or a str) within the bounds given
    (``minimum <= value``, ``above < value``, ``value < below``, ``value <= maximum``); returns it
    as a float (None stays None)."""
    if value is None and allow_none:
        return None
    what = _or_none(f"a finite number{_bounds(minimum, above, below, maximum)}", allow_none)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail(TypeError, name, what, value)
    number = float(value)
    if (
        not math.isfinite(number)
        or (minimum is not None and number < minimum)
        or (above is not None and number <= above)
        or (below is not None and number >= below)
        or (maximum is not None and number > maximum)
    ):
        raise _fail(ValueError, name, what, value)
    return number


def _bounds(minimum: float | None, above: float | None, below: float | None, maximum: float | None) -> str:
    low = f"[{minimum}" if minimum is not None else f"({above}" if above is not None else None
    high = f"{below})" if below is not None else f"{maximum}]" if maximum is not None else None
    if low and high:
        return f" in {low}, {high}"
    if low:
        return f" >= {minimum}" if minimum is not None else f" > {above}"
    if high:
        return f" < {below}" if below is not None else f" <= {maximum}"
    return ""


def check_path(name: str, value: object, *, allow_none: bool = True) -> None:
    """``value`` must be a ``str`` or ``os.PathLike`` naming a text path (or None)."""
    if value is None and allow_none:
        return
    if not isinstance(value, (str, os.PathLike)) or not isinstance(os.fspath(value), str):
        raise _fail(TypeError, name, "None, a str or an os.PathLike path" if allow_none else "a str or an os.PathLike path", value)


def check_str(name: str, value: object, *, allow_none: bool = False) -> None:
    """``value`` must be a ``str`` (or None)."""
    if value is None and allow_none:
        return
    if not isinstance(value, str):
        raise _fail(TypeError, name, _or_none("a str", allow_none), value)


def check_limit(name: str, limit: int | float | None) -> None:
    """Validate a ``limit_*_batches`` argument (None, int >= 0, or float in [0, 1])."""
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, (int, float)):
        raise TypeError(f"{name} must be an int (batches) or a float fraction in [0, 1], got {limit!r}")
    if isinstance(limit, int) and limit < 0:
        raise ValueError(f"{name} must be >= 0, got {limit}")
    if isinstance(limit, float) and not 0.0 <= limit <= 1.0:
        raise ValueError(f"{name} as a fraction must be in [0.0, 1.0], got {limit}")


@overload
def check_path_component(name: str, value: object, *, allow_none: Literal[False] = False) -> str: ...
@overload
def check_path_component(name: str, value: object, *, allow_none: bool) -> str | None: ...
def check_path_component(name: str, value: object, *, allow_none: bool = False) -> str | None:
    """``value`` must be a ``str`` naming one path component: not empty, ``.`` or ``..``, no path
    separator, no NUL (so not absolute either). A run id, a logger's name or version becomes a
    directory or file name under the run's root: one from a checkpoint or a config file must not
    lead outside it. Returns ``value``."""
    if value is None and allow_none:
        return None
    what = _or_none("one path component (a name without '/', '\\\\' or NUL, not '.' or '..')", allow_none)
    if not isinstance(value, str):
        raise _fail(TypeError, name, what, value)
    separators = {"/", "\\", "\0", os.sep, *(os.altsep or "")}
    if value in ("", ".", "..") or any(s in value for s in separators) or os.path.isabs(value):
        raise _fail(ValueError, name, what, value)
    return value


_P = ParamSpec("_P")
_Self = TypeVar("_Self")


def _explicit_parameters(init: Callable[_P, object]) -> list[str]:
    return [
        p.name for p in inspect.signature(init).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def hint_misspelled_arguments(init: Callable[Concatenate[_Self, _P], None]) -> Callable[Concatenate[_Self, _P], None]:
    """``init`` refusing an unknown keyword with the closest argument's name (``max_epoch``: did you
    mean ``max_epochs``?). Python's own error names none. ``functools.wraps`` keeps ``init``'s
    signature for `inspect`, jsonargparse (the CLI) and the docs, and the ParamSpec keeps it for type
    checkers and editors; a subclass that passes its ``**kwargs`` on gets the hint too, its own
    arguments included. For the constructors of the Trainer and the built-in callbacks and loggers
    (not for an ``init`` that takes ``**kwargs``: every name is known to it)."""
    own = _explicit_parameters(init)

    @functools.wraps(init)
    def checked(self: _Self, *args: _P.args, **kwargs: _P.kwargs) -> None:
        unknown = [name for name in kwargs if name not in own]
        if unknown:
            known = own + [n for n in _explicit_parameters(type(self).__init__) if n not in own]
            message = f"{type(self).__name__}() got an unexpected keyword argument {unknown[0]!r}"
            close = difflib.get_close_matches(unknown[0], known, n=1)
            raise TypeError(
                f"{message}: did you mean `{close[0]}`?" if close
                else f"{message} (help({type(self).__name__}) lists the arguments)"
            )
        init(self, *args, **kwargs)

    return checked
