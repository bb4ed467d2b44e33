"""The callbacks Lightning projects import, against Lightning: fine-tuning (same parameters to
1e-6, same parameter groups and rates), prediction writers (same calls, predictions and indices),
LambdaCallback, OnExceptionCheckpoint."""
from __future__ import annotations

import os

import pytest
import torch

from tests.helpers.lightning_parity import fit, framework, make_module
from tests.helpers.optional import importorskip

importorskip("lightning", reason="needs `lightning` (the bench extra: pip install -e '.[bench]')")


def _head_only(L, **kwargs):
    class HeadFirst(make_module(L, batchnorm=True, **kwargs)):
        def configure_optimizers(self):
            return torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=self.learning_rate, momentum=0.9)

    return HeadFirst


@pytest.mark.parametrize("kwargs", [dict(unfreeze_backbone_at_epoch=1), dict(unfreeze_backbone_at_epoch=2, train_bn=False, backbone_initial_lr=0.01, should_align=False)])
def test_backbone_finetuning_matches_lightning(kwargs):
    out = {}
    for name in ("lightning", "lockstep"):
        L, cbs = framework(name)
        finetuning = cbs.BackboneFinetuning(lambda_func=lambda epoch: 1.5, **kwargs)
        trainer, model = fit(name, [finetuning], epochs=4, module=_head_only(L)())
        groups = [(len(g["params"]), g["lr"]) for g in trainer.optimizers[0].param_groups]
        out[name] = ([p.detach().clone() for p in model.parameters()], groups, finetuning.previous_backbone_lr)
    ours, theirs = out["lockstep"], out["lightning"]
    assert ours[1] == theirs[1] and len(ours[1]) == 2
    assert ours[2] == pytest.approx(theirs[2], rel=1e-12)
    for a, b in zip(ours[0], theirs[0]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def _writer(cbs, interval, calls):
    class Writer(cbs.BasePredictionWriter):
        def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
            calls.append(("batch", batch_idx, dataloader_idx, list(batch_indices), prediction.detach().clone()))

        def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
            calls.append(("epoch", [list(i) for i in batch_indices], torch.cat(predictions)))

    return Writer(interval)


@pytest.mark.parametrize("interval", ["batch", "epoch", "batch_and_epoch"])
def test_prediction_writer_matches_lightning(interval):
    written = {}
    for name in ("lightning", "lockstep"):
        L, cbs = framework(name)
        calls: list = []
        trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                            callbacks=[_writer(cbs, interval, calls)])
        torch.manual_seed(0)
        trainer.predict(make_module(L)(), return_predictions=False)
        written[name] = calls
    assert [c[:-1] for c in written["lockstep"]] == [c[:-1] for c in written["lightning"]]
    for ours, theirs in zip(written["lockstep"], written["lightning"]):
        torch.testing.assert_close(ours[-1], theirs[-1], rtol=0, atol=1e-6)


def test_lambda_callback_calls_the_given_hooks_only():
    _, cbs = framework("lockstep")
    seen: list = []
    callback = cbs.LambdaCallback(
        on_train_epoch_end=lambda trainer, module: seen.append(("epoch", trainer.current_epoch)),
        on_fit_end=lambda trainer, module: seen.append(("end",)),
    )
    fit("lockstep", [callback], epochs=2)
    assert seen == [("epoch", 0), ("epoch", 1), ("end",)]
    assert type(callback).on_train_start is cbs.Callback.on_train_start  # not given: not called
    with pytest.raises(TypeError, match=r"LambdaCallback\(on_fit_start=3\): expected a function"):
        cbs.LambdaCallback(on_fit_start=3)


def test_on_exception_checkpoint_writes_a_resumable_file(tmp_path):
    L, cbs = framework("lockstep")

    class Crashing(make_module(L)):
        def training_step(self, batch, batch_idx):
            if self.global_step == 5:
                raise KeyboardInterrupt
            return super().training_step(batch, batch_idx)

    saver = cbs.OnExceptionCheckpoint(dirpath=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        fit("lockstep", [saver], epochs=3, module=Crashing())
    assert saver.ckpt_path == os.path.join(str(tmp_path), "on_exception.ckpt")
    assert torch.load(saver.ckpt_path, weights_only=True)["global_step"] == 5
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False)
    trainer.fit(make_module(L)(), ckpt_path=saver.ckpt_path)
    assert trainer.global_step == 12


@pytest.mark.parametrize("interval", ["batch", "epoch", "batch_and_epoch"])
def test_prediction_writer_interval_is_lightning_s_write_interval(interval):
    # pytorch-forecasting's writer reads `self.interval.on_epoch`
    from lightning.pytorch.callbacks import BasePredictionWriter as Theirs

    from callbacks import BasePredictionWriter as Ours

    ours, theirs = Ours(interval).interval, Theirs(interval).interval
    assert (ours == interval, ours.on_batch, ours.on_epoch) == (theirs == interval, theirs.on_batch, theirs.on_epoch)
