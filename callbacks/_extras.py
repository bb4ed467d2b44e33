"""The optional dependencies (package extras) some callbacks and loggers need."""

from __future__ import annotations

import importlib


def require_extra(module: str, owner: str) -> None:
    """Import ``module`` (the extra of the same name), or raise an ``ImportError`` telling how to
    install it: at ``owner``'s construction, not at its first use in the middle of a run."""
    try:
        importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{owner} needs {module}: pip install 'lockstep-trainer[{module}]'.") from None
