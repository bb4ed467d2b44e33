"""Where a warning points: at the user's line that led to it, not at Lockstep's source.

A fixed ``stacklevel`` is right for one call path only (``Trainer(...)`` reaches a warning through
more frames than ``trainer.fit(...)``), so the level is counted from the stack when a warning is
issued: the innermost frame outside Lockstep's packages and the wrappers between them and the user
(torch's decorators, contextlib, functools).
"""
from __future__ import annotations

import sys

_NOT_THE_USER = frozenset({"trainer", "callbacks", "torch", "contextlib", "functools"})


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes ``warnings.warn`` called in the caller's frame name the user's
    line (``stacklevel=1`` is the caller's own line; a helper that warns for its caller adds one)."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] in _NOT_THE_USER:
        frame = frame.f_back
        level += 1
    return level
