"""The census as a regression test: each project whose row in docs/migration.md's Census table says
``equal`` must still end equal to Lightning (`tests.census.census`), one test per project.

The projects are vendored from local snapshots of their repositories (`tests.census.vendor`); a
project whose files are not vendored, and cannot be, is skipped with the reason (the comparison
needs its source). ``python -m tests.census`` prints the whole table, rows that differ included.
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from tests.census.census import census_row
from tests.census.projects import PROJECTS
from tests.census.vendor import is_vendored, vendor
from tests.helpers.optional import importorskip

DOCS = Path(__file__).resolve().parents[2] / "docs" / "migration.md"


def documented_results() -> dict[str, str]:
    """Each project's result as the Census table in docs/migration.md gives it."""
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| [^|]+ \| (equal|differs|fails)\b", DOCS.read_text(), flags=re.M)
    return dict(rows)


EQUAL = sorted(name for name, result in documented_results().items() if result == "equal")


def test_the_docs_table_lists_every_census_project():
    assert set(documented_results()) == set(PROJECTS)


@pytest.mark.launches
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", EQUAL)
def test_a_project_the_census_found_equal_is_still_equal(name):
    importorskip("lightning", reason="the comparison needs `lightning` (the dev extra)")
    project = PROJECTS[name]
    missing = [m for m in project.requires if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{name} imports {', '.join(missing)}, which is not installed (not in the dev extra)")
    if not is_vendored(project):
        try:
            vendor(project)
        except (OSError, subprocess.CalledProcessError) as error:  # no snapshot of its repository on this machine
            pytest.skip(f"{name}: its files cannot be vendored here ({error})")
    verdict = census_row(project)
    assert verdict.result == "equal", verdict.reason
