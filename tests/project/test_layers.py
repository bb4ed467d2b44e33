"""The floors of trainer/: no two sub-folders import each other at run time, except the pairs
docs/architecture.md lists with a reason; the checkpoint-file floor imports nothing above it.

Imports are read from the syntax tree (module level and inside functions, which run when the
function does; not those under ``if TYPE_CHECKING:``)."""
from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.source_imports import runtime_imports

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "trainer"
DOC = REPO / "docs" / "architecture.md"
SECTION = "## Sub-folders that import each other"
# one exception a line: - `a/` ↔ `b/`: why
_EXCEPTION = re.compile(r"^- `(\w+)/` ↔ `(\w+)/`: (\S.*)$")


def _sub_folder(module: str) -> str | None:
    """The sub-folder of trainer/ that ``module`` is in (None for trainer/'s own files)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[0] == "trainer" and (TRAINER / parts[1]).is_dir():
        return parts[1]
    return None


def folder_imports() -> dict[tuple[str, str], list[str]]:
    """(importing sub-folder, imported sub-folder) -> the imports that make the edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(TRAINER.glob("*/**/*.py")):
        here = path.relative_to(TRAINER).parts[0]
        for module in sorted(runtime_imports(path)):
            there = _sub_folder(module)
            if there is not None and there != here:
                edges.setdefault((here, there), []).append(f"{path.relative_to(REPO)} imports {module}")
    return edges


def mutual_pairs() -> dict[frozenset[str], list[str]]:
    edges = folder_imports()
    return {frozenset(pair): edges[pair] + edges[pair[::-1]] for pair in edges if pair[::-1] in edges and pair[0] < pair[1]}


def documented_exceptions() -> dict[frozenset[str], str]:
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/architecture.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    found = {}
    for line in section.splitlines():
        match = _EXCEPTION.match(line)
        if match:
            found[frozenset(match.group(1, 2))] = match.group(3)
    return found


def test_no_two_sub_folders_import_each_other_unless_the_architecture_says_why():
    allowed = documented_exceptions()
    offenders = {
        " <-> ".join(sorted(pair)): where for pair, where in mutual_pairs().items() if pair not in allowed
    }
    assert offenders == {}, "sub-folders importing each other (fix it, or list the pair with its reason in docs/architecture.md)"


def test_every_listed_exception_is_still_needed():
    mutual = mutual_pairs()
    stale = sorted(" <-> ".join(sorted(pair)) for pair in documented_exceptions() if pair not in mutual)
    assert stale == [], "docs/architecture.md lists pairs that no longer import each other: remove them"


def test_the_checkpoint_file_floor_imports_only_the_contracts():
    above = {
        f"{path.relative_to(REPO)} imports {module}"
        for path in (TRAINER / "checkpoint_io").glob("*.py")
        for module in runtime_imports(path)
        if module.split(".")[0] == "trainer"
        and not (module.startswith("trainer.checkpoint_io") or module.startswith("trainer.contracts"))
    }
    assert above == set()


def test_the_strategies_reach_checkpoint_files_only_through_the_floor():
    edges = folder_imports()
    assert ("strategies", "checkpointing") not in edges, edges.get(("strategies", "checkpointing"))
    assert ("strategies", "checkpoint_io") in edges


def test_the_check_reads_imports_that_run_and_skips_annotation_ones(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import trainer.loops.fit_loop\n"
        "if TYPE_CHECKING:\n"
        "    from trainer.data import datamodule\n"
        "def f():\n"
        "    from trainer.strategies.fsdp import FSDPStrategy\n"
    )
    assert {m for m in runtime_imports(source) if m.startswith("trainer")} == {"trainer.loops.fit_loop", "trainer.strategies.fsdp"}
    assert _sub_folder("trainer.strategies.fsdp") == "strategies" and _sub_folder("trainer.rng") is None
