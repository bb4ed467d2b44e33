"""The import paths the Lightning face had before it moved into `trainer.lightning`,
``trainer.demos`` (the public name of Lightning's ``lightning.pytorch.demos``), and those of the
modules renamed so that no two modules share a file name (issue 43): importing one
gives the moved module itself, never a second copy, so its classes and errors stay the same
objects. ``import trainer`` installs the finder (`install`).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

MOVED = {
    "trainer.demos": "trainer.lightning.demos",
    "trainer.fabric_types": "trainer.lightning.fabric_types",
    "trainer.lightning_alias": "trainer.lightning.alias",
    "trainer.lightning_attributes": "trainer.lightning.attributes",
    "trainer.unsupported": "trainer.lightning.unsupported",
    # each file name once: a module named after what it holds, or its one copy in the floor
    "trainer.contracts.stage": "trainer.contracts.trainer_state",
    "trainer.loops.accumulation": "trainer.loops.accumulation_windows",
    "trainer.loops.progress": "trainer.contracts.progress",
    "trainer.run_state": "trainer.run_state_fields",
}


def new_name(name: str) -> str | None:
    """Where module ``name`` lives now (``trainer.demos.lstm`` -> ``trainer.lightning.demos.lstm``); None if it did not move."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return None


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(new_name(spec.name) or spec.name)
        self._spec = module.__spec__  # importlib sets the old name's spec on it next; `exec_module` puts this back
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__ = self._spec


class _Finder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``, so another install of `trainer` on the path (an editable one) cannot
    answer an old name with its own copy; a name it does not know costs a prefix check."""

    _lockstep_old_names = True

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if new_name(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader())


def install() -> None:
    """Make the old names importable in this process (idempotent)."""
    if not any(getattr(finder, "_lockstep_old_names", False) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
