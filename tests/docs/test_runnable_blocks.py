"""Every code block marked runnable on a docs page or in the README runs, so no page can contradict the code silently.

A runnable block is a ```python fence right below a line that is exactly ``<!-- runs -->`` (an
HTML comment: readers of the site and of the README do not see the marker). A page's runnable blocks run in order, in one namespace, in a fresh working
directory: a later block may use what an earlier one defined. Keep them small: the CPU, a few
steps, files in the working directory.
"""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
RUNNABLE = re.compile(r"^<!-- runs -->\n```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
# Any fence or HTML comment that mentions "runs": a misspelt marker must not silently skip a block.
MARKED = re.compile(r"^\s*(```.*\bruns\b.*|<!--.*\bruns\b.*-->)\s*$", re.MULTILINE)


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(page: Path) -> list[str]:
    return RUNNABLE.findall(page.read_text())


RUNNABLE_PAGES = [page for page in PAGES if _blocks(page)]


def test_every_fence_marked_runs_is_a_runnable_block():
    for page in PAGES:
        text = page.read_text()
        assert len(MARKED.findall(text)) == len(RUNNABLE.findall(text)), (
            f'{_name(page)}: a fence or comment mentions "runs" but is not exactly <!-- runs --> above a ```python fence'
        )


def test_the_pages_with_complete_programs_are_runnable():
    names = {_name(page) for page in RUNNABLE_PAGES}
    assert {"docs/getting-started.md", "docs/concepts.md", "docs/migration.md", "README.md"} <= names


def test_runnable_blocks_name_their_accelerator():
    """As in the tests (tests/project/test_suite_portability.py): "auto" would pick a GPU where there is one."""
    for page in RUNNABLE_PAGES:
        for index, block in enumerate(_blocks(page)):
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "Trainer":
                    assert any(k.arg == "accelerator" for k in node.keywords), (
                        f"{_name(page)} block {index}: {ast.unparse(node)} does not pass accelerator="
                    )


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=_name)
def test_the_runnable_blocks_of_a_page_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever the blocks write lands here
    environ = dict(os.environ)  # seed_everything exports its seed: later tests must not inherit it
    namespace: dict[str, object] = {"__name__": "docs_page"}
    try:
        for index, block in enumerate(_blocks(page)):
            try:
                exec(compile(block, f"{page}:block{index}", "exec"), namespace)
            except Exception as error:  # name the block that failed
                pytest.fail(f"{_name(page)} block {index} failed: {type(error).__name__}: {error}")
    finally:
        os.environ.clear()
        os.environ.update(environ)
