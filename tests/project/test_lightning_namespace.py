"""Issue 32 item 3: every public name of ``lightning.pytorch`` (and of ``lightning``) resolves under
`trainer` the way Lightning projects write it (``pl.callbacks.ModelCheckpoint``, ``L.Callback``,
``from trainer.utilities import rank_zero_only``), or raises an error that names it and what to use
instead (`trainer.unsupported.NOT_PROVIDED_NAMES`, the `callbacks` package's ``NOT_PROVIDED``).
The walk reads the installed Lightning, so a name Lightning adds fails here until it is provided
or listed."""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import types

import pytest

from tests.helpers.optional import importorskip

import trainer
from trainer.unsupported import NOT_PROVIDED_NAMES

lightning = importorskip("lightning", reason="needs `lightning` (the dev extra)")
pl = importlib.import_module("lightning.pytorch")

# lightning.pytorch's public submodules that Lightning projects import from
SUBMODULES = ["callbacks", "loggers", "strategies", "utilities", "cli", "tuner", "core", "accelerators", "trainer", "demos"]
# lightning.pytorch.demos' own modules: trainer.demos mirrors each (`from ...demos.boring_classes import RandomDataset`)
DEMOS_SUBMODULES = ["boring_classes", "mnist_datamodule", "transformer", "lstm"]
# submodules Lockstep has no counterpart of: reading one names what to use instead
ABSENT_SUBMODULES = ["plugins", "profilers", "serve"]
# what projects import from lightning.pytorch.utilities' own submodules; trainer.utilities has them flat
UTILITIES_SUBMODULES = {
    "rank_zero": ["rank_zero_only", "rank_zero_info", "rank_zero_warn", "rank_zero_deprecation"],
    "types": ["STEP_OUTPUT", "OptimizerLRScheduler", "TRAIN_DATALOADERS", "EVAL_DATALOADERS"],
    "seed": ["isolate_rng"],
    "grads": ["grad_norm"],
    "exceptions": ["MisconfigurationException"],
}


def _public(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:  # lightning.pytorch.cli: what it defines itself
        names = [
            n for n, v in vars(module).items()
            if not n.startswith("_") and (inspect.isclass(v) or inspect.isfunction(v)) and v.__module__ == module.__name__
        ]
    return sorted(set(names) - {"__version__"})


def _lightning_names() -> list[tuple[str, str]]:
    names = [("", n) for n in sorted({*_public(pl), *_public(lightning)})]
    for sub in SUBMODULES:
        names += [(sub, n) for n in _public(importlib.import_module(f"lightning.pytorch.{sub}"))]
    for sub, members in UTILITIES_SUBMODULES.items():
        module = importlib.import_module(f"lightning.pytorch.utilities.{sub}")
        names += [("utilities", n) for n in members if hasattr(module, n)]
    for sub in DEMOS_SUBMODULES:
        names += [(f"demos.{sub}", n) for n in _public(importlib.import_module(f"lightning.pytorch.demos.{sub}"))]
    return sorted(set(names))


NAMES = _lightning_names()


@pytest.mark.parametrize("sub, name", NAMES, ids=[f"{s}.{n}" if s else n for s, n in NAMES])
def test_each_lightning_name_resolves_or_names_the_alternative(sub, name):
    where = "trainer" + (f".{sub}" if sub else "")
    module = importlib.import_module(where)
    try:
        value = getattr(module, name)
    except AttributeError as err:
        message = str(err)
        assert name in message and "not provided by Lockstep" in message and "use " in message, message
        assert not hasattr(module, name)  # hasattr / getattr(..., None) keep working for feature checks
        with pytest.raises(ImportError, match=rf"{name}.*not provided by Lockstep.*use "):
            exec(f"from {where} import {name}", {})
        return
    assert value is not None
    exec(f"from {where} import {name}", {})  # the way projects write it


def test_the_classes_are_lockstep_s_own():
    import callbacks

    assert trainer.callbacks.ModelCheckpoint is callbacks.ModelCheckpoint
    assert trainer.loggers.TensorBoardLogger is callbacks.TensorBoardLogger
    assert trainer.Callback is callbacks.Callback
    assert trainer.strategies.DDPStrategy is trainer.DDPStrategy
    assert trainer.core.LightningModule is trainer.TrainModule


@pytest.mark.parametrize("sub", ABSENT_SUBMODULES)
def test_a_submodule_lockstep_lacks_is_named(sub):
    assert importlib.util.find_spec(f"lightning.pytorch.{sub}") is not None
    with pytest.raises(AttributeError, match=rf"trainer.{sub}: Lightning's `{sub}` is not provided by Lockstep; use "):
        getattr(trainer, sub)


def test_the_list_names_only_what_lightning_has_and_lockstep_lacks():
    for key in NOT_PROVIDED_NAMES:
        sub, _, name = key.rpartition(".")
        lightning_module = importlib.import_module(f"lightning.pytorch.{sub}") if sub else pl
        is_submodule = not sub and importlib.util.find_spec(f"lightning.pytorch.{name}") is not None
        assert is_submodule or hasattr(lightning_module, name) or hasattr(lightning, name), f"{key}: not a Lightning name"
        module = importlib.import_module(f"trainer.{sub}") if sub else trainer
        if is_submodule and name == "loops":  # Lockstep's own loops package, not Lightning's: the runner refuses it
            continue
        assert not hasattr(module, name), f"{key}: Lockstep provides it; drop it from NOT_PROVIDED_NAMES"


def test_grad_norm_gives_lightning_s_keys_and_values():
    import torch
    from lightning.pytorch.utilities import grad_norm as lightning_grad_norm

    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    net(torch.randn(4, 3)).sum().backward()
    for p in (2, 1.0, "inf"):
        ours, theirs = trainer.utilities.grad_norm(net, p), lightning_grad_norm(net, p)
        assert ours.keys() == theirs.keys()
        assert all(torch.allclose(ours[k], theirs[k]) for k in ours)


def test_cli_lightning_logo_resolves_though_lightning_s_all_lacks_it():
    # Lightning's examples call it first thing (`from lightning.pytorch import cli_lightning_logo`)
    import trainer
    import trainer.cli

    assert trainer.cli_lightning_logo is trainer.cli.cli_lightning_logo
    lightning = importorskip("lightning.pytorch", reason="the comparison needs `lightning` (the dev extra)")
    assert callable(lightning.cli_lightning_logo)


def test_every_module_of_lightning_s_demos_is_mirrored():
    import pkgutil

    import lightning.pytorch.demos as demos

    assert sorted(m.name for m in pkgutil.iter_modules(demos.__path__)) == sorted(DEMOS_SUBMODULES)
