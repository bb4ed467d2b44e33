"""A user's own ``callbacks.py`` or ``trainer.py`` (next to their script, so first on ``sys.path``)
hides Lockstep's package of that name: say so, naming the file, instead of Python's
"'callbacks' is not a package" or a circular import."""
from __future__ import annotations

import importlib.util
import os
import sys

# a file every copy of the package has (a second Lockstep checkout on the path is not a shadow)
_MARKERS = {"callbacks": "callback.py"}


def shadowing_message(name: str, found: str | None) -> str:
    """The error text for Lockstep's package ``name`` hidden by the module at ``found``."""
    return (
        f"Lockstep's `{name}` package is hidden by {found or 'another module named ' + repr(name)}: Python "
        f"finds that first (the script's folder comes first on sys.path). Rename your file (for example "
        f"to my_{name}.py) and delete its __pycache__ entry, then run again."
    )


def check_not_shadowed(name: str) -> None:
    """Raise ``ImportError`` if ``import name`` would not give Lockstep's package ``name``."""
    module = sys.modules.get(name)
    if module is not None:
        found = getattr(module, "__file__", None)
    else:
        spec = importlib.util.find_spec(name)
        found = None if spec is None else spec.origin
    if found is None:  # nothing of that name, or a namespace package: the import will say
        return
    package = os.path.dirname(found)
    if os.path.basename(found) != "__init__.py" or not os.path.exists(os.path.join(package, _MARKERS[name])):
        raise ImportError(shadowing_message(name, found))
