"""``trainer.state`` as Lightning's: ``fn`` is the call (fit / validate / test / predict), ``stage``
the part running now (train, sanity_check, validate, ...); ``trainer.lightning_module``; Lightning's
``TrainerFn`` / ``RunningStage`` names equal the values (pytorch-forecasting keys a dict by them)."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.optional import importorskip

import trainer as lockstep
from trainer.stage import RunningStage, TrainerFn


def _record(framework):
    seen = []

    def note(where, trainer):
        flags = (trainer.training, trainer.validating, trainer.testing, trainer.predicting, trainer.sanity_checking)
        seen.append((where, str(trainer.state.fn.value), None if trainer.state.stage is None else
                     str(trainer.state.stage.value), flags))

    class Module(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def setup(self, stage):
            note(f"setup {getattr(stage, 'value', stage)}", self.trainer)  # Lightning passes a TrainerFn

        def training_step(self, batch, batch_idx):
            note("training_step", self.trainer)
            return self.net(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            note("validation_step", self.trainer)

        def test_step(self, batch, batch_idx):
            note("test_step", self.trainer)

        def predict_step(self, batch, batch_idx):
            note("predict_step", self.trainer)
            return self.net(batch[0])

        def on_train_end(self):
            note("on_train_end", self.trainer)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    t = framework.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=1)
    before = t.lightning_module
    module = Module()
    t.fit(module, loader, loader)
    t.validate(module, loader, verbose=False)
    t.test(module, loader, verbose=False)
    t.predict(module, loader)
    after = (str(t.state.fn.value), t.state.stage, t.lightning_module is module)
    return before, seen, after


def test_state_fn_and_stage_are_lightning_s_at_every_step():
    pl = importorskip("lightning.pytorch", reason="Lightning 2.x (the `dev` extra)")
    ours, theirs = _record(lockstep), _record(pl)
    assert ours == theirs
    before, seen, after = ours
    assert before is None and after == ("predict", None, True)
    assert ("training_step", "fit", "train", (True, False, False, False, False)) in seen


def test_lightning_s_stage_names_equal_the_states_values():
    from trainer.stage import Stage

    assert RunningStage.TRAINING == Stage.TRAIN and TrainerFn.FITTING == Stage.FIT
    stages = {RunningStage.TRAINING: "train", RunningStage.VALIDATING: "val"}
    assert stages.get(Stage.TRAIN) == "train" and stages.get(Stage.VALIDATE) == "val"
    assert RunningStage.SANITY_CHECKING.evaluating and not RunningStage.TRAINING.evaluating
    pl_states = importorskip("lightning.pytorch.trainer.states", reason="Lightning 2.x (the `dev` extra)")
    for ours, theirs in ((RunningStage, pl_states.RunningStage), (TrainerFn, pl_states.TrainerFn)):
        assert {m.name: m.value for m in ours} == {m.name: m.value for m in theirs}
