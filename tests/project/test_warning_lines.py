"""A warning names the user's line that led to it (``Trainer(...)``, ``trainer.fit(...)``, a step or
``__init__`` of the module), not Lockstep's source, whatever number of frames lie between."""
from __future__ import annotations

import sys
import warnings

from torch import nn

from callbacks import EarlyStopping
from tests.helpers.callbacks import Scripted, loader
from tests.helpers.models import QUIET
from trainer import Trainer


def _line() -> int:
    return sys._getframe(1).f_lineno


def _one_warning(caught: list[warnings.WarningMessage], fragment: str) -> warnings.WarningMessage:
    found = [w for w in caught if fragment in str(w.message)]
    assert len(found) == 1, [str(w.message) for w in caught]
    return found[0]


def test_a_warning_of_the_trainers_arguments_names_the_trainer_call():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _line(); Trainer(accelerator="cpu", precision="16-mixed", **QUIET)  # noqa: E702
    warning = _one_warning(caught, "AMP with fp16 is not supported on CPU")
    assert (warning.filename, warning.lineno) == (__file__, line)


def test_a_warning_of_a_callback_during_fit_names_the_fit_call():
    trainer = Trainer(accelerator="cpu", max_epochs=1, callbacks=[EarlyStopping("val_acc", strict=False)], **QUIET)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _line(); trainer.fit(Scripted(), loader(16, 8))  # noqa: E702
    warning = _one_warning(caught, "val_acc")
    assert (warning.filename, warning.lineno) == (__file__, line)


class _SkipsABatch(Scripted):
    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            return None
        return super().training_step(batch, batch_idx)


class _KeepsAModule(Scripted):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.line = _line(); self.save_hyperparameters()  # noqa: E702


def test_a_warning_about_a_step_or_the_modules_init_names_the_users_code():
    trainer = Trainer(accelerator="cpu", max_steps=2, **QUIET)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _line(); trainer.fit(_SkipsABatch(), loader(16, 8))  # noqa: E702
    warning = _one_warning(caught, "training_step returned None")
    assert (warning.filename, warning.lineno) == (__file__, line)  # training_step has returned by then

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = _KeepsAModule(nn.Linear(1, 1))
    warning = _one_warning(caught, "is an instance of `nn.Module`")
    assert (warning.filename, warning.lineno) == (__file__, module.line)
