"""Evaluation logging as Lightning's, against the installed Lightning (found by the census's
autoencoder and backbone examples): each validation / test batch's on-step values join
``logged_metrics`` (and reach the loggers), and ``test()`` returns what the loggers get (no
``logger=False`` value, no bare name of a value logged both on_step and on_epoch)."""
from __future__ import annotations

import pytest
import torch

from tests.helpers.demos_parity import QUIET, demos, fit_both
from tests.helpers.optional import importorskip

importorskip("lightning", reason="the comparison needs `lightning` (the dev extra)")


def _logging_model(d):
    class Logging(d.boring_classes.BoringModel):
        def validation_step(self, batch, batch_idx):
            loss = self.step(batch)
            self.log("val_loss", loss, on_step=True)
            return loss

        def test_step(self, batch, batch_idx):
            loss = self.step(batch)
            self.log("hidden", loss, logger=False)
            self.log("both", loss, on_step=True)
            self.log("step_only", loss * 2, on_step=True, on_epoch=False)
            return loss

    return Logging()


@pytest.mark.parametrize("logger", [False, True])
def test_evaluation_step_values_and_results_are_lightning_s(logger, tmp_path):
    results = {}
    for name in ("lightning", "lockstep"):
        d = demos(name)
        torch.manual_seed(0)
        module = _logging_model(d)
        trainer = d.Trainer(accelerator="cpu", **{**QUIET, "logger": logger}, default_root_dir=str(tmp_path / name),
                            limit_test_batches=3)
        results[name] = (trainer.test(module, verbose=False), dict(trainer.logged_metrics), dict(trainer.callback_metrics))
    (t_ret, t_logged, t_cb), (o_ret, o_logged, o_cb) = results["lightning"], results["lockstep"]
    assert sorted(o_ret[0]) == sorted(t_ret[0]) == ["both_epoch"]
    assert o_ret[0]["both_epoch"] == pytest.approx(t_ret[0]["both_epoch"], abs=1e-6)
    assert sorted(o_logged) == sorted(t_logged) == ["both_epoch", "both_step", "step_only"]
    assert all(float(o_logged[k]) == pytest.approx(float(t_logged[k]), abs=1e-6) for k in t_logged)
    assert sorted(o_cb) == sorted(t_cb)


def test_validation_step_values_join_logged_metrics_in_fit(tmp_path):
    runs = fit_both(_logging_model, max_epochs=1, limit_train_batches=2, limit_val_batches=3, default_root_dir=str(tmp_path))
    (_, theirs), (_, ours) = runs["lightning"], runs["lockstep"]
    assert sorted(ours.logged_metrics) == sorted(theirs.logged_metrics)
    assert "val_loss_step" in ours.logged_metrics
    assert all(torch.allclose(ours.logged_metrics[k].float(), theirs.logged_metrics[k].float(), atol=1e-6)
               for k in theirs.logged_metrics)
