"""Applying mutants in a scratch copy of the checkout and running the tests of their area."""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

from tests.mutation.mutants import Mutant

# What a run of a mutant's tests means. pytest's exit codes: 0 all passed, 1 some failed,
# 2 interrupted (e.g. a collection error), 3 internal error, 4 usage error, 5 nothing collected.
KILLED, SURVIVED, STALE, ERROR, TIMEOUT = "killed", "survived", "stale", "error", "timeout"


@dataclasses.dataclass
class Result:
    mutant: Mutant
    status: str
    detail: str = ""
    seconds: float = 0.0


def anchor_problem(root: Path, mutant: Mutant) -> str | None:
    """Why ``mutant`` cannot be applied to the tree at ``root`` (it is stale), or None."""
    path = root / mutant.path
    if not path.is_file():
        return f"{mutant.path} does not exist"
    count = path.read_text().count(mutant.anchor)
    if count != 1:
        where = "is not in" if count == 0 else f"occurs {count} times in"
        return f"the anchor {mutant.anchor.splitlines()[0].strip()!r}... {where} {mutant.path}"
    missing = [t for t in mutant.tests if not (root / t.split("::", 1)[0]).exists()]
    if missing:
        return f"its tests do not exist: {missing}"
    return None


def _checkout_files(root: Path) -> list[str]:
    """The checkout's files: tracked and untracked-but-not-ignored (git), else every file."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, capture_output=True, check=True,
        ).stdout
        return [f for f in out.decode().split("\0") if f and (root / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", "__pycache__", ".pytest_cache"}
        return [
            str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(root).parts)
        ]


def copy_checkout(root: Path, scratch: Path) -> None:
    """Copy the checkout at ``root`` into ``scratch`` (its files only, no git directory)."""
    for rel in _checkout_files(root):
        target = scratch / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)


def _pytest(scratch: Path, tests: Sequence[str], timeout: float, pytest_args: Sequence[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(scratch), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTEST_XDIST_WORKER", None)
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *pytest_args, *tests]
    return subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout)


def _last_lines(text: str, n: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-n:])


def run_mutant(scratch: Path, mutant: Mutant, timeout: float, pytest_args: Sequence[str] = ()) -> Result:
    """Apply ``mutant`` in ``scratch``, run its tests, put the file back."""
    problem = anchor_problem(scratch, mutant)
    if problem is not None:
        return Result(mutant, STALE, problem)
    path = scratch / mutant.path
    original = path.read_text()
    path.write_text(original.replace(mutant.anchor, mutant.replacement, 1))
    started = time.monotonic()
    try:
        proc = _pytest(scratch, mutant.tests, timeout, pytest_args)
    except subprocess.TimeoutExpired:
        return Result(mutant, TIMEOUT, f"its tests ran over {timeout:.0f} s", time.monotonic() - started)
    finally:
        path.write_text(original)
    seconds = time.monotonic() - started
    if proc.returncode == 0:
        return Result(mutant, SURVIVED, _last_lines(proc.stdout, 1), seconds)
    if proc.returncode == 1:
        failed = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
        return Result(mutant, KILLED, failed[0] if failed else _last_lines(proc.stdout, 1), seconds)
    # A collection error is not a semantic kill: the mutant broke an import, not a claim.
    return Result(mutant, ERROR, f"pytest exit code {proc.returncode}: {_last_lines(proc.stdout + proc.stderr)}", seconds)


def run_baseline(scratch: Path, tests: Sequence[str], timeout: float, pytest_args: Sequence[str] = ()) -> str | None:
    """None if ``tests`` pass unmutated, else what failed (then no mutant of theirs means anything)."""
    try:
        proc = _pytest(scratch, tests, timeout, pytest_args)
    except subprocess.TimeoutExpired:
        return f"ran over {timeout:.0f} s"
    return None if proc.returncode == 0 else _last_lines(proc.stdout + proc.stderr)


def run_all(
    root: Path,
    mutants: Iterable[Mutant],
    timeout: float,
    pytest_args: Sequence[str] = (),
    baseline: bool = False,
    report: Callable[[Result], None] = lambda result: None,
) -> list[Result]:
    """Every mutant in one scratch copy of ``root`` (removed afterwards), in order."""
    results = []
    with tempfile.TemporaryDirectory(prefix="lockstep-mutation-") as tmp:
        scratch = Path(tmp) / "checkout"
        copy_checkout(root, scratch)
        broken: dict[tuple[str, ...], str | None] = {}
        for mutant in mutants:
            key = tuple(mutant.tests)
            if baseline and anchor_problem(scratch, mutant) is None:
                if key not in broken:
                    broken[key] = run_baseline(scratch, mutant.tests, timeout, pytest_args)
                if broken[key] is not None:
                    result = Result(mutant, ERROR, f"its tests fail without the mutant: {broken[key]}")
                    results.append(result)
                    report(result)
                    continue
            result = run_mutant(scratch, mutant, timeout, pytest_args)
            results.append(result)
            report(result)
    return results


def markdown(results: Sequence[Result]) -> str:
    """The results as a Markdown table with a count per status."""
    lines = ["| mutant | area | status | seconds | detail |", "| --- | --- | --- | --- | --- |"]
    for r in results:
        detail = r.detail.replace("|", "\\|")
        lines.append(f"| {r.mutant.name} | {r.mutant.area} | {r.status} | {r.seconds:.0f} | {detail} |")
    counts = {s: sum(r.status == s for r in results) for s in (KILLED, SURVIVED, STALE, ERROR, TIMEOUT)}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    return "\n".join([*lines, "", f"{len(results)} mutants: {summary}"])
