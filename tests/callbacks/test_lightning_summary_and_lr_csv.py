"""Issue 32 item 6: `RichModelSummary` is accepted (and, without `rich`, refused with Lightning's
message), and `LearningRateMonitor` with `CSVLogger` writes Lightning's learning-rate columns and
rows (the CSV files of the same run on both frameworks, compared)."""
from __future__ import annotations

import csv
import glob
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.optional import importorskip

import trainer as lockstep
from callbacks import CSVLogger, LearningRateMonitor, RichModelSummary

QUIET = {"accelerator": "cpu", "enable_checkpointing": False, "enable_progress_bar": False}


class _Net(lockstep.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader():
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)


def test_rich_model_summary_prints_the_table(capsys):
    pytest.importorskip("rich", reason="RichModelSummary needs `rich` (the dev extra)")
    t = lockstep.Trainer(max_epochs=1, logger=False, callbacks=[RichModelSummary(max_depth=1)], **QUIET)
    t.fit(_Net(), _loader())
    out = capsys.readouterr().out
    assert "net" in out and "Linear" in out and "Total params" in out
    assert sum(isinstance(c, RichModelSummary) for c in t.callbacks) == 1  # it is the run's model summary


def test_rich_model_summary_without_rich_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(ModuleNotFoundError, match=r"`RichModelSummary` requires `rich` to be installed. Install it by running `pip install -U rich`."):
        RichModelSummary()


def _lr_rows(framework, tmp_path, interval):
    if framework is lockstep:
        logger_cls, monitor_cls = CSVLogger, LearningRateMonitor
    else:
        from lightning.pytorch.callbacks import LearningRateMonitor as monitor_cls
        from lightning.pytorch.loggers import CSVLogger as logger_cls

    class Module(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = nn.functional.mse_loss(self.net(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            opt = torch.optim.Adam(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)}

    root = tmp_path / framework.__name__.replace(".", "_")
    t = framework.Trainer(max_epochs=3, log_every_n_steps=2, logger=logger_cls(str(root), name="run", version=0),
                          callbacks=[monitor_cls(logging_interval=interval)], enable_model_summary=False, **QUIET)
    t.fit(Module(), _loader())
    (path,) = glob.glob(str(root / "**" / "metrics.csv"), recursive=True)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    lr_rows = [(int(r["step"]), float(r["lr-Adam"])) for r in rows if r.get("lr-Adam")]
    return set(rows[0]), lr_rows


@pytest.mark.parametrize("interval", [None, "step", "epoch"])
def test_lr_monitor_with_csv_logger_writes_lightning_s_columns_and_rows(tmp_path, interval):
    importorskip("lightning", reason="needs `lightning` (the dev extra)")
    import lightning.pytorch as pl

    assert _lr_rows(lockstep, tmp_path, interval) == _lr_rows(pl, tmp_path, interval)


def _callback_metrics_seen(framework, tmp_path, interval):
    """The learning-rate entries of ``trainer.callback_metrics`` at every training batch and epoch
    end, and a callback's own entry written into it (as third-party callbacks write)."""
    if framework is lockstep:
        logger_cls, monitor_cls, base = CSVLogger, LearningRateMonitor, lockstep.Callback
    else:
        from lightning.pytorch.callbacks import LearningRateMonitor as monitor_cls
        from lightning.pytorch.loggers import CSVLogger as logger_cls
        base = framework.Callback

    seen = []

    class Writes(base):
        def on_train_epoch_start(self, trainer, module):
            trainer.callback_metrics["written"] = torch.tensor(float(trainer.current_epoch))

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            metrics = trainer.callback_metrics
            seen.append(sorted((k, round(float(v), 8)) for k, v in metrics.items() if k.startswith(("lr-", "written"))))

    class Module(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 1)

        training_step = _Net.training_step

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)}

    t = framework.Trainer(max_epochs=2, log_every_n_steps=2, logger=logger_cls(str(tmp_path / framework.__name__)),
                          callbacks=[monitor_cls(logging_interval=interval), Writes()], enable_model_summary=False,
                          **QUIET)
    t.fit(Module(), _loader())
    final = sorted(k for k in t.callback_metrics if k.startswith(("lr-", "written")))
    return seen, final


@pytest.mark.parametrize("interval", [None, "step"])
def test_lr_monitor_puts_the_rates_into_callback_metrics_as_lightning(tmp_path, interval):
    importorskip("lightning", reason="needs `lightning` (the dev extra)")
    import lightning.pytorch as pl

    ours, theirs = _callback_metrics_seen(lockstep, tmp_path, interval), _callback_metrics_seen(pl, tmp_path, interval)
    assert ours == theirs
    assert ours[1] == ["lr-AdamW", "written"]
