"""Fit the same demo on Lightning and on Lockstep from the same seed, for tests/demos.

`demos(name)` gives Lightning's ``lightning.pytorch.demos`` or Lockstep's `trainer.lightning.demos` package
(submodules imported); `fit_both` builds one demo module on each (from the same seed) and fits it
with the framework's own Trainer, returning both modules and both trainers; `write_corpus` writes a
small WikiText-2-shaped text file.
"""
from __future__ import annotations

import importlib
import types
from pathlib import Path
from typing import Any, Callable

import torch

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
SUBMODULES = ("boring_classes", "mnist_datamodule", "transformer", "lstm")


def demos(name: str) -> types.SimpleNamespace:
    """The demos of ``"lightning"`` or ``"lockstep"``: its package, submodules and Trainer as one namespace."""
    package = "lightning.pytorch.demos" if name == "lightning" else "trainer.lightning.demos"
    framework = importlib.import_module("lightning.pytorch" if name == "lightning" else "trainer")
    modules = {sub: importlib.import_module(f"{package}.{sub}") for sub in SUBMODULES}
    return types.SimpleNamespace(Trainer=framework.Trainer, **modules)


def fit_both(build: Callable[[types.SimpleNamespace], Any], seed: int = 0, call: str = "fit",
             **trainer_args: Any) -> dict[str, tuple[Any, Any]]:
    """``build(demos)`` then ``Trainer(accelerator="cpu", **trainer_args).<call>(module)``, from ``seed``, on each framework.

    ``build`` returns the module, or ``(module, keyword arguments of the call)``.
    """
    runs = {}
    for name in ("lightning", "lockstep"):
        d = demos(name)
        torch.manual_seed(seed)
        built = build(d)
        module, call_args = built if isinstance(built, tuple) else (built, {})
        trainer = d.Trainer(accelerator="cpu", **{**QUIET, **trainer_args})
        getattr(trainer, call)(module, **call_args)
        runs[name] = (module, trainer)
    return runs


def max_parameter_difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    """The largest absolute difference between the two modules' state dicts (same keys asserted)."""
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max(float((sa[k].double() - sb[k].double()).abs().max()) for k in sa) if sa else 0.0


def write_corpus(folder: Path, lines: int = 300, words_per_line: int = 8) -> Path:
    """A WikiText-2-shaped text of ``lines`` lines over a 40-word vocabulary (blank lines among them)."""
    g = torch.Generator().manual_seed(0)
    words = [f"w{i}" for i in range(40)]
    text = [" ".join(words[int(j)] for j in torch.randint(0, 40, (words_per_line,), generator=g)) if i % 25 else ""
            for i in range(lines)]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "wikitext-2.txt"
    path.write_text(" \n".join(text) + "\n", encoding="utf8")
    return path
