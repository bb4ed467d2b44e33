"""The suite passes on a GPU machine too: every Trainer a test builds names its accelerator.

On a CUDA machine ``accelerator="auto"`` picks the GPU, so a test written for the CPU would train on
another device (other numerics; two ranks on one GPU; NCCL instead of gloo) and fail there. The
scan below is static, so it holds on the CPU machines the suite usually runs on. Tests meant for
CUDA carry ``@pytest.mark.cuda`` (``devices=N`` for N GPUs) and are skipped, with the reason, on
machines with fewer devices.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import cuda_skip_reason
from trainer.accelerators.accelerator import Accelerator
from trainer.contracts.config import DistributedConfig
from trainer.strategies.selection import select_strategy

TESTS = Path(__file__).resolve().parents[1]

# Trainer(...) calls in tests/ that leave the accelerator to "auto" on purpose:
# {(path relative to tests/, enclosing function): reason}. Empty: none does today.
AUTO_ON_PURPOSE: dict[tuple[str, str], str] = {}
# the census's vendored third-party files (not committed; edited never): the harness gives every
# Trainer they build accelerator="cpu" (tests/census/projects.py, TRAINER_BASE)
VENDORED = TESTS / "census" / "vendor"


def _is_cuda_mark(decorator: ast.expr) -> bool:
    return ".mark.cuda" in ast.unparse(decorator)


def _dict_names_accelerator(value: ast.expr, dicts: dict[str, ast.expr]) -> bool:
    """``{"accelerator": ...}``, or a dict display or name (assigned one in scope) that unpacks one."""
    if isinstance(value, ast.Name) and value.id in dicts:
        return _dict_names_accelerator(dicts[value.id], {k: v for k, v in dicts.items() if k != value.id})
    if isinstance(value, ast.Dict):
        return any(
            (isinstance(k, ast.Constant) and k.value == "accelerator") or (k is None and _dict_names_accelerator(v, dicts))
            for k, v in zip(value.keys, value.values)
        )
    return False


def _names_accelerator(call: ast.Call, dicts: dict[str, ast.expr]) -> bool:
    return any(
        keyword.arg == "accelerator" or (keyword.arg is None and _dict_names_accelerator(keyword.value, dicts))
        for keyword in call.keywords
    )


def _dict_assignments(scope: ast.AST) -> dict[str, ast.expr]:
    """``name = {...}`` assignments anywhere in ``scope`` (a function, with its nested bodies)."""
    return {
        target.id: node.value
        for node in ast.walk(scope)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def trainers_left_on_auto(source: str, filename: str) -> list[str]:
    """``file:line (function)`` of every ``Trainer(...)`` call in ``source`` without an accelerator.

    Calls inside a function or class marked ``cuda`` (or in a module whose ``pytestmark`` is) and
    calls listed in ``AUTO_ON_PURPOSE`` are allowed.
    """
    tree = ast.parse(source, filename)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            if ".mark.cuda" in ast.unparse(node.value):
                return []
    found: list[str] = []

    def visit(node: ast.AST, scope: str, dicts: dict[str, ast.expr]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if any(_is_cuda_mark(d) for d in child.decorator_list):
                    continue
                inner = {**dicts, **_dict_assignments(child)} if not isinstance(child, ast.ClassDef) else dicts
                visit(child, child.name if not scope else f"{scope}.{child.name}", inner)
                continue
            if isinstance(child, ast.Call):
                func = child.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name == "Trainer" and not _names_accelerator(child, dicts):
                    if (filename, scope.split(".")[0]) not in AUTO_ON_PURPOSE:
                        found.append(f"{filename}:{child.lineno} ({scope or 'module'})")
            visit(child, scope, dicts)

    module_dicts = {
        t.id: n.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
        for t in n.targets if isinstance(t, ast.Name)
    }
    visit(tree, "", module_dicts)
    return found


def test_every_trainer_in_the_tests_names_its_accelerator():
    left = []
    for path in sorted(p for p in TESTS.rglob("*.py") if VENDORED not in p.parents):
        left += trainers_left_on_auto(path.read_text(), str(path.relative_to(TESTS)))
    assert not left, (
        'These Trainer(...) calls leave accelerator="auto", which trains on the GPU of a CUDA machine. '
        'Pass accelerator="cpu", mark the test @pytest.mark.cuda, or list it in AUTO_ON_PURPOSE with '
        "the reason:\n" + "\n".join(left)
    )


def test_the_scan_finds_a_trainer_left_on_auto():
    source = '''
import pytest
QUIET = {}
def test_a():
    Trainer(max_epochs=1, **QUIET).fit(m, data)
def test_b():
    Trainer(accelerator="cpu", **QUIET)
    Trainer(**{"accelerator": "cpu", **QUIET})
@pytest.mark.cuda(devices=2)
def test_c():
    Trainer(devices=2)
class TestD:
    def test_e(self):
        t = trainer.Trainer()
def helper(**kw):
    return Trainer(**{**QUIET, **kw})
def helper2(**kw):
    options = {"accelerator": "cpu", **kw}
    Trainer(**options)
    Trainer(**{**options, "max_steps": 2})
'''
    assert trainers_left_on_auto(source, "x.py") == ["x.py:5 (test_a)", "x.py:14 (TestD.test_e)", "x.py:16 (helper)"]
    assert trainers_left_on_auto("import pytest\npytestmark = [pytest.mark.cuda]\nTrainer()\n", "y.py") == []


def test_examples_run_by_the_tests_run_on_the_cpu():
    """A test that runs an example script passes ``--accelerator cpu`` (the examples default to auto)."""
    checked = 0
    for path in sorted(TESTS.rglob("test_*.py")):
        source = path.read_text()
        if '"examples"' not in source:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_script":
                argv = [ast.unparse(a) for a in node.args[0].elts] if isinstance(node.args[0], ast.List) else []
                assert "'--accelerator'" in argv and argv[argv.index("'--accelerator'") + 1] == "'cpu'", (
                    f"{path.name}:{node.lineno}: run the example with '--accelerator', 'cpu'"
                )
                checked += 1
    assert checked >= 2  # test_examples.py and test_large_batch_example.py


@pytest.mark.parametrize(
    "mark, available, reason",
    [
        (pytest.mark.cuda, 0, "needs 1 CUDA device(s), this machine has 0"),
        (pytest.mark.cuda, 1, None),
        (pytest.mark.cuda(devices=2), 1, "needs 2 CUDA device(s), this machine has 1"),
        (pytest.mark.cuda(devices=2), 2, None),
    ],
)
def test_cuda_marker_skips_with_the_reason(mark, available, reason):
    assert cuda_skip_reason(mark.mark, available) == reason


def test_cuda_marker_rejects_a_bad_device_count():
    with pytest.raises(ValueError, match=r"needs an int >= 1, got 0"):
        cuda_skip_reason(pytest.mark.cuda(devices=0).mark, 4)


def test_more_launched_processes_than_cuda_devices_is_a_clear_error(monkeypatch):
    """Two torchrun ranks on a one-GPU node: a ValueError, not 'invalid device ordinal' in set_device."""
    for name, value in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    cuda = Accelerator("cuda")  # no device needed: the check runs before any is touched
    monkeypatch.setattr(cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"started 2 processes on this node but it has 1 CUDA device\(s\)"):
        select_strategy(DistributedConfig(), cuda)


def test_ci_tests_the_torch_floor_that_pyproject_declares():
    """``.ci/run`` runs its floor subset on the oldest torch ``pyproject.toml`` allows."""
    root = TESTS.parent
    floor = re.search(r'"torch>=(\d+\.\d+)"', (root / "pyproject.toml").read_text())
    ci = re.search(r"^FLOOR_TORCH=(\d+\.\d+)\.\d+$", (root / ".ci" / "run").read_text(), re.MULTILINE)
    assert floor and ci and floor.group(1) == ci.group(1)
    for doc in ("README.md", "docs/getting-started.md"):
        assert f"PyTorch >= {floor.group(1)}" in (root / doc).read_text(), doc


def test_ci_installs_what_the_differential_tests_compare_with():
    """The `dev` extra (what CI installs) brings Lightning: without it tests/port and the
    hook-order and logging-parity comparisons skip, and a skipped comparison is not a passed one."""
    text = (TESTS.parent / "pyproject.toml").read_text()
    dev = re.search(r"^dev = \[(.*?)^\]", text, re.MULTILINE | re.DOTALL)
    assert dev and re.search(r'^\s*"lightning[>=<\s"]', dev.group(1), re.MULTILINE), "lightning is not in dev"
