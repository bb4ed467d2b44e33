"""Launched by tests/project/test_as_lightning_ddp_data.py with ``python`` (the installed Lightning) and
with ``python -m trainer.as_lightning``: a Lightning script on 2 CPU ranks (``ddp``, gloo) whose
loaders are the kinds libraries hand the Trainer (the library census, docs/migration.md), and which
notes, rank by rank, which samples each stage ran on.

- ``fit`` over a loader with a sampler of its own that draws a fresh permutation from its own
  generator each epoch (chemprop's ``SeededSampler``), validating on 5 samples (uneven over 2 ranks);
- ``validate``, ``test`` (5 samples: Lightning pads the shards) and ``predict`` (Lightning's unpadded
  shards, each rank's own predictions returned);
- a second fit over a ``DataLoader`` subclass of ``(dataset, **kwargs)`` that sets its own
  ``collate_fn`` (neuralforecast's ``TimeSeriesLoader``), returned by a DataModule's hook, unshuffled
  (Lightning's training sampler shuffles all the same).

Each rank writes ``rank<N>.json`` into ``$LOCKSTEP_TEST_OUT``: the dataset indices of every batch of
every stage, the global steps, the parameters after each fit (and the first fit's buffers: Lightning's
first validation step after training gets rank 0's through DDP's forward), the last ``train_loss`` (logged on_step
with ``sync_dist=True``) in ``callback_metrics``, what ``test`` and ``predict`` returned,
and the second model's initial parameters (Lightning's DDP seeds again at the start of every run).
"""
import json
import os

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data.dataloader import default_collate

import lightning.pytorch as pl

OUT = os.environ["LOCKSTEP_TEST_OUT"]


class Indexed(Dataset):
    """``n`` samples ``(x, y, index)``, the same for a given ``n`` in every process."""

    def __init__(self, n):
        generator = torch.Generator().manual_seed(n)
        self.x = torch.randn(n, 4, generator=generator)
        self.y = self.x.sum(dim=1, keepdim=True)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index], self.y[index], torch.tensor(index)


class OwnPermutation(Sampler):
    """A new permutation each epoch from the sampler's own seeded generator (not torch's global one)."""

    def __init__(self, n, seed):
        self.n = n
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self):
        return iter(torch.randperm(self.n, generator=self.generator).tolist())

    def __len__(self):
        return self.n


class SeriesLoader(DataLoader):
    """A DataLoader subclass taking ``(dataset, **kwargs)`` that always collates with its own method."""

    def __init__(self, dataset, **kwargs):
        kwargs.pop("collate_fn", None)
        super().__init__(dataset, collate_fn=self._collate, **kwargs)

    def _collate(self, items):
        return default_collate(items)


class Series(pl.LightningDataModule):
    def train_dataloader(self):
        return SeriesLoader(Indexed(12), batch_size=2, shuffle=False)  # Lightning shuffles every training loader


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        # BatchNorm: its running statistics are buffers, which DDP's forward broadcasts from rank 0
        self.net = torch.nn.Sequential(torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
        self.seen = {}

    def _note(self, stage, batch):
        self.seen.setdefault(stage, []).append(batch[2].tolist())
        x, y, _ = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def training_step(self, batch, batch_idx):
        loss = self._note(f"fit{self.trainer.current_epoch}", batch)
        self.log("train_loss", loss, sync_dist=True)  # on_step: Lightning reduces it as it is logged
        return loss

    def validation_step(self, batch, batch_idx):
        stage = "validate" if self.trainer.validating else f"fit_validate{self.trainer.current_epoch}"
        self.log("val_loss", self._note(stage, batch))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self._note("test", batch))

    def predict_step(self, batch, batch_idx):
        self._note("predict", batch)
        return batch[2]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def parameters(model):
    return [round(v, 6) for v in torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()]


def buffers(model):
    return [round(v, 6) for v in torch.cat([b.detach().flatten().double() for b in model.buffers()]).tolist()]


if __name__ == "__main__":
    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
             "enable_model_summary": False, "num_sanity_val_steps": 0}
    pl.seed_everything(0)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, **quiet)
    model = Model()
    trainer.fit(model, DataLoader(Indexed(12), batch_size=2, sampler=OwnPermutation(12, seed=3)),
                DataLoader(Indexed(5), batch_size=2))
    record = {"fit_steps": trainer.global_step, "fit_params": parameters(model), "fit_buffers": buffers(model),
              "train_loss": round(float(trainer.callback_metrics["train_loss"]), 6)}
    trainer.validate(model, DataLoader(Indexed(5), batch_size=2))
    record["tested"] = trainer.test(model, DataLoader(Indexed(5), batch_size=2))
    record["predicted"] = [p.tolist() for p in trainer.predict(model, DataLoader(Indexed(5), batch_size=2))]
    series = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, **quiet)
    series_model = Model()
    record["series_init"] = parameters(series_model)  # drawn after Lightning's DDP reseeded for each run
    series.fit(series_model, datamodule=Series())
    record.update(series_steps=series.global_step, series_params=parameters(series_model),
                  seen=model.seen, series_seen=series_model.seen)
    with open(os.path.join(OUT, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump(record, f, indent=1)
