"""`trainer.lightning.demos.boring_classes` against Lightning's: the same seed gives the same items, and each
demo module fitted a few steps on either framework ends with the same parameters (1e-6)."""
from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from tests.helpers.demos_parity import demos, fit_both, max_parameter_difference
from tests.helpers.optional import importorskip

importorskip("lightning", reason="the comparison needs `lightning` (the dev extra)")

DATASETS = ["RandomDataset", "RandomDictDataset", "RandomIterableDataset", "RandomIterableDatasetWithLen"]


def _items(dataset) -> list:
    return list(dataset) if isinstance(dataset, IterableDataset) else [dataset[i] for i in range(len(dataset))]


@pytest.mark.parametrize("name", DATASETS)
def test_a_random_dataset_gives_lightning_s_items(name):
    items = {}
    for framework in ("lightning", "lockstep"):
        torch.manual_seed(3)
        dataset = getattr(demos(framework).boring_classes, name)(5, 7)
        items[framework] = (_items(dataset), _items(dataset), torch.randn(2))  # read twice, then the generator
        assert hasattr(dataset, "__len__") == (name != "RandomIterableDataset")
    theirs, ours = items["lightning"], items["lockstep"]
    assert repr(theirs) == repr(ours)  # dicts and tensors alike, item for item, draw for draw


@pytest.mark.parametrize("name", ["BoringDataModule", "BoringDataModuleNoLen", "IterableBoringDataModule"])
def test_a_boring_datamodule_splits_as_lightning_s(name):
    items = {}
    for framework in ("lightning", "lockstep"):
        torch.manual_seed(1)
        dm = getattr(demos(framework).boring_classes, name)()
        batches = []
        for stage, loader in (("fit", "train"), ("fit", "val"), ("test", "test"), ("predict", "predict")):
            dm.setup(stage)
            loaders = getattr(dm, f"{loader}_dataloader")()
            for one in loaders if isinstance(loaders, list) else [loaders]:
                batches.append([b.clone() for b in one])
        items[framework] = batches
    assert len(items["lightning"]) == len(items["lockstep"])
    for theirs, ours in zip(items["lightning"], items["lockstep"]):
        assert torch.equal(torch.stack(theirs), torch.stack(ours))


def test_boring_model_fits_and_tests_to_lightning_s_numbers():
    runs = fit_both(lambda d: d.boring_classes.BoringModel(), max_epochs=3, limit_train_batches=5, limit_val_batches=2)
    (theirs, t_trainer), (ours, o_trainer) = runs["lightning"], runs["lockstep"]
    assert max_parameter_difference(theirs, ours) < 1e-6
    assert o_trainer.global_step == t_trainer.global_step == 15
    # StepLR(step_size=1) stepped once an epoch: lr 0.1 -> 1e-4 after three epochs on both
    assert o_trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(t_trainer.optimizers[0].param_groups[0]["lr"])
    assert o_trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(1e-4)
    torch.manual_seed(0)
    assert max_parameter_difference(ours.layer, torch.nn.Linear(32, 2)) > 1e-3  # it trained


def test_boring_model_on_the_boring_datamodule_matches_lightning():
    runs = fit_both(lambda d: (d.boring_classes.BoringModel(), {"datamodule": d.boring_classes.BoringDataModule()}),
                    max_steps=6, limit_val_batches=3)
    assert max_parameter_difference(runs["lightning"][0], runs["lockstep"][0]) < 1e-6


def test_manual_optimization_boring_model_matches_lightning():
    runs = fit_both(lambda d: d.boring_classes.ManualOptimBoringModel(), max_steps=7, limit_val_batches=0)
    (theirs, t_trainer), (ours, o_trainer) = runs["lightning"], runs["lockstep"]
    assert max_parameter_difference(theirs, ours) < 1e-6
    assert o_trainer.global_step == t_trainer.global_step == 7


def test_demo_model_matches_lightning():
    def build(d):
        model = d.boring_classes.DemoModel(out_dim=4, learning_rate=0.05)
        return model, {"train_dataloaders": DataLoader(d.boring_classes.RandomDataset(32, 40), batch_size=8, shuffle=True)}

    runs = fit_both(build, max_epochs=2)
    assert max_parameter_difference(runs["lightning"][0], runs["lockstep"][0]) < 1e-6
    assert runs["lockstep"][1].global_step == 10


def test_net_gives_lightning_s_weights_and_outputs():
    outputs = {}
    for framework in ("lightning", "lockstep"):
        torch.manual_seed(5)
        net = demos(framework).boring_classes.Net()
        x = torch.randn(2, 1, 28, 28)
        outputs[framework] = (net, net(x), torch.randn(1))  # train mode: the dropouts draw too
    assert max_parameter_difference(outputs["lightning"][0], outputs["lockstep"][0]) == 0
    assert torch.allclose(outputs["lightning"][1], outputs["lockstep"][1], atol=1e-6)
    assert torch.equal(outputs["lightning"][2], outputs["lockstep"][2])


def test_demo_model_without_a_validation_step_skips_validation_as_lightning():
    # a validation pass would draw from the global generator (the iterable set) before the second
    # epoch's shuffle; Lightning asks for no validation data and runs none without a validation_step
    requested = []

    def build(d):
        class WithValData(d.boring_classes.DemoModel):
            def val_dataloader(self):
                requested.append(type(self).__module__)
                return DataLoader(d.boring_classes.RandomIterableDataset(32, 8))

        return WithValData(), {"train_dataloaders": DataLoader(d.boring_classes.RandomDataset(32, 24), batch_size=8, shuffle=True)}

    runs = fit_both(build, max_epochs=2)
    assert max_parameter_difference(runs["lightning"][0], runs["lockstep"][0]) < 1e-6
    assert requested == [] and runs["lockstep"][1].val_dataloaders == []


@pytest.mark.parametrize("sanity_steps", [2, 0])
def test_boring_model_validates_on_lightning_s_data(sanity_steps):
    # its val_dataloader draws a new RandomDataset: Lightning asks for it inside the sanity check
    # (RNG isolated, before the train loader); without a sanity check Lockstep asks at fit's start,
    # Lightning at the first validation, so only the parameters are compared then
    def build(d):
        class Logged(d.boring_classes.BoringModel):
            def validation_step(self, batch, batch_idx):
                loss = self.step(batch)
                self.log("val_loss", loss)
                return loss

        return Logged()

    runs = fit_both(build, max_epochs=2, limit_train_batches=3, limit_val_batches=4, num_sanity_val_steps=sanity_steps)
    (theirs, t_trainer), (ours, o_trainer) = runs["lightning"], runs["lockstep"]
    assert max_parameter_difference(theirs, ours) < 1e-6
    if sanity_steps:
        assert float(o_trainer.callback_metrics["val_loss"]) == pytest.approx(float(t_trainer.callback_metrics["val_loss"]), abs=1e-6)
