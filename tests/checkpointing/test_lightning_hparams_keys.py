"""Lightning's checkpoint hyperparameter keys: the ``CHECKPOINT_HYPER_PARAMS_*`` names libraries
edit in ``on_save_checkpoint`` (pytorch-forecasting does), and a checkpoint that names its
hyperparameters (``hparams_name``, as Lightning writes for ``save_hyperparameters(hparams)``)
loads as Lightning loads it."""
from __future__ import annotations

from argparse import Namespace

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.optional import importorskip

import trainer as lockstep

pl = importorskip("lightning.pytorch", reason="Lightning 2.x (the `dev` extra)")
QUIET = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
         "enable_checkpointing": False}


def test_the_key_names_are_lightning_s():
    for ours, theirs in ((lockstep.TrainModule, pl.LightningModule), (lockstep.DataModule, pl.LightningDataModule)):
        for name in ("CHECKPOINT_HYPER_PARAMS_KEY", "CHECKPOINT_HYPER_PARAMS_NAME", "CHECKPOINT_HYPER_PARAMS_TYPE"):
            assert getattr(ours, name) == getattr(theirs, name), name


def _module(framework):
    class FromNamespace(framework.LightningModule):
        def __init__(self, hparams):
            super().__init__()
            self.save_hyperparameters(hparams)
            self.net = nn.Linear(2, self.hparams.width)
            self.received = hparams

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).sum()

        def on_save_checkpoint(self, checkpoint):
            # what a library does with the names: add to the saved hyperparameters
            checkpoint[self.CHECKPOINT_HYPER_PARAMS_KEY]["extra"] = 7

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return FromNamespace


def _written(framework, path):
    t = framework.Trainer(max_steps=1, **QUIET)
    t.fit(_module(framework)(Namespace(width=3)), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    t.save_checkpoint(path)
    return path


def _read(framework, path):
    module = _module(framework).load_from_checkpoint(path, weights_only=False)  # a Namespace: not weights-only
    received = module.received
    return type(received).__name__, dict(received), module.net.out_features


def test_a_checkpoint_naming_its_hyperparameters_loads_as_on_lightning(tmp_path):
    lightning_file = _written(pl, tmp_path / "lightning.ckpt")
    theirs = _read(pl, lightning_file)
    assert theirs[1:] == ({"width": 3, "extra": 7}, 3)  # __init__(hparams) got them as its one argument
    assert _read(lockstep, lightning_file) == theirs  # Lightning's file, read by Lockstep
    ours = _read(lockstep, _written(lockstep, tmp_path / "lockstep.ckpt"))
    assert ours[1:] == theirs[1:]
