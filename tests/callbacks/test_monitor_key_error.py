"""A monitored metric that was never logged: a public error type, in the user's traceback too."""
from __future__ import annotations

import pickle
import traceback

import pytest

from callbacks import EarlyStopping, ModelCheckpoint, MonitorKeyError
from tests.helpers.callbacks import Scripted, loader
from tests.helpers.models import QUIET
from trainer import Trainer


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda path: ModelCheckpoint(dirpath=path, monitor="val_acc"),
         "ModelCheckpoint(monitor='val_acc') could not find 'val_acc' in the logged metrics. Available keys: "
         "epoch, step, train_loss, val_loss. Log it with `self.log('val_acc', value)` in your module."),
        (lambda path: EarlyStopping("val_acc"),
         "EarlyStopping(monitor='val_acc') could not find 'val_acc' in the logged metrics. Available keys: "
         "train_loss, val_loss. Log it with `self.log('val_acc', value)` in your module."),
    ],
)
def test_a_missing_monitor_raises_a_public_key_error(tmp_path, build, message):
    trainer = Trainer(accelerator="cpu", max_epochs=1, callbacks=[build(tmp_path)], num_sanity_val_steps=0,
                      default_root_dir=tmp_path, **QUIET)
    with pytest.raises(KeyError) as error:  # what existing `except KeyError` clauses catch
        trainer.fit(Scripted(), loader(16, 8), loader(8, 8))
    assert type(error.value) is MonitorKeyError and str(error.value) == message
    assert traceback.format_exception_only(error.value) == [f"trainer.contracts.errors.MonitorKeyError: {message}\n"]
    assert str(pickle.loads(pickle.dumps(error.value))) == message  # a spawned worker hands it back
