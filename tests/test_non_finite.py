"""A non-finite loss stops training with the first bad step and batch index, without per-step syncs."""
from __future__ import annotations

import pytest
import torch

from tests.models import QUIET, Regression, loader, regression_data
from trainer import Trainer
from trainer.anomaly import NonFiniteLossCheck, NonFiniteLossError


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
