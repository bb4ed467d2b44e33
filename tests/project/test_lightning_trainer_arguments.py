"""Every argument of Lightning's ``Trainer`` is taken by Lockstep's, or refused by name.

The installed Lightning's ``Trainer.__init__`` signature is walked: each argument is one of
Lockstep's (honoured), or in `REFUSED_TRAINER_ARGUMENTS` (taken only at Lightning's default; any
other value fails at ``Trainer(...)`` naming it and what to use instead). An argument Lightning
adds fails the walk. The Lightning arguments Lockstep honours (``benchmark``, ``inference_mode``,
``detect_anomaly``, ``enable_autolog_hparams``) are compared with Lightning: one module class body
records what each changes, on both frameworks.
"""
from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.optional import importorskip

from callbacks.logger import Logger
from trainer import Trainer, TrainModule
from trainer.lightning.unsupported import REFUSED_TRAINER_ARGUMENTS

pl = importorskip("lightning.pytorch", reason="Lightning 2.x (the `dev` extra) is not installed: nothing to compare with")

QUIET = dict(enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    return {k: p for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self"}


def test_every_lightning_trainer_argument_is_taken_or_refused():
    lightning, lockstep = _parameters(pl.Trainer), _parameters(Trainer)
    assert [name for name in lightning if name not in lockstep] == []
    assert set(REFUSED_TRAINER_ARGUMENTS) <= set(lightning)  # no stale entry
    for name, (default, _) in REFUSED_TRAINER_ARGUMENTS.items():
        assert lightning[name].default == default == lockstep[name].default, name


@pytest.mark.parametrize("name, value", [("barebones", True), ("plugins", [object()]), ("model_registry", "my-model")])
def test_a_refused_trainer_argument_fails_naming_it_and_the_alternative(name, value):
    alternative = REFUSED_TRAINER_ARGUMENTS[name][1]
    with pytest.raises(NotImplementedError, match=rf"Trainer\({name}=.*not supported by Lockstep") as err:
        Trainer(accelerator="cpu", logger=False, **{name: value})
    assert alternative in str(err.value)


def test_lightnings_defaults_of_the_refused_arguments_are_taken():
    Trainer(accelerator="cpu", logger=False, barebones=False, plugins=None, model_registry=None)
    Trainer(accelerator="cpu", logger=False, plugins=[])


def test_an_unknown_argument_is_still_pythons_type_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_epoch'"):
        Trainer(accelerator="cpu", max_epoch=1)


# -- the honoured Lightning arguments, compared --------------------------------------------------
class _Body:
    def __init__(self, events: list[Any]) -> None:
        super().__init__()
        self.save_hyperparameters({"width": 3})
        torch.manual_seed(0)
        self.net = nn.Linear(2, 1)
        self.events = events

    def training_step(self, batch, batch_idx):
        self.events.append(("train", torch.is_anomaly_enabled(), torch.is_grad_enabled()))
        return self.net(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.events.append(("val", torch.is_inference_mode_enabled(), torch.is_grad_enabled()))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _logger_body(events: list[Any]) -> dict[str, Any]:
    def log_hyperparams(self, params, *args, **kwargs):
        events.append(("hparams", dict(params)))

    def log_metrics(self, metrics, step=None):
        pass

    return {"log_hyperparams": log_hyperparams, "log_metrics": log_metrics, "name": "rec", "version": 0,
            "log_dir": None}


def _run(framework: str, root: Any, **arguments: Any) -> tuple[list[Any], list[Any], bool]:
    events: list[Any] = []
    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    before = torch.backends.cudnn.benchmark
    try:
        if framework == "lightning":
            logger = type("L", (pl.loggers.Logger,), _logger_body(events))()
            module = type("M", (_Body, pl.LightningModule), {})(events)
            trainer = pl.Trainer(accelerator="cpu", devices=1, logger=logger, default_root_dir=root, max_epochs=1,
                                 num_sanity_val_steps=1, **QUIET, **arguments)
        else:
            logger = type("L", (Logger,), _logger_body(events))()
            module = type("M", (_Body, TrainModule), {})(events)
            trainer = Trainer(accelerator="cpu", logger=logger, default_root_dir=root, max_epochs=1,
                              num_sanity_val_steps=1, **QUIET, **arguments)
        benchmark = torch.backends.cudnn.benchmark
        trainer.fit(module, loader, loader)
        fit = list(events)
        trainer.validate(module, loader, verbose=False)
    finally:
        torch.backends.cudnn.benchmark = before
    # Lightning logs the hyperparameters again at validate; Lockstep once per fit (docs/migration.md)
    validate = [e for e in events[len(fit):] if e[0] != "hparams"]
    return fit, validate, benchmark


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"inference_mode": False},
        {"detect_anomaly": True},
        {"enable_autolog_hparams": False},
        {"benchmark": True},
        {"benchmark": False},
    ],
    ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()) or "defaults",
)
def test_a_honoured_lightning_argument_changes_what_it_changes_in_lightning(arguments, tmp_path):
    torch.backends.cudnn.benchmark = not arguments.get("benchmark", False)  # so that setting it shows
    try:
        want = _run("lightning", tmp_path / "lightning", **arguments)
        torch.backends.cudnn.benchmark = not arguments.get("benchmark", False)
        got = _run("lockstep", tmp_path / "lockstep", **arguments)
    finally:
        torch.backends.cudnn.benchmark = False
    assert got == want


def test_benchmark_is_off_under_deterministic_unless_asked_for(tmp_path):
    before = torch.backends.cudnn.benchmark
    try:
        for framework in (pl.Trainer, Trainer):
            torch.backends.cudnn.benchmark = True
            framework(accelerator="cpu", logger=False, deterministic=True)
            assert torch.backends.cudnn.benchmark is False, framework
    finally:
        torch.backends.cudnn.benchmark = before
        torch.use_deterministic_algorithms(False)
