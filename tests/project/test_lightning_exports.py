"""Every callback and logger class Lightning exports is Lockstep's too (importable from `callbacks`,
accepting every argument of Lightning's constructor), or docs/migration.md lists it (or the
argument) as not provided, and importing it names it."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from tests.helpers.optional import importorskip

import callbacks

lightning_callbacks = importorskip("lightning.pytorch.callbacks", reason="needs `lightning` (the bench extra)")
lightning_loggers = importorskip("lightning.pytorch.loggers", reason="needs `lightning` (the bench extra)")

MIGRATION = (Path(__file__).resolve().parents[2] / "docs" / "migration.md").read_text()


def _paragraph(title: str) -> str:
    start = MIGRATION.index(f"**{title}**")
    end = MIGRATION.find("\n\n", start)
    return MIGRATION[start:end if end != -1 else len(MIGRATION)]


NOT_PROVIDED = set(re.findall(r"`(\w+)`", _paragraph("Not provided")))
MISSING_ARGS = {
    name: {a.strip() for a in args.split(",")}
    for name, args in re.findall(r"`(\w+)\(([\w, ]+)\)`", _paragraph("Arguments not provided"))
}
EXPORTS = sorted({(n, m) for m in (lightning_callbacks, lightning_loggers) for n in m.__all__})


def _names(signature: inspect.Signature) -> tuple[set[str], bool]:
    ps = signature.parameters.values()
    named = {p.name for p in ps if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return named, any(p.kind == p.VAR_KEYWORD for p in ps)


@pytest.mark.parametrize("name, module", EXPORTS, ids=[n for n, _ in EXPORTS])
def test_each_lightning_export_is_provided_or_listed(name, module):
    if name in NOT_PROVIDED:
        with pytest.raises(ImportError, match=rf"{name}.*not provided by Lockstep.*docs/migration\.md"):
            exec(f"from callbacks import {name}", {})
        return
    ours = getattr(callbacks, name, None)
    assert ours is not None, f"{name}: neither in callbacks nor listed as not provided in docs/migration.md"
    theirs, _ = _names(inspect.signature(getattr(module, name)))
    mine, takes_any = _names(inspect.signature(ours))
    missing = set() if takes_any else theirs - mine
    assert missing == MISSING_ARGS.get(name, set()), f"{name}: arguments missing {sorted(missing)}; docs/migration.md lists {sorted(MISSING_ARGS.get(name, set()))}"


def test_the_list_names_only_what_is_missing():
    assert NOT_PROVIDED, "the paragraph was not found"
    for name in NOT_PROVIDED:
        assert not hasattr(type(callbacks), name)
        assert name not in callbacks.__all__
