"""The shape of the code: who may write whose state, which package imports which, and sizes."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.source_imports import runtime_imports

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted([*REPO.glob("trainer/**/*.py"), *REPO.glob("callbacks/**/*.py")])

# Writes to another object's private attribute that are allowed, each with its reason.
ALLOWED_PRIVATE_WRITES = {
    # torch's LRScheduler reports its rates through `_last_lr` (get_last_lr) and has no setter;
    # scaling a scheduler's rates for W must scale what it reports too.
    ("trainer/optim/warmup.py", "scheduler._last_lr"),
}


def _private_writes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for sub in ast.walk(target):
                if not (isinstance(sub, ast.Attribute) and sub.attr.startswith("_") and not sub.attr.startswith("__")):
                    continue
                if isinstance(sub.value, ast.Name) and sub.value.id in ("self", "cls"):
                    continue
                found.append(ast.unparse(sub))
    return found


def test_no_module_writes_another_objects_private_attributes():
    offenders = [
        f"{path.relative_to(REPO)}: {expr}"
        for path in SOURCES
        for expr in _private_writes(path)
        if (path.relative_to(REPO).as_posix(), expr) not in ALLOWED_PRIVATE_WRITES
    ]
    assert offenders == []


def test_the_private_write_check_finds_writes(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text(
        "def f(trainer, loop):\n"
        "    trainer._global_step += 1\n"
        "    loop.progress._x, y = 1, 2\n"
        "    self._mine = 1\n"
        "    trainer.public = 1\n"
    )
    assert _private_writes(source) == ["trainer._global_step", "loop.progress._x"]


def _all_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_floor(module: str) -> bool:
    return module == "trainer.contracts" or module.startswith("trainer.contracts.")


def test_callbacks_import_only_the_contracts_floor_of_the_trainer():
    # At run time callbacks import the floor only (importing it does not import the Trainer).
    for path in REPO.glob("callbacks/**/*.py"):
        for module in runtime_imports(path):
            if module == "trainer" or module.startswith("trainer."):
                assert _is_floor(module), f"{path.name} imports {module} at run time: use trainer.contracts"
        for module in _all_imports(path):
            if module.startswith("trainer"):
                assert module == "trainer" or _is_floor(module), f"{path.name} imports {module}"


# Lightning's `lightning.pytorch.callbacks` / `.loggers` under Lockstep's name, for users: they
# re-export the `callbacks` package and nothing in trainer/ imports them (docs/architecture.md).
NAMESPACE_MODULES = ["trainer/callbacks.py", "trainer/loggers.py"]


def test_the_trainer_reaches_callbacks_in_one_place():
    importers = sorted(
        path.relative_to(REPO).as_posix()
        for path in REPO.glob("trainer/**/*.py")
        if any(m == "callbacks" or m.startswith("callbacks.") for m in _all_imports(path))
    )
    assert importers == sorted(["trainer/default_callbacks.py", *NAMESPACE_MODULES])


def test_nothing_in_the_trainer_imports_the_namespace_modules():
    names = {_module_name(REPO / p) for p in NAMESPACE_MODULES}
    importers = sorted(
        path.relative_to(REPO).as_posix()
        for path in REPO.glob("trainer/**/*.py")
        if names & _all_imports(path)
    )
    assert importers == []


def test_no_import_cycle_between_trainer_and_callbacks():
    graph = {_module_name(p): {m for m in runtime_imports(p) if m.split(".")[0] in ("trainer", "callbacks")} for p in SOURCES}
    # An import of a module also runs its packages' __init__ files.
    for name, deps in graph.items():
        graph[name] = {".".join(d.split(".")[:i]) for d in deps for i in range(1, d.count(".") + 2)} - {name}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in graph.get(node, ()):
            if state.get(dep) == 1:
                cycle = path[path.index(dep):] + [dep] if dep in path else [node, dep]
                if {c.split(".")[0] for c in cycle} == {"trainer", "callbacks"}:
                    pytest.fail("import cycle between trainer/ and callbacks/: " + " -> ".join(cycle))
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [name])


def test_the_trainer_module_stays_small():
    lines = (REPO / "trainer" / "trainer.py").read_text(encoding="utf-8").count("\n")
    assert lines < 400, f"trainer/trainer.py has {lines} lines: move loop logic to the part that owns it"


def test_no_two_modules_share_a_file_name():
    # a name held twice (trainer/stage.py and trainer/contracts/stage.py were) reads as one module in
    # imports, tracebacks and docs: each module is named after what it holds (issue 43)
    paths_by_name: dict[str, list[str]] = {}
    for path in SOURCES:
        if path.name != "__init__.py":
            paths_by_name.setdefault(path.name, []).append(path.relative_to(REPO).as_posix())
    assert {name: paths for name, paths in paths_by_name.items() if len(paths) > 1} == {}
