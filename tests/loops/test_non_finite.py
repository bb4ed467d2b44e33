"""A non-finite loss stops training with the first bad step and batch index, without per-step syncs."""
from __future__ import annotations

import os
import signal

import pytest
import torch

from callbacks import Callback, ModelCheckpoint
from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer
from trainer.loops.anomaly import NonFiniteLossCheck, NonFiniteLossError
from trainer.checkpoint_io.file_format import load_checkpoint


class NanAt(Regression):
    def __init__(self, bad_batch: int):
        super().__init__()
        self.bad_batch = bad_batch
        self.seen = 0

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.seen += 1
        if self.current_epoch == 1 and batch_idx == self.bad_batch:
            return loss * float("nan")
        return loss


def test_nan_loss_names_step_and_batch():
    module = NanAt(bad_batch=5)
    trainer = Trainer(accelerator="cpu", max_epochs=3, accumulate_grad_batches=2, log_every_n_steps=100, **QUIET)
    # 16 batches per epoch, A=2: epoch 1 batch 5 runs before global step 8 + 2 = 10
    with pytest.raises(NonFiniteLossError, match="The training loss is nan at epoch 1, global step 10, batch index 5"):
        trainer.fit(module, loader(regression_data(64), 4))
    # detected at the epoch-end read, not by a sync in the step: the epoch ran to its end
    assert module.seen == 32


def test_check_is_read_at_logging_steps():
    module = NanAt(bad_batch=1)
    trainer = Trainer(accelerator="cpu", max_epochs=3, log_every_n_steps=4, **QUIET)
    with pytest.raises(NonFiniteLossError, match="global step 17, batch index 1"):
        trainer.fit(module, loader(regression_data(64), 4))
    assert module.seen == 16 + 4  # stopped at the first logging step after the NaN


def test_inf_loss_and_disable():
    check = NonFiniteLossCheck()
    check.record(torch.tensor(1.0), 0, 0, 0)
    check.record(torch.tensor(float("inf")), 0, 1, 7)
    with pytest.raises(NonFiniteLossError, match="The training loss is inf at epoch 0, global step 1, batch index 7"):
        check.check()
    off = NonFiniteLossCheck(enabled=False)
    off.record(torch.tensor(float("nan")), 0, 0, 0)
    off.check()


def test_detection_can_be_turned_off():
    trainer = Trainer(accelerator="cpu", max_epochs=2, detect_non_finite_loss=False, **QUIET)
    trainer.fit(NanAt(bad_batch=0), loader(regression_data(16), 4))
    assert trainer.global_step == 8


class NanAtStep(Regression):
    """The loss turns NaN at global step ``bad_step`` (on ``bad_rank`` only, or on every rank)."""

    def __init__(self, bad_step: int, bad_rank: int | None = None, on_bad_step=None):
        super().__init__()
        self.bad_step, self.bad_rank, self.on_bad_step = bad_step, bad_rank, on_bad_step

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if self.global_step == self.bad_step and self.bad_rank in (None, self.global_rank):
            if self.on_bad_step is not None:
                self.on_bad_step()
            return loss * float("nan")
        return loss


def _saved_weights_are_finite(path) -> int:
    """Load ``path`` as a resume would; return its global step after checking every tensor."""
    ckpt = load_checkpoint(path)
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values()), path
    Regression().load_state_dict(ckpt["state_dict"])
    return ckpt["global_step"]


def test_step_checkpoints_never_hold_weights_after_a_nan_loss(tmp_path):
    # saves every 2 steps; the check only runs at step 50 otherwise: the NaN at step 5 must stop
    # the save at step 6, keeping step 4's file (save_top_k=1 would have replaced it)
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_last=True)
    trainer = Trainer(max_epochs=1, accelerator="cpu", callbacks=[ckpt], logger=False, enable_progress_bar=False)
    with pytest.raises(NonFiniteLossError, match=r"loss is nan at epoch 0, global step 5, batch index 5.*No checkpoint is written"):
        trainer.fit(NanAtStep(bad_step=5), loader(regression_data(64), 4))
    assert sorted(os.listdir(tmp_path)) == ["epoch=0-step=4.ckpt", "last.ckpt"]
    assert [_saved_weights_are_finite(tmp_path / f) for f in sorted(os.listdir(tmp_path))] == [4, 4]
    assert ckpt.best_model_path == str(tmp_path / "epoch=0-step=4.ckpt")
    resumed = Trainer(max_epochs=1, accelerator="cpu", **QUIET)
    resumed.fit(Regression(), loader(regression_data(64), 4), ckpt_path=tmp_path / "last.ckpt")
    assert resumed.global_step == 16


