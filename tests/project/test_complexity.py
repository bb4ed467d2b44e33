"""No function in ``trainer/`` or ``callbacks/`` above cyclomatic complexity 15 (issue 31).

The counter follows radon's rules, so a number here matches what ``radon cc`` would print for
the same function. A function starts at 1 and gains one for every place its path can branch:

- each ``if`` and each ``elif`` (an ``elif`` is an ``if`` nested in the ``orelse``);
- each ``for`` / ``async for`` and each ``while`` loop;
- each ``except`` handler;
- each ``assert`` (it raises or does not);
- each ``for`` and each ``if`` of a comprehension or generator expression;
- each operand of a boolean operator beyond the first (``a and b or c`` adds two);
- each conditional expression (``x if c else y``);
- each ``case`` of a ``match``.

A function nested in another (or a method of a class defined inside one) is counted on its own
and adds nothing to the function around it: its branches run only when it is called. A lambda
has no name to report, so its branches count toward the function that holds it.

The thin shells (issue 43) have line limits: the fit loop's epoch loop (``trainer/loops/fit_loop.py``)
and its set-up (``trainer/loops/fit_setup.py``) at most 400 lines each, ``callbacks/model_checkpoint.py``
at most 450. With radon installed (the ``dev`` extra), every module must keep maintainability
index A (radon's ``mi``, 20 or more).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted([*REPO.glob("trainer/**/*.py"), *REPO.glob("callbacks/**/*.py")])
LIMIT = 15

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# One more path each: the branch is taken or not.
_ONE_EACH = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.ExceptHandler,
    ast.Assert,
    ast.IfExp,
    ast.match_case,
)


class _Complexity(ast.NodeVisitor):
    """Counts the branches of one function's body, stopping at nested functions and classes."""

    def __init__(self) -> None:
        self.complexity = 1

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, _ONE_EACH):
            self.complexity += 1
        elif isinstance(node, ast.BoolOp):
            self.complexity += len(node.values) - 1
        elif isinstance(node, ast.comprehension):
            self.complexity += 1 + len(node.ifs)
        super().generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        # Decorators and default values run when the enclosing function runs; the body does not.
        for expr in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
            if expr is not None:
                self.visit(expr)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        # A class body's own statements run when the enclosing function runs; its methods do not.
        for statement in node.body:
            if not isinstance(statement, _FUNCTIONS):
                self.visit(statement)


def function_complexity(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Cyclomatic complexity of ``function``'s own body (nested functions not included)."""
    counter = _Complexity()
    for statement in function.body:
        counter.visit(statement)
    return counter.complexity


def complexities(source: str) -> list[tuple[int, int, str]]:
    """``(line, complexity, name)`` for every function and method in ``source``, nested ones too."""
    return [
        (node.lineno, function_complexity(node), node.name)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, _FUNCTIONS)
    ]


def _shown(path: Path) -> str:
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)


def offenders(paths: list[Path], limit: int = LIMIT) -> list[str]:
    """``path:line name (complexity)`` for each function above ``limit``, most complex first."""
    found = []
    for path in paths:
        for line, complexity, name in complexities(path.read_text(encoding="utf-8")):
            if complexity > limit:
                found.append((complexity, f"{_shown(path)}:{line} {name} ({complexity})"))
    return [text for _, text in sorted(found, key=lambda item: -item[0])]


def test_no_function_is_above_the_complexity_limit():
    too_complex = offenders(SOURCES)
    assert too_complex == [], f"functions above cyclomatic complexity {LIMIT}:\n" + "\n".join(too_complex)


def _by_name(source: str) -> dict[str, int]:
    return {name: complexity for _, complexity, name in complexities(source)}


def test_each_branching_construct_counts_one():
    source = (
        "def f(xs, a, b, c):\n"
        "    if a:\n"            # +1
        "        pass\n"
        "    elif b:\n"          # +1
        "        pass\n"
        "    for x in xs:\n"     # +1
        "        while x:\n"     # +1
        "            x -= 1\n"
        "    try:\n"
        "        pass\n"
        "    except ValueError:\n"  # +1
        "        pass\n"
        "    except KeyError:\n"    # +1
        "        pass\n"
        "    assert a\n"            # +1
        "    ys = [x for x in xs if x if x > 1]\n"  # +3: one for, two ifs
        "    z = a and b or c\n"    # +2
        "    w = a if b else c\n"   # +1
        "    with open('x'):\n"     # +0: a with does not branch
        "        pass\n"
        "    match a:\n"
        "        case 1:\n"          # +1
        "            pass\n"
        "        case _:\n"          # +1
        "            pass\n"
    )
    assert _by_name(source) == {"f": 1 + 1 + 1 + 1 + 1 + 2 + 1 + 3 + 2 + 1 + 2}


def test_nested_functions_are_counted_on_their_own():
    source = (
        "def outer(a):\n"
        "    def inner(b):\n"
        "        if b:\n"
        "            return 1\n"
        "        return [x for x in b]\n"
        "    class Local:\n"
        "        flag = a or 1\n"
        "        def method(self):\n"
        "            return 1 if self else 2\n"
        "    return inner(a) if a else None\n"
    )
    assert _by_name(source) == {"outer": 3, "inner": 3, "method": 2}


def test_a_function_above_the_limit_is_reported(tmp_path):
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(15))
    planted = tmp_path / "planted.py"
    planted.write_text(f"def just_over(x):\n{branches}    return -1\n\ndef fine(x):\n    return x\n")
    assert _by_name(planted.read_text()) == {"just_over": 16, "fine": 1}
    assert [text.split(" ", 1)[1] for text in offenders([planted], limit=LIMIT)] == ["just_over (16)"]


# The shells that grew before (issue 43): the most lines each may have.
LINE_LIMITS = {
    "trainer/loops/fit_loop.py": 400,
    "trainer/loops/fit_setup.py": 400,
    "callbacks/model_checkpoint.py": 450,
}


def too_long(limits: dict[str, int], root: Path = REPO) -> list[str]:
    """``path: lines > limit`` for each file of ``limits`` above its limit."""
    found = []
    for path, limit in limits.items():
        lines = len((root / path).read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append(f"{path}: {lines} > {limit}")
    return found


def test_the_fit_loop_its_set_up_and_the_checkpoint_callback_stay_within_their_line_limits():
    assert too_long(LINE_LIMITS) == [], "split the module by what it owns, as issue 43 did"


def test_a_file_over_its_line_limit_is_reported(tmp_path):
    (tmp_path / "long.py").write_text("x = 1\n" * 401)
    (tmp_path / "short.py").write_text("x = 1\n" * 400)
    assert too_long({"long.py": 400, "short.py": 400}, root=tmp_path) == ["long.py: 401 > 400"]


MI_LIMIT = 20  # radon's rank A


def below_maintainability_a(paths: list[Path]) -> list[str]:
    """``path (index)`` for each module whose maintainability index (radon's ``mi``) is below A."""
    from radon.metrics import mi_visit

    found = []
    for path in paths:
        index = mi_visit(path.read_text(encoding="utf-8"), True)
        if index < MI_LIMIT:
            found.append(f"{_shown(path)} ({index:.1f})")
    return found


def test_every_module_keeps_maintainability_index_a():
    pytest.importorskip("radon")
    assert below_maintainability_a(SOURCES) == []


def test_a_module_below_maintainability_a_is_reported(tmp_path):
    pytest.importorskip("radon")
    branches = "".join(f"    if x == {i} and y or z:\n        v{i} = x * {i} + y / (z - {i})\n" for i in range(60))
    planted = tmp_path / "tangled.py"
    planted.write_text("".join(f"def f{n}(x, y, z):\n{branches}    return x\n\n" for n in range(8)))
    assert [text.split(" ", 1)[0] for text in below_maintainability_a([planted])] == [str(planted)]
