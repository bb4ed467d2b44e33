"""The library census as a test (issue 41, build item 7): each library of `driver.LIBRARIES` whose row in
docs/migration.md's "Library census" table says ``equal`` for a process count must still give
Lightning's numbers there, run under Lightning and under ``python -m trainer.as_lightning``.

It needs the libraries (``requirements.txt``, installed beside the dev install without moving torch or
Lightning), so it runs as CI's separate census step: ``LOCKSTEP_LIBRARY_CENSUS=1 python -m pytest -m
library_census tests/census/libraries``. Elsewhere each row skips with the reason, and a library that
is not installed skips naming the requirements file. ``python -m tests.census.libraries.driver``
prints every row, those that differ included.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.census.libraries.driver import LIBRARIES, census_row

DOCS = Path(__file__).resolve().parents[3] / "docs" / "migration.md"
ENABLE = "LOCKSTEP_LIBRARY_CENSUS"


def documented_results() -> dict[tuple[str, int], str]:
    """Each (library, process count)'s result as the Library census table in docs/migration.md gives it."""
    result = r"(equal|differs|fails|not measured)"
    rows = re.findall(rf"^\| `(\w+)` \| [^|]+ \| [^|]+ \| [^|]+ \| {result}\b[^|]*\| {result}\b", DOCS.read_text(), flags=re.M)
    results: dict[tuple[str, int], str] = {}
    for name, one, two in rows:
        results[(name, 1)], results[(name, 2)] = one, two
    return results


EQUAL = sorted(key for key, result in documented_results().items() if result == "equal")


def test_the_docs_table_lists_every_census_library():
    assert {name for name, _ in documented_results()} == set(LIBRARIES)
    assert all((path.stem[len("lib_"):] in LIBRARIES) for path in Path(__file__).parent.glob("lib_*.py"))


@pytest.mark.library_census
@pytest.mark.launches
@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("name, devices", EQUAL, ids=[f"{n}-{d}p" for n, d in EQUAL])
def test_a_library_the_census_found_equal_is_still_equal(name, devices):
    if os.environ.get(ENABLE) != "1":
        pytest.skip(f"the library census runs as CI's own step ({ENABLE}=1 python -m pytest -m library_census "
                    "tests/census/libraries, with requirements.txt installed)")
    library = LIBRARIES[name]
    missing = library.missing()
    if missing:
        pytest.skip(missing)
    verdict = census_row(library, devices)
    assert verdict.result == "equal", verdict.reason
