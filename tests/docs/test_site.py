"""The documentation site builds with ``mkdocs build --strict`` (no broken link or anchor, no page
missing from the nav, the API reference generated from the docstrings) and its nav lists every page."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="the docs site's tests need pyyaml and mkdocs (the docs or dev extra)")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _nav_pages(nav: object) -> list[str]:
    """The page paths of a mkdocs nav (nested lists of {title: page or list})."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    raise TypeError(f"unexpected nav entry {nav!r}")


def test_the_nav_lists_every_page_once():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_pages(config["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "scripts" not in p.parts)
    assert sorted(set(nav)) == pages, "mkdocs.yml's nav and the pages of docs/ differ"
    assert len(nav) == len(set(nav)), "a page is in the nav twice"


@pytest.mark.launches
def test_the_site_builds_strictly(tmp_path):
    for package in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(package, reason=f"{package} is not installed (the `docs` extra): pip install -e '.[docs]'")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=100, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert build.returncode == 0, build.stderr[-4000:]
    # the API reference was generated from the docstrings, not left as the ::: directive
    reference = (tmp_path / "site" / "reference" / "module" / "index.html").read_text()
    assert "training_step" in reference and ":::" not in reference
    assert (tmp_path / "site" / "images" / "tensorboard_digits.png").is_file()
    # the Trainer's page shows the public API only: no internal base class or launcher method
    trainer_page = (tmp_path / "site" / "reference" / "trainer" / "index.html").read_text()
    internals = ("TrainerSettings", "RunStateFields", "BatchCounts", "adopt_spawned_run", "TrainerConfig")
    assert [name for name in internals if name in trainer_page] == []
    assert "Bases:" not in trainer_page
    # ...and its signature in a block of its own, one argument a line, not a heading of 50 arguments
    heading = re.search(r'<h2 id="trainer\.Trainer".*?</h2>', trainer_page, re.S)
    assert heading is not None and "max_epochs" not in heading.group(0)
    assert "max_epochs" in trainer_page and "fit" in trainer_page and "save_checkpoint" in trainer_page
