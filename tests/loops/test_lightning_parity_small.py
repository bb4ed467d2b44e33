"""Issue 32 items 4, 5 and 6, against the installed Lightning: ``save_hyperparameters`` (from a base
class's ``__init__``, ``ignore=``, ``logger=False``, a dict or Namespace, ``*args`` / ``**kwargs``),
the precision flags on CPU (what each becomes, the warnings, the numbers), the stage flags
(``trainer.training`` and its siblings, in every hook), and the types of the logged values."""
from __future__ import annotations

import argparse
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.optional import importorskip

import trainer as lockstep

pl = importorskip("lightning.pytorch", reason="needs `lightning` (the dev extra)")
FRAMEWORKS = {"lockstep": lockstep, "lightning": pl}
QUIET = {"accelerator": "cpu", "logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
         "enable_model_summary": False}


def _classes(framework):
    """The same module classes, written once, built on either framework's LightningModule."""

    class Base(framework.LightningModule):
        def __init__(self, optimizer: str = "sgd", lr: float = 0.05, **kwargs):
            super().__init__()
            self.save_hyperparameters()

    class Child(Base):
        def __init__(self, width: int, backbone: nn.Module | None = None, lr: float = 0.1, **kwargs):
            super().__init__(lr=lr, **kwargs)

    class ChildIgnoring(Base):
        def __init__(self, width: int, backbone: nn.Module | None = None, lr: float = 0.1):
            super().__init__(lr=lr)
            self.save_hyperparameters(ignore=["backbone", "optimizer"])

    class VarArgs(framework.LightningModule):
        def __init__(self, *args, depth: int = 2, **kwargs):
            super().__init__()
            self.save_hyperparameters()

    class Named(framework.LightningModule):
        def __init__(self, a: int = 1, b: int = 2, c: int = 3):
            super().__init__()
            self.save_hyperparameters("a", "c", logger=False)

    class FromDict(framework.LightningModule):
        def __init__(self, config):
            super().__init__()
            self.save_hyperparameters(config)

    class TwoCalls(framework.LightningModule):
        def __init__(self, a: int = 1, b: int = 2):
            super().__init__()
            self.save_hyperparameters("a")
            self.save_hyperparameters({"extra": 9})

    return Base, Child, ChildIgnoring, VarArgs, Named, FromDict, TwoCalls


CASES = {
    "base_call_collects_subclass": lambda c: c[1](width=3, extra="x"),
    "ignore_drops_earlier_saved": lambda c: c[2](width=3, backbone=nn.Linear(1, 1)),
    "var_args_and_kwargs": lambda c: c[3](1, 2, depth=4, dropout=0.5),
    "named_logger_false": lambda c: c[4](a=10, b=20),
    "dict": lambda c: c[5]({"lr": 0.3, "layers": [1, 2]}),
    "namespace": lambda c: c[5](argparse.Namespace(lr=0.3, name="n")),
    "two_calls_merge": lambda c: c[6](a=5),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_save_hyperparameters_records_what_lightning_records(case):
    made = {}
    for name, framework in FRAMEWORKS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's nn.Module advice, on both
            module = CASES[case](_classes(framework))
        made[name] = (dict(module.hparams), dict(module.hparams_initial), module._log_hyperparams)
    assert made["lockstep"] == made["lightning"]


PRECISIONS = ["32-true", "32", 32, "bf16-mixed", "bf16", "bf16-true", "16-mixed", "16", 16, "16-true", "64-true", "64", 64]


def _fit(framework, precision):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    seen = {}

    class Module(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = net

        def training_step(self, batch, batch_idx):
            x, y = batch
            seen["dtype"] = (x.dtype, torch.zeros(1).dtype)
            return nn.functional.mse_loss(self.net(x).float(), y.float())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = framework.Trainer(max_epochs=1, precision=precision, **QUIET)
    messages = sorted(str(w.message) for w in caught if "precision" in str(w.message))
    module = Module()
    t.fit(module, loader)
    return t.precision, messages, seen["dtype"], [p.detach().double() for p in module.parameters()]


@pytest.mark.parametrize("precision", PRECISIONS, ids=[repr(p) for p in PRECISIONS])
def test_each_precision_flag_on_cpu_is_lightning_s(precision):
    ours, theirs = _fit(lockstep, precision), _fit(pl, precision)
    assert ours[:3] == theirs[:3]  # what it becomes, the warnings word for word, the dtypes a step sees
    for a, b in zip(ours[3], theirs[3]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


FLAGS = ("training", "validating", "testing", "predicting", "sanity_checking", "evaluating")


def _flags_in_hooks(framework):
    record = []

    class Module(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def _note(self, hook):
            record.append((hook, tuple(getattr(self.trainer, f) for f in FLAGS)))

        def training_step(self, batch, batch_idx):
            self._note("training_step")
            return self.net(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            self._note("validation_step")

        def test_step(self, batch, batch_idx):
            self._note("test_step")

        def predict_step(self, batch, batch_idx):
            self._note("predict_step")
            return batch[0]

        def on_fit_end(self):
            self._note("on_fit_end")

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)
    t = framework.Trainer(max_epochs=1, limit_val_batches=1, num_sanity_val_steps=1, **QUIET)
    module = Module()
    t.fit(module, loader, loader)
    t.test(module, loader, verbose=False)
    t.predict(module, loader)
    after = tuple(getattr(t, f) for f in FLAGS)
    t.testing = True
    set_true = (t.testing, t.training)
    t.training = False  # not training: changes nothing
    still = t.testing
    t.testing = False
    return sorted(set(record)), after, set_true, still, t.testing


def test_the_stage_flags_are_lightning_s_in_every_hook_and_settable_like_them():
    assert _flags_in_hooks(lockstep) == _flags_in_hooks(pl)


def _logged_types(framework, tmp_path):
    class Module(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            loss = self.net(batch[0]).pow(2).mean()
            self.log("loss_step", loss, prog_bar=True)
            self.log("loss_epoch", loss, on_step=False, on_epoch=True)
            self.log("constant", 2.0)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    from lightning.pytorch.loggers import CSVLogger as LightningCSV
    from callbacks import CSVLogger

    logger = (CSVLogger if framework is lockstep else LightningCSV)(str(tmp_path / framework.__name__))
    t = framework.Trainer(max_epochs=1, log_every_n_steps=1, **{**QUIET, "logger": logger})
    t.fit(Module(), DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2))
    names = ("loss_step", "loss_epoch", "constant")
    return {
        "callback_metrics": {k: type(t.callback_metrics[k]) for k in names},
        "logged_metrics": {k: type(t.logged_metrics[k]) for k in names},
        "progress_bar_metrics": {k: type(v) for k, v in t.progress_bar_metrics.items() if k in names},
    }


def test_logged_values_come_back_as_lightning_s_types(tmp_path):
    ours = _logged_types(lockstep, tmp_path)
    assert ours == _logged_types(pl, tmp_path)
    assert ours["logged_metrics"]["loss_step"] is torch.Tensor  # `.item()` works, as the project calls it
