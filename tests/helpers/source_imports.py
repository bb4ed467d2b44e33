"""What a source file imports, read from its syntax tree (the architecture and contract tests)."""
from __future__ import annotations

import ast
from pathlib import Path


def runtime_imports(path: Path) -> set[str]:
    """Modules ``path`` imports when it runs (not those under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            skipped.update(id(n) for n in ast.walk(node))
    modules = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def all_imports(path: Path) -> set[str]:
    """Modules ``path`` imports anywhere: at run time and under ``if TYPE_CHECKING:`` (for annotations)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
            # ``from package import module`` imports the module
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules
