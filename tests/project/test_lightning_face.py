"""Issue 43 build item 5: the Lightning face has one home, `trainer.lightning`, above the core.

The Trainer does not inherit from it (it asks `lightning_attribute` for the names it lacks), the
strategies and accelerators packages import nothing of it, and the import paths the face had at
the top of `trainer` give the moved modules themselves (never a second copy)."""
from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

import trainer
from trainer.lightning.old_names import MOVED

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_the_trainer_does_not_inherit_from_the_lightning_face():
    bases = [cls.__module__ for cls in trainer.Trainer.__mro__]
    assert not [m for m in bases if m.startswith("trainer.lightning")], bases


@pytest.mark.parametrize("package", ["strategies", "accelerators"])
def test_a_core_namespace_package_imports_nothing_of_the_face(package):
    tree = ast.parse((REPO / "trainer" / package / "__init__.py").read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m.startswith("trainer.lightning")}, imported


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_moved_module_itself(old):
    assert not (REPO / f"{old.replace('.', '/')}.py").exists() and not (REPO / old.replace(".", "/")).exists()
    module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert module.__spec__.name == MOVED[old]  # importlib's spec for the old name does not stick


def test_a_module_under_an_old_package_path_is_the_moved_one():
    import trainer.demos.boring_classes as old
    import trainer.lightning.demos.boring_classes as new

    assert old is new and trainer.demos.boring_classes is new
