"""Issue 45 item 7: every logger record lands at Lightning's step. The same small module (shuffled,
37 samples in batches of 4, so the last batch is short) runs under Lightning and under Lockstep,
each with a `CSVLogger` and a `TensorBoardLogger`, and the (name, step, value) records of both
frameworks' files are compared: training step values every `log_every_n_steps`, training-epoch
aggregates, validation at each epoch's end and mid-epoch (`val_check_interval`), evaluation batch
values, a `validate()` after the fit, the learning-rate monitor (step and epoch schedulers), with
and without accumulation, and under manual optimization (where Lightning's step counts batches)."""
from __future__ import annotations

import csv
import glob
import os
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.lightning_parity import framework
from tests.helpers.optional import importorskip

importorskip("lightning", reason="needs `lightning` (the bench extra)")


def _module_class(L: Any, manual: bool) -> Any:
    """A regressor logging step values, step-and-epoch values and evaluation batch values. With
    ``manual``: two optimizers stepped by the module, the second every other batch, so the
    loggers' step (Lightning counts batches there) is not ``global_step``; one rate changes by
    step, one by epoch, for both of the monitor's intervals."""

    class Regressor(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = not manual
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 1))

        def _loss(self, batch: Any) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = self._loss(batch)
            self.log("train_loss", loss)
            self.log("train_abs", loss.sqrt(), on_step=True, on_epoch=True)
            if not manual:
                return loss
            first, second = self.optimizers()
            first.zero_grad()
            second.zero_grad()
            self.manual_backward(loss)
            first.step()
            self.lr_schedulers()[0].step()
            if batch_idx % 2:
                second.step()
            return None

        def on_train_epoch_end(self) -> None:
            if manual:
                self.lr_schedulers()[1].step()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            loss = self._loss(batch)
            self.log("val_loss", loss)
            self.log("val_batch", loss, on_step=True, on_epoch=False)

        def train_dataloader(self) -> DataLoader:
            g = torch.Generator().manual_seed(1)
            x = torch.randn(37, 3, generator=g)
            return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4, shuffle=True)

        def val_dataloader(self) -> DataLoader:
            g = torch.Generator().manual_seed(2)
            x = torch.randn(10, 3, generator=g)
            return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)

        def configure_optimizers(self) -> Any:
            first = torch.optim.SGD(
                [{"params": self.net[0].parameters()}, {"params": self.net[2].parameters(), "lr": 0.05}],
                lr=0.1, momentum=0.9,
            )
            by_step = {"scheduler": torch.optim.lr_scheduler.StepLR(first, step_size=3, gamma=0.8), "interval": "step"}
            if not manual:
                return {"optimizer": first, "lr_scheduler": by_step}
            second = torch.optim.Adam(self.net[2].parameters(), lr=0.01)
            by_epoch = {"scheduler": torch.optim.lr_scheduler.ExponentialLR(second, gamma=0.5), "interval": "epoch"}
            return [first, second], [by_step, by_epoch]

    return Regressor


def _loggers(name: str, root: str) -> list[Any]:
    if name == "lightning":
        from lightning.pytorch import loggers
    else:
        import callbacks as loggers
    return [loggers.CSVLogger(root, name="csv", version=0), loggers.TensorBoardLogger(root, name="tb", version=0)]


def _csv_records(root: str) -> list[tuple[int, list[tuple[str, float]]]]:
    """``(step, [(name, value), ...])`` per row, in file order (a row's columns by name: the
    two loggers order the header differently)."""
    with open(os.path.join(root, "csv", "version_0", "metrics.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    return [
        (int(row.pop("step")), sorted((name, round(float(value), 6)) for name, value in row.items() if value != ""))
        for row in rows
    ]


def _tb_records(root: str) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of every scalar event in write order, read raw: an
    `EventAccumulator` drops the points it takes for a restart's orphans (an evaluation batch's
    step is below the training's)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    files = [list(EventFileLoader(path).Load()) for path in glob.glob(os.path.join(root, "tb", "version_0", "events.out.tfevents.*"))]
    out: dict[str, list[tuple[int, float]]] = {}
    # a file per call, in the order written: the names sort by a per-process counter (`.10` before `.9`)
    for events in sorted(files, key=lambda events: events[0].wall_time):
        for event in events:
            for value in event.summary.value:
                if value.tag == "hp_metric" or value.metadata.plugin_data.plugin_name not in ("", "scalars"):
                    continue
                number = value.simple_value if value.HasField("simple_value") else tensor_util.make_ndarray(value.tensor).item()
                out.setdefault(value.tag, []).append((int(event.step), round(float(number), 6)))
    return out


def _without_repeats(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """A tag's points less each that repeats the one before: Lockstep does not write it again
    (docs/logging.md); Lightning repeats ``epoch`` with each record of a step."""
    return [p for i, p in enumerate(points) if i == 0 or points[i - 1] != p]


def _rate_rows_once(rows: list[Any]) -> list[Any]:
    """The rows less a learning-rate row that repeats one already written: Lockstep's
    `LearningRateMonitor` logs once per optimizer step, Lightning's at each micro batch of an
    accumulation window (docs/migration.md)."""
    out: list[Any] = []
    for row in rows:
        rates_only = all(name.startswith("lr-") for name, _ in row[1])
        if not (rates_only and row in out):
            out.append(row)
    return out


def _compared(records: dict[str, Any]) -> dict[str, Any]:
    return {"csv": _rate_rows_once(records["csv"]), "tb": {t: _without_repeats(p) for t, p in records["tb"].items()}}


def _run(name: str, root: str, manual: bool, **trainer_args: Any) -> dict[str, Any]:
    L, cbs = framework(name)
    torch.manual_seed(0)  # the shuffled order's seed, drawn from the global state as Lightning draws it
    trainer = L.Trainer(
        max_epochs=3, accelerator="cpu", devices=1, logger=_loggers(name, root), log_every_n_steps=2,
        callbacks=[cbs.LearningRateMonitor()], enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, **trainer_args,
    )
    module = _module_class(L, manual)()
    trainer.fit(module)
    trainer.validate(module)  # logged at the steps the fit took
    return {"csv": _csv_records(root), "tb": _tb_records(root)}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("val_check_interval", [1.0, 0.5], ids=["epoch_end", "mid_epoch"])
@pytest.mark.parametrize("optimization", ["automatic", "accumulate_2", "manual"])
def test_every_record_lands_at_lightning_s_step(tmp_path, optimization, val_check_interval):
    args: dict[str, Any] = {"val_check_interval": val_check_interval}
    if optimization == "accumulate_2":
        # the loader's own sampler: the default one weighs the short last batch of a window by
        # its samples, Lightning by 1 / A (docs/migration.md), and the values would differ
        args.update(accumulate_grad_batches=2, use_distributed_sampler=False)
    runs = {name: _run(name, str(tmp_path / name), optimization == "manual", **args) for name in ("lightning", "lockstep")}
    ours, theirs = runs["lockstep"], runs["lightning"]
    assert ours == _compared(ours)  # Lockstep writes no record twice
    assert ours == _compared(theirs)
