"""A callback's role is what it declares (`Callback.role`): a `ModelCheckpoint` subclass, or any
callback of role "checkpoint", works everywhere the built-in one does."""
from __future__ import annotations

import os
import signal

import pytest
import torch

from callbacks import Callback, LearningRateMonitor, ModelCheckpoint, ModelSummary, ProgressBar
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Preempted, Trainer


class MyCheckpoint(ModelCheckpoint):
    """A user's subclass, e.g. to upload each file."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.saved = []

    def on_save_checkpoint(self, trainer, module, checkpoint):
        self.saved.append(trainer.global_step)


class MyProgressBar(ProgressBar):
    pass


class MyLRMonitor(LearningRateMonitor):
    pass


def test_subclasses_replace_the_defaults_and_checkpoints_run_last(tmp_path):
    mine, bar, lrs = MyCheckpoint(dirpath=tmp_path), MyProgressBar(), MyLRMonitor()
    trainer = Trainer(accelerator="cpu", callbacks=[mine, bar, lrs], default_root_dir=tmp_path, logger=True)
    assert trainer.checkpoint_callbacks == [mine]
    assert trainer.checkpoint_callback is mine
    assert [type(cb) for cb in trainer.callbacks[1:]] == [MyProgressBar, MyLRMonitor, ModelSummary, MyCheckpoint]
    assert trainer.callbacks[-1] is mine  # moved last, although given first


def test_best_last_and_preemption_go_through_a_subclass(tmp_path):
    ckpt = MyCheckpoint(dirpath=tmp_path / "mine", monitor="train_loss", save_last=True)
    trainer = Trainer(accelerator="cpu", max_epochs=2, callbacks=[ckpt], default_root_dir=tmp_path / "root",
                      logger=False, enable_progress_bar=False)
    trainer.fit(Regression(), loader(regression_data(16), 4))
    assert ckpt.saved  # it did save
    assert trainer.validate(Regression(), loader(regression_data(8), 4), ckpt_path="best")
    assert trainer.validate(Regression(), loader(regression_data(8), 4), ckpt_path="last")
    assert ckpt.best_model_path.startswith(str(tmp_path / "mine"))

    # pre-emption saves beside the subclass's files, and `ckpt_path="last"` finds that file
    class SignalAtStep2(Regression):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            if self.trainer.global_step == 2 and batch_idx == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    ckpt2 = MyCheckpoint(dirpath=tmp_path / "mine2")
    trainer = Trainer(accelerator="cpu", max_epochs=3, callbacks=[ckpt2], default_root_dir=tmp_path / "root2",
                      logger=False, enable_progress_bar=False)
    with pytest.raises(Preempted):
        trainer.fit(SignalAtStep2(), loader(regression_data(16), 4))
    assert (tmp_path / "mine2" / "last.ckpt").exists()
    assert not (tmp_path / "root2" / "checkpoints").exists()  # no default ModelCheckpoint beside it
    saved = torch.load(tmp_path / "mine2" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 3  # the signal came after step 2: saved at the next step boundary


def test_quiet_settings_still_add_no_checkpoint_callback():
    assert Trainer(accelerator="cpu", **QUIET).checkpoint_callbacks == []


class OwnBar(Callback):
    """Not a ProgressBar subclass: it declares the role, and the default bar is not added."""

    role = "progress_bar"
    is_enabled = False

    def print(self, *args, **kwargs):
        raise AssertionError("a disabled bar is not printed through")


class OwnCheckpoint(Callback):
    role = "checkpoint"


def test_the_trainer_finds_callbacks_by_their_declared_role(tmp_path):
    bar, ckpt = OwnBar(), OwnCheckpoint()
    trainer = Trainer(accelerator="cpu", callbacks=[ckpt, bar], default_root_dir=tmp_path, logger=False)
    assert not any(isinstance(cb, ProgressBar) for cb in trainer.callbacks)  # the declared bar stands in
    assert not any(isinstance(cb, ModelCheckpoint) for cb in trainer.callbacks)
    assert trainer.checkpoint_callbacks == [ckpt] and trainer.callbacks[-1] is ckpt  # checkpoints run last


class LogsFromItsHooks(Callback):
    """A library's callback that logs with ``self.log`` (Lightning gives callbacks the module's)."""

    def on_train_epoch_end(self, trainer, pl_module):
        self.log("from_callback", float(trainer.current_epoch) + 0.25)
        self.log_dict({"also_from_callback": 2.0})


def test_a_callback_logs_with_the_modules_log_and_log_dict(tmp_path):
    trainer = Trainer(accelerator="cpu", max_epochs=2, callbacks=[LogsFromItsHooks()], default_root_dir=tmp_path,
                      **QUIET)
    trainer.fit(Regression(), loader(regression_data(8), 4))
    assert float(trainer.callback_metrics["from_callback"]) == 1.25
    assert float(trainer.callback_metrics["also_from_callback"]) == 2.0
