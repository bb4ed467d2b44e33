"""The files and names the docs pages and the README point at exist: a moved test file or a renamed
attribute fails here instead of leaving a page that sends readers nowhere."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

from trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
# Repository paths as the pages write them (in backticks or links): trainer/loops/fit_loop.py, tests/...
PATH = re.compile(r"(?<![\w/.])((?:trainer|callbacks|tests|examples|benchmarks|docs|\.ci)/[\w./-]*\w)")
# Dotted names in code spans: the packages' modules and attributes, or a Trainer's (`trainer.global_step`).
NAME = re.compile(r"`((?:trainer|callbacks)(?:\.\w+)+)")
# A placeholder in a table, not a name.
PLACEHOLDERS = {"callbacks.X"}


def _ignored_folders(gitignore: str) -> list[str]:
    """The folders `.gitignore` names by their full path (`tests/census/vendor/`): what a command
    writes there (a census run, a benchmark) is absent from a fresh clone, so a page may name it.
    Only literal, rooted folders count: a pattern like `*.ckpt` or `logs/` would excuse any path."""
    folders = []
    for line in gitignore.splitlines():
        line = line.strip()
        literal = not line.startswith(("!", "#")) and not any(c in line for c in "*?[")
        if literal and line.endswith("/") and "/" in line.rstrip("/"):
            folders.append(line.lstrip("/"))
    return folders


IGNORED_FOLDERS = _ignored_folders((ROOT / ".gitignore").read_text())


def _written_by_a_command(path: str) -> bool:
    return any(f"{path}/".startswith(folder) for folder in IGNORED_FOLDERS)


def _attribute_chain(obj: object, parts: list[str]) -> bool:
    """Whether ``obj.<parts...>`` can be read. A property that raises is a broken name: a page may
    only point at what a reader can read (an attribute that needs a running fit is documented on
    an object that has one)."""
    try:
        for part in parts:
            obj = getattr(obj, part)
    except Exception:  # noqa: BLE001 - AttributeError, or any error a property raises
        return False
    return True


def _resolves(name: str, trainer: Trainer) -> bool:
    parts = name.split(".")
    for split in range(len(parts), 0, -1):  # the longest importable module, then its attributes
        try:
            module = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        if _attribute_chain(module, parts[split:]):
            return True
        break
    return _attribute_chain(trainer, parts[1:])  # `trainer.x` on the pages is mostly a Trainer object


def test_the_repository_paths_on_the_pages_exist():
    missing = [
        f"{page.relative_to(ROOT)}: {path}"
        for page in PAGES
        for path in sorted(set(PATH.findall(page.read_text())))
        if not (ROOT / path).exists() and not _written_by_a_command(path)
    ]
    assert not missing, "pages name files that do not exist:\n" + "\n".join(missing)


def test_the_dotted_names_on_the_pages_exist(tmp_path):
    trainer = Trainer(accelerator="cpu", default_root_dir=tmp_path, enable_progress_bar=False)  # the default logger
    missing = [
        f"{page.relative_to(ROOT)}: {name}"
        for page in PAGES
        for name in sorted(set(NAME.findall(page.read_text())))
        if name not in PLACEHOLDERS and not _resolves(name, trainer)
    ]
    assert not missing, "pages name attributes that do not exist:\n" + "\n".join(missing)


def test_only_paths_under_an_ignored_folder_may_be_missing():
    folders = _ignored_folders("build/\n*.ckpt\n!tests/fixtures/*.ckpt\ntests/census/vendor/\n/.ci/cpu-venv/\n")
    assert folders == ["tests/census/vendor/", ".ci/cpu-venv/"]
    assert "tests/census/vendor/" in IGNORED_FOLDERS  # the folder docs/migration.md names
    assert _written_by_a_command("tests/census/vendor")
    assert _written_by_a_command("tests/census/vendor/mnist/train.py")
    assert not _written_by_a_command("tests/census/vendored")
    assert not _written_by_a_command("tests/census/missing.py")
    assert not _written_by_a_command("examples/last.ckpt")


class _Raising:
    @property
    def broken(self) -> int:
        raise RuntimeError("needs a running fit")

    @property
    def fine(self) -> int:
        return 1


def test_a_property_that_raises_is_not_a_valid_reference():
    assert _attribute_chain(_Raising(), ["fine", "real"])  # int.real
    assert not _attribute_chain(_Raising(), ["broken"])
    assert not _attribute_chain(_Raising(), ["missing"])
    assert not _attribute_chain(_Raising(), ["fine", "missing"])
