"""The static type check: mypy over trainer/ and callbacks/ (setup.cfg [mypy]) finds no error.

It checks what name- and text-matching tests cannot: that each part uses the Trainer, the fit loop
and the callbacks as their protocols (`trainer.contracts.protocols`) type them, and that every
`# type: ignore` names its error code and is still needed (``warn_unused_ignores``).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mypy_finds_no_error_in_trainer_and_callbacks():
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "trainer", "callbacks"],
        capture_output=True, text=True, cwd=REPO, timeout=580,
    )
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert out.returncode == 0 and not errors, "mypy:\n" + "\n".join(errors or [out.stdout, out.stderr])


def test_every_type_ignore_names_its_error_code():
    bare = [
        f"{path.relative_to(REPO)}:{n}"
        for path in sorted([*REPO.glob("trainer/**/*.py"), *REPO.glob("callbacks/**/*.py")])
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"#\s*type:\s*ignore(?!\[)", line)
    ]
    assert bare == []
