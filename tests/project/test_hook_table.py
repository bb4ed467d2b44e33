"""The hook table (trainer/contracts/hook_table.py) is the one list of hooks: the stubs of `Callback`,
`TrainModule` and `DataModule`, and docs/train-module.md's hook tables, must say what it says."""
from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from callbacks import Callback
from trainer import DataModule, TrainModule
from trainer.contracts.hook_names import CALLBACK_HOOKS
from trainer.contracts.hook_table import CALLBACK, DATAMODULE, HOOKS, HOOKS_BY_NAME, MODULE, Hook
from trainer.stage import EVALUATION

ROOT = Path(__file__).resolve().parents[2]

# public methods that are not hooks: the steps, and the module's and DataModule's own API
_NOT_HOOKS = {
    "training_step", "validation_step", "test_step", "predict_step", "configure_optimizers",
    "log", "log_dict", "print", "load_from_checkpoint", "save_hyperparameters", "optimizers",
    "lr_schedulers", "manual_backward", "no_backward_sync", "clip_gradients", "toggle_optimizer",
    "untoggle_optimizer", "toggled_optimizer", "freeze", "unfreeze", "all_gather", "to_torchscript",
    "to_onnx", "state_dict", "load_state_dict", "from_datasets",
}


def _public_methods(cls: type, stop: type | None = None) -> set[str]:
    """Public callables defined by ``cls`` and its bases (up to, not including, ``stop``)."""
    names = set()
    for klass in cls.__mro__:
        if klass is object or klass is stop:
            break
        names |= {n for n in vars(klass) if not n.startswith("_")}
    return {n for n in names if callable(getattr(cls, n))}


def _arguments(fn: Any, leading: int) -> list[tuple[str, Any]]:
    """``fn``'s named parameters after self and ``leading`` more, with their defaults."""
    params = list(inspect.signature(fn).parameters.values())[1 + leading:]
    named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return [(p.name, p.default) for p in named]


def _expected(hook: Hook) -> list[str]:
    return list(hook.parameters)


def stub_problems(cls: type, who: str, stop: type | None = None) -> list[str]:
    """What ``cls``'s hook stubs get wrong against the table: missing, extra, or other arguments."""
    hooks = {h.name: h for h in HOOKS if who in h.implementers}
    defined = _public_methods(cls, stop)
    problems = [f"{cls.__name__} lacks {n}" for n in sorted(set(hooks) - defined)]
    problems += [f"{cls.__name__}.{n} is not in the hook table" for n in sorted(defined - set(hooks) - _NOT_HOOKS)]
    leading = 2 if who == CALLBACK else 0  # a callback's hooks take (trainer, module, ...)
    for name in sorted(set(hooks) & defined):
        got = _arguments(getattr(cls, name), leading)
        if [n for n, _ in got] != _expected(hooks[name]):
            problems.append(f"{cls.__name__}.{name} takes {[n for n, _ in got]}, the table says {hooks[name].args}")
        for arg in hooks[name].args:  # "dataloader_idx=0": the stub's default is 0
            if "=" in arg:
                arg_name, default = arg.split("=")
                if repr(dict(got)[arg_name]) != default:
                    problems.append(f"{cls.__name__}.{name}'s {arg_name} defaults to {dict(got)[arg_name]!r}")
    return problems


def test_callback_stubs_are_the_tables_callback_hooks():
    assert stub_problems(Callback, CALLBACK) == []
    assert set(CALLBACK_HOOKS) == {n for n in vars(Callback) if n in HOOKS_BY_NAME}


def test_module_stubs_are_the_tables_module_hooks():
    import torch

    assert stub_problems(TrainModule, MODULE, stop=torch.nn.Module) == []


def test_datamodule_stubs_are_the_tables_datamodule_hooks():
    assert stub_problems(DataModule, DATAMODULE) == []


def test_the_check_finds_a_missing_an_extra_and_a_changed_stub():
    class Broken(Callback):
        def on_validation_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=1):
            pass

        def on_some_new_hook(self, trainer, module):
            pass

    Broken.on_fit_end = None  # type: ignore[assignment]  # not callable: as if missing
    problems = stub_problems(Broken, CALLBACK)
    assert "Broken lacks on_fit_end" in problems
    assert "Broken.on_some_new_hook is not in the hook table" in problems
    assert "Broken.on_validation_batch_start's dataloader_idx defaults to 1" in problems


def test_the_evaluation_loops_hook_names_are_the_tables():
    for settings in EVALUATION.values():
        events = ["start", "epoch_start", "batch_start", "batch_end", "epoch_end", "end", "model_eval"]
        names = [settings.hook(event) for event in events]
        assert all(n in HOOKS_BY_NAME for n in names)
        assert all(settings.name in n for n in names)
    # Lightning defines on_predict_model_train and never calls it: no run does, in the table
    assert HOOKS_BY_NAME["on_predict_model_train"].stages == ()


def documented_module_hooks(text: str) -> set[str]:
    """Every ``name(args)`` the first column of the tables of "Data and set-up" and "Hooks" shows."""
    sections = re.split(r"^## ", text, flags=re.M)
    wanted = [s for s in sections if s.startswith(("Data and set-up\n", "Hooks\n"))]
    spans = set()
    for section in wanted:
        for line in section.splitlines():
            if line.startswith("| `"):
                spans |= set(re.findall(r"`([a-z_]+\([^`]*\))`", line.split(" | ")[0]))
    return spans


def test_docs_hook_tables_are_the_tables_module_hooks():
    text = (ROOT / "docs" / "train-module.md").read_text()
    documented = documented_module_hooks(text)
    table = {h.signature for h in HOOKS if MODULE in h.implementers}
    assert sorted(documented - table) == [], "docs/train-module.md shows hooks the table does not have"
    assert sorted(table - documented) == [], "docs/train-module.md misses hooks of the table"


def test_the_docs_check_fails_on_a_missing_or_changed_hook():
    text = (ROOT / "docs" / "train-module.md").read_text()
    changed = text.replace("`on_train_batch_start(batch, batch_idx)`", "`on_train_batch_start(batch)`")
    assert "on_train_batch_start(batch)" in documented_module_hooks(changed)
    assert "on_train_batch_start(batch, batch_idx)" not in documented_module_hooks(changed)
