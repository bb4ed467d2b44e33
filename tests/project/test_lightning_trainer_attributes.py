"""Every public attribute of Lightning's ``Trainer`` exists on Lockstep's, or raises an error naming
what to use instead (`trainer.lightning_attributes.NOT_PROVIDED_TRAINER_ATTRIBUTES`); the walk
reads the installed Lightning, so an attribute it adds fails here until provided or listed. The
values are compared with Lightning's at the hooks a callback reads them in."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.optional import importorskip

import trainer as lockstep
from callbacks import EarlyStopping
from trainer.lightning_attributes import NOT_PROVIDED_TRAINER_ATTRIBUTES
from trainer.unsupported import NotProvidedAttributeError

pl = importorskip("lightning.pytorch", reason="needs `lightning` (the dev extra)")
QUIET = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
         "enable_checkpointing": False}


def _public_attributes() -> list[str]:
    made = pl.Trainer(**QUIET)
    return sorted({n for n in dir(pl.Trainer) if not n.startswith("_")} |
                  {n for n in vars(made) if not n.startswith("_")})


@pytest.mark.parametrize("name", _public_attributes())
def test_each_lightning_trainer_attribute_exists_or_names_the_alternative(name):
    t = lockstep.Trainer(**QUIET)
    if name in NOT_PROVIDED_TRAINER_ATTRIBUTES:
        with pytest.raises(NotProvidedAttributeError, match=rf"trainer\.{name}: .* not provided by Lockstep; use"):
            getattr(t, name)
        assert not hasattr(t, name)
        return
    try:
        getattr(t, name)
    except AttributeError as error:
        raise AssertionError(f"Lightning's trainer.{name} is missing: {error}") from None
    except Exception:  # noqa: BLE001 - exists, but needs a run (trainer.model before fit, say)
        pass


def test_the_list_names_only_what_lightning_has_and_lockstep_lacks():
    assert set(NOT_PROVIDED_TRAINER_ATTRIBUTES) <= set(_public_attributes())


def _module(framework):
    class Module(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            self.log("val", self.net(batch[0]).sum())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Module


def _record(framework, early_stopping):
    seen = []

    class Reads(framework.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            seen.append(("batch", batch_idx, trainer.is_last_batch))

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            seen.append(("batch end", batch_idx, trainer.is_last_batch))

        def on_fit_start(self, trainer, module):
            seen.append(("fit", trainer.num_devices, trainer.device_ids, trainer.distributed_sampler_kwargs,
                         type(trainer.early_stopping_callback).__name__, len(trainer.early_stopping_callbacks),
                         trainer.progress_bar_callback, trainer.scaler))

        def on_train_start(self, trainer, module):
            seen.append(("train", trainer.enable_validation, trainer.num_sanity_val_batches))

    loader = DataLoader(TensorDataset(torch.randn(6, 2)), batch_size=2)
    t = framework.Trainer(max_epochs=1, num_sanity_val_steps=5, callbacks=[Reads(), early_stopping("val")], **QUIET)
    t.fit(_module(framework)(), loader, loader)
    return seen


def test_the_attributes_a_callback_reads_are_lightning_s():
    ours = _record(lockstep, EarlyStopping)
    theirs = _record(pl, pl.callbacks.EarlyStopping)
    assert ours == theirs
    assert ("batch end", 2, True) in ours and ("train", True, [3]) in ours


def test_interrupted_and_init_module():
    class Interrupts(lockstep.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            raise KeyboardInterrupt

    t = lockstep.Trainer(max_epochs=1, callbacks=[Interrupts()], **QUIET)
    assert t.interrupted is False and t.accelerator.kind == "cpu"
    with pytest.raises(KeyboardInterrupt):
        t.fit(_module(lockstep)(), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    assert t.interrupted is True
    t = lockstep.Trainer(accelerator="cpu", precision="bf16-true", logger=False)
    with t.init_module():
        layer = nn.Linear(2, 2)
    assert layer.weight.dtype == torch.bfloat16 and torch.get_default_dtype() == torch.float32


# Lightning's Trainer attributes whose value on a fresh Trainer (no run yet) Lockstep gives differently:
# Lockstep keeps the setting as given where Lightning resolves it at construction
FRESH_DIFFERENCES = {
    "estimated_stepping_batches": "Lockstep raises until fit has set up its data (Lightning loads the train loader)",
    "gradient_clip_algorithm": "Lockstep's default is 'norm' (Lightning: None, resolved to 'norm' at the first clip)",
    "limit_train_batches": "None as given (Lightning: 1.0)",
    "limit_val_batches": "None as given (Lightning: 1.0)",
    "limit_test_batches": "None as given (Lightning: 1.0)",
    "limit_predict_batches": "None as given (Lightning: 1.0)",
    "max_epochs": "Lockstep resolves the default epoch limit at construction (Lightning: None until fit)",
    "num_training_batches": "None before fit (Lightning: inf)",
    "val_dataloaders": "an empty list before a run (Lightning: None)",
    "test_dataloaders": "an empty list before a run (Lightning: None)",
    "predict_dataloaders": "an empty list before a run (Lightning: None)",
}


def _outcome(t, name):
    try:
        return "None" if getattr(t, name) is None else "value"
    except Exception:  # noqa: BLE001 - raising is the outcome compared
        return "raises"


def test_a_fresh_trainer_answers_none_values_and_errors_where_lightning_does():
    """Libraries test ``trainer.model is None`` (and the like) before a run: on a fresh Trainer each
    attribute is None, a value, or raises exactly where Lightning's is, but for the listed ones."""
    theirs, ours = pl.Trainer(**QUIET), lockstep.Trainer(**QUIET)
    differ = {
        name: (_outcome(theirs, name), _outcome(ours, name))
        for name in _public_attributes()
        if name not in NOT_PROVIDED_TRAINER_ATTRIBUTES and name not in FRESH_DIFFERENCES
        and _outcome(theirs, name) != _outcome(ours, name)
    }
    assert not differ, differ
    assert set(FRESH_DIFFERENCES) <= set(_public_attributes())
