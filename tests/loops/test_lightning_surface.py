"""The signatures and the Trainer/module surface real Lightning code uses, each checked on Lockstep.

Lightning itself is compared where the numbers or the calls could differ (``test_lightning_hooks.py``
compares the hooks); here each behaviour is checked against what Lightning documents.
"""
from __future__ import annotations

import argparse
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from callbacks.callback import Callback
from tests.helpers.models import QUIET
from trainer import DataModule, Trainer, TrainModule


def _loader(n: int = 8, seed: int = 0) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=2)


def _trainer(tmp_path, **kwargs: Any) -> Trainer:
    kwargs.setdefault("max_epochs", 1)
    return Trainer(accelerator="cpu", default_root_dir=tmp_path, **{**QUIET, **kwargs})


class NoBatchIdx(TrainModule):
    """Steps written without ``batch_idx``; the training step returns a dict with extras."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.val_loaders_seen: set[int] = set()

    def training_step(self, batch):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        return {"loss": loss, "pred": self.net(x).detach()}

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.val_loaders_seen.add(dataloader_idx)
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

    def test_step(self, batch):
        x, y = batch
        self.log("test_loss", nn.functional.mse_loss(self.net(x), y))

    def predict_step(self, batch):
        return self.net(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class OneLoaderCallback(Callback):
    """Written as for Lightning with one loader: no ``dataloader_idx`` parameter."""

    def __init__(self) -> None:
        self.batches = 0

    def on_validation_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.batches += 1

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        assert set(outputs) == {"loss", "pred"}


def test_steps_without_batch_idx_and_callbacks_without_dataloader_idx(tmp_path, capsys):
    module, cb = NoBatchIdx(), OneLoaderCallback()
    trainer = _trainer(tmp_path, callbacks=[cb], num_sanity_val_steps=0)
    trainer.fit(module, _loader(), _loader(4))
    assert trainer.global_step == 4 and cb.batches == 2
    results = trainer.test(module, _loader(4))
    assert set(results[0]) == {"test_loss"}
    printed = capsys.readouterr().out
    assert "Test metric" in printed and "DataLoader 0" in printed and "test_loss" in printed
    assert trainer.predict(module, _loader(4), return_predictions=False) is None
    assert len(trainer.predict(module, _loader(4))) == 2


def test_several_validation_loaders_get_dataloader_idx_and_suffixes(tmp_path):
    module = NoBatchIdx()
    results = _trainer(tmp_path).validate(module, [_loader(4), _loader(4, seed=1)], verbose=False)
    assert module.val_loaders_seen == {0, 1}
    assert [set(r) for r in results] == [{"val_loss/dataloader_idx_0"}, {"val_loss/dataloader_idx_1"}]


class Stream(IterableDataset):
    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for _ in range(6):
            x = torch.randn(4, generator=g)
            yield x, x.sum(0, keepdim=True)


def test_an_iterable_dataset_without_len_trains(tmp_path):
    trainer = _trainer(tmp_path, accumulate_grad_batches=2)
    trainer.fit(NoBatchIdx(), DataLoader(Stream(), batch_size=2))
    assert trainer.global_step == 2  # 3 batches: windows [0, 1] and [2]


class StopsAtOnce(NoBatchIdx):
    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.trainer.should_stop = True


@pytest.mark.parametrize("limits, steps", [({"min_epochs": 2}, 8), ({"min_steps": 3}, 3), ({}, 1)])
def test_min_epochs_and_min_steps_hold_back_should_stop(tmp_path, limits, steps):
    trainer = _trainer(tmp_path, max_epochs=5, **limits)
    trainer.fit(StopsAtOnce(), _loader())
    assert trainer.global_step == steps


def test_fit_takes_lightnings_positional_order(tmp_path):
    class Data(DataModule):
        def train_dataloader(self):
            return _loader()

    trainer = _trainer(tmp_path)
    trainer.fit(NoBatchIdx(), None, None, Data())  # fit(model, train, val, datamodule)
    assert trainer.global_step == 4


class WithHparams(TrainModule):
    def __init__(self, config: Any, secret: str = "x") -> None:
        super().__init__()
        self.save_hyperparameters(config, ignore="secret")


def test_save_hyperparameters_takes_a_dict_a_namespace_and_ignore():
    assert dict(WithHparams({"lr": 0.1, "secret": 1}).hparams) == {"lr": 0.1}
    module = WithHparams(argparse.Namespace(lr=0.2, depth=3))
    assert module.hparams.depth == 3 and dict(module.hparams_initial) == {"lr": 0.2, "depth": 3}
    module.hparams.lr = 1.0
    assert module.hparams_initial.lr == 0.2


class Exported(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 2)
        self.example_input_array = torch.zeros(3, 4)

    def forward(self, x):
        return self.net(x)


def test_module_surface_freeze_dtype_all_gather_torchscript(tmp_path):
    module = Exported()
    assert module.freeze() is module and not module.training
    assert not any(p.requires_grad for p in module.parameters())
    module.unfreeze()
    assert all(p.requires_grad for p in module.parameters()) and module.training
    assert module.dtype == torch.float32 and module.device.type == "cpu" and not module.on_gpu
    assert module.to(torch.float64).dtype == torch.float64
    module.to(torch.float32)
    assert module.all_gather(torch.ones(2)).shape == (1, 2)  # one process: a leading W=1 dimension
    x = torch.randn(5, 4)
    for method in ("script", "trace"):
        compiled = module.to_torchscript(tmp_path / f"{method}.pt", method=method)
        torch.testing.assert_close(compiled(x), module(x))
        torch.testing.assert_close(torch.jit.load(str(tmp_path / f"{method}.pt"))(x), module(x))
    assert module.training  # the export put it back


def test_to_onnx_where_torch_can(tmp_path):
    pytest.importorskip("onnx", reason="torch.onnx.export needs the onnx package")
    module = Exported()
    module.to_onnx(tmp_path / "m.onnx")
    assert (tmp_path / "m.onnx").stat().st_size > 0


class SkipsBatches(NoBatchIdx):
    def training_step(self, batch, batch_idx):
        return None if batch_idx == 1 else super().training_step(batch)


def test_training_step_returning_none_skips_the_batch_on_one_process(tmp_path):
    trainer = _trainer(tmp_path)
    with pytest.warns(UserWarning, match="returned None"):
        trainer.fit(SkipsBatches(), _loader())
    assert trainer.global_step == 4  # the step still runs, on the gradients it has (as in Lightning)


def test_datamodule_from_datasets_and_on_exception(tmp_path):
    seen: list[str] = []

    class Failing(NoBatchIdx):
        def training_step(self, batch):
            raise RuntimeError("boom")

    class Data(DataModule):
        def on_exception(self, exception):
            seen.append(str(exception))

    data = TensorDataset(torch.randn(6, 4), torch.randn(6, 1))
    dm = DataModule.from_datasets(train_dataset=data, val_dataset=[data, data], batch_size=3)
    assert len(dm.train_dataloader()) == 2 and len(dm.val_dataloader()) == 2
    trainer = _trainer(tmp_path, num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(NoBatchIdx(), datamodule=dm)
    assert trainer.global_step == 2
    failing = Data.from_datasets(train_dataset=data, batch_size=3)
    with pytest.raises(RuntimeError, match="boom"):
        _trainer(tmp_path).fit(Failing(), datamodule=failing)
    assert seen == ["boom"]


class OneCycle(NoBatchIdx):
    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        self.total = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=self.total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


@pytest.mark.parametrize("kwargs, total", [({"max_epochs": 3}, 6), ({"max_epochs": 3, "max_steps": 4}, 4)])
def test_estimated_stepping_batches_as_lightning_computes_it(tmp_path, kwargs, total):
    module = OneCycle()
    trainer = _trainer(tmp_path, accumulate_grad_batches=2, **kwargs)  # 4 batches: 2 steps an epoch
    trainer.fit(module, _loader())
    assert module.total == total == trainer.global_step


def test_a_second_fit_on_a_finished_trainer_stops_at_once_saying_why(tmp_path, capsys):
    trainer, module = _trainer(tmp_path, max_epochs=2), NoBatchIdx()
    trainer.fit(module, _loader())
    before = [p.detach().clone() for p in module.parameters()]
    trainer.fit(module, _loader())
    assert trainer.global_step == 8 and trainer.current_epoch == 2  # as Lightning: nothing more
    captured = capsys.readouterr()
    assert "fit stopped at once: this Trainer's last fit reached max_epochs=2" in captured.out + captured.err
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_callback_metrics_hold_the_current_runs_metrics_only(tmp_path):
    trainer, module = _trainer(tmp_path, num_sanity_val_steps=0), NoBatchIdx()
    trainer.fit(module, _loader(), _loader(4))
    assert "val_loss" in trainer.callback_metrics
    trainer.test(module, _loader(4), verbose=False)
    assert set(trainer.callback_metrics) == {"test_loss"}  # as Lightning: no fit metrics left
    trainer.predict(module, _loader(4))
    assert trainer.callback_metrics == {}
