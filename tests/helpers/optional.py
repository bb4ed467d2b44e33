"""Optional packages the tests import. A missing one skips with its reason, like `pytest.importorskip`;
so does a torchvision that is installed but cannot be imported (a CUDA torchvision beside a CPU-only
torch raises RuntimeError or OSError, not ImportError): Lightning and torchmetrics import it, and
every test that needs them then skips with the same one-line reason instead of erroring."""
from __future__ import annotations

import functools
import importlib.util
from types import ModuleType

import pytest

from trainer.lightning.demos.mnist_datamodule import _import_torchvision


@functools.cache
def broken_torchvision() -> str | None:
    """Why the installed torchvision cannot be imported, in one line (the library's own message);
    None if it imports or is absent."""
    if importlib.util.find_spec("torchvision") is None:
        return None
    try:
        _import_torchvision("torchvision")
    except ImportError as error:
        return str(error) if error.__cause__ is not None else None
    return None


def importorskip(modname: str, reason: str | None = None) -> ModuleType:
    """``pytest.importorskip(modname, reason=reason)``, and a skip with `broken_torchvision`'s reason
    when importing ``modname`` fails because of that torchvision."""
    try:
        return pytest.importorskip(modname, reason=reason)
    except Exception:
        broken = broken_torchvision()
        if broken is None:
            raise
        pytest.skip(broken, allow_module_level=True)
