"""docs/migration.md's examples run: every ```python title="runs"``` block, in order, in one namespace."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "migration.md"
RUNNABLE = re.compile(r'^```python title="runs"\n(.*?)^```$', re.DOTALL | re.MULTILINE)


def test_the_page_has_runnable_examples():
    assert len(RUNNABLE.findall(PAGE.read_text())) >= 2


def test_the_migration_page_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever the examples write lands here
    namespace: dict[str, object] = {"__name__": "migration_page"}
    for index, block in enumerate(RUNNABLE.findall(PAGE.read_text())):
        try:
            exec(compile(block, f"{PAGE}:block{index}", "exec"), namespace)
        except Exception as error:  # name the block that failed
            pytest.fail(f"docs/migration.md block {index} failed: {type(error).__name__}: {error}")
