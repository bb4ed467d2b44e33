"""A checkpoint written inside an accumulation window resumes at the window's first micro batch."""
from __future__ import annotations

import pytest
import torch

from callbacks import Callback
from tests.helpers.models import QUIET, Regression, assert_params_close, params_of
from tests.helpers.resume_models import make_loader
from trainer import Trainer, seed_everything

# 48 samples / batch 4 = 12 micro batches per epoch; windows of 3 micro batches: 4 steps per epoch.
ACCUMULATE = 3
KW = {"max_epochs": 2, "accumulate_grad_batches": ACCUMULATE, "accelerator": "cpu", **QUIET}


class _CrashAfterBatch(Callback):
    """Saves a checkpoint after micro batch ``batches_done`` of epoch ``epoch`` and aborts the run."""

    def __init__(self, epoch: int, batches_done: int, path: str) -> None:
        self.epoch, self.batches_done, self.path = epoch, batches_done, path

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.current_epoch == self.epoch and trainer.fit_loop.batches_done == self.batches_done:
            trainer.save_checkpoint(self.path)
            raise KeyboardInterrupt("simulated crash")


class _Seen(Callback):
    """Records (epoch, batch_idx) of every trained micro batch."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int]] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.batches.append((trainer.current_epoch, batch_idx))


@pytest.fixture(scope="module")
def straight() -> list[torch.Tensor]:
    seed_everything(0)
    model = Regression(optimizer="sgd")
    Trainer(**KW).fit(model, make_loader(n=48))
    return params_of(model)


@pytest.mark.parametrize("epoch,batches_done", [(0, 5), (1, 4)], ids=["epoch0-2of3", "epoch1-1of3"])
def test_resume_inside_a_window_trains_the_window_again(tmp_path, straight, epoch, batches_done):
    path = str(tmp_path / "inside.ckpt")
    seed_everything(0)
    with pytest.raises(KeyboardInterrupt):
        Trainer(**KW, callbacks=[_CrashAfterBatch(epoch, batches_done, path)]).fit(
            Regression(optimizer="sgd"), make_loader(n=48)
        )
    saved = torch.load(path, weights_only=False)
    assert saved["global_step"] == epoch * 4 + batches_done // ACCUMULATE  # the window's step is not taken

    seed_everything(99)  # nothing but the checkpoint decides what happens next
    resumed, seen = Regression(optimizer="sgd"), _Seen()
    trainer = Trainer(**KW, callbacks=[seen])
    inside = batches_done % ACCUMULATE
    with pytest.warns(UserWarning, match=rf"inside an accumulation window \({inside} of {ACCUMULATE} micro batches\).*trained again"):
        trainer.fit(resumed, make_loader(n=48), ckpt_path=path)

    assert_params_close(straight, params_of(resumed), atol=1e-6)
    assert seen.batches[0] == (epoch, batches_done - inside)  # the window's first micro batch
    assert trainer.global_step == 8


def test_resume_at_a_window_end_does_not_warn(tmp_path, straight, recwarn):
    path = str(tmp_path / "edge.ckpt")
    seed_everything(0)
    with pytest.raises(KeyboardInterrupt):
        Trainer(**KW, callbacks=[_CrashAfterBatch(0, 6, path)]).fit(Regression(optimizer="sgd"), make_loader(n=48))
    seed_everything(99)
    resumed, seen = Regression(optimizer="sgd"), _Seen()
    Trainer(**KW, callbacks=[seen]).fit(resumed, make_loader(n=48), ckpt_path=path)
    assert not [w for w in recwarn if "accumulation window" in str(w.message)]
    assert seen.batches[0] == (0, 6)
    assert_params_close(straight, params_of(resumed), atol=1e-6)