class _SaveAt(Callback):
    """Saves by hand after batch ``batch_idx``, and again on the exception (a save-on-crash)."""

    def __init__(self, batch_idx, path):
        self.batch_idx, self.path = batch_idx, path

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if batch_idx == self.batch_idx:
            trainer.save_checkpoint(self.path / "manual.ckpt")

    def on_exception(self, trainer, module, exception):
        trainer.save_checkpoint(self.path / "on_exception.ckpt")


def test_save_checkpoint_and_a_save_on_crash_refuse_after_a_nan_loss(tmp_path):
    trainer = Trainer(max_epochs=1, accelerator="cpu", callbacks=[_SaveAt(6, tmp_path)], **QUIET)
    with pytest.raises(NonFiniteLossError, match="global step 3, batch index 3.*No checkpoint is written"):
        trainer.fit(NanAtStep(bad_step=3), loader(regression_data(64), 4))
    assert os.listdir(tmp_path) == []
    with pytest.raises(NonFiniteLossError, match="global step 3"):
        trainer.save_checkpoint(tmp_path / "after.ckpt")
    assert os.listdir(tmp_path) == []
    trainer.fit(Regression(), loader(regression_data(16), 4))  # a new fit starts clean
    trainer.save_checkpoint(tmp_path / "clean.ckpt")
    assert _saved_weights_are_finite(tmp_path / "clean.ckpt") == 4


def test_preemption_save_refuses_after_a_nan_loss(tmp_path):
    # SIGTERM during the NaN step: the pre-emption save at that step's end must not write NaN weights
    module = NanAtStep(bad_step=3, on_bad_step=lambda: os.kill(os.getpid(), signal.SIGTERM))
    trainer = Trainer(max_epochs=1, accelerator="cpu", default_root_dir=tmp_path, **QUIET)
    with pytest.raises(NonFiniteLossError, match="global step 3, batch index 3"):
        trainer.fit(module, loader(regression_data(64), 4))
    assert not (tmp_path / "checkpoints" / "last.ckpt").exists()
    assert trainer.global_step == 4


def _nan_on_rank_1(rank, world_size, root):
    from callbacks import ModelCheckpoint
    from trainer import Trainer
    from trainer.loops.anomaly import NonFiniteLossError

    ckpt = ModelCheckpoint(dirpath=root, every_n_train_steps=2, save_last=True)
    trainer = Trainer(max_epochs=1, accelerator="cpu", devices=2, callbacks=[ckpt], logger=False,
                      enable_progress_bar=False)
    try:
        trainer.fit(NanAtStep(bad_step=3, bad_rank=1), loader(regression_data(64), 4))
    except Exception as err:  # the rank that reports second may wrap its own error in RankFailedError
        while err is not None and not isinstance(err, NonFiniteLossError):
            err = err.__cause__
        return str(err)
    return "no error"


@pytest.mark.distributed
def test_nan_on_one_rank_stops_every_rank_before_the_save(tmp_path):
    # DDP averages rank 1's NaN gradient into rank 0's weights, while rank 0's own losses are finite
    r0, r1 = run_ranks(_nan_on_rank_1, world_size=2, args=(str(tmp_path),), init_group=False)
    assert r0.startswith("On rank 1: The training loss is nan at epoch 0, global step 3, batch index 3")
    assert r1.startswith("The training loss is nan at epoch 0, global step 3, batch index 3")
    assert sorted(os.listdir(tmp_path)) == ["epoch=0-step=2.ckpt", "last.ckpt"]
    assert [_saved_weights_are_finite(tmp_path / f) for f in sorted(os.listdir(tmp_path))] == [2, 2]
