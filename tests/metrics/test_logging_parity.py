"""Lightning's logging surface on TrainModule: `log`/`log_dict` arguments, torchmetrics Metric
objects, `self.logger(s)`, `logger.experiment`, `self.print` (issue 12 item 4)."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks import EarlyStopping, ProgressBar, TensorBoardLogger
from callbacks.callback import Callback
from callbacks.logger import Logger
from tests.helpers.models import QUIET
from tests.helpers.optional import importorskip
from trainer import Trainer, TrainModule


def _loader(n: int, batch_size: int = 2) -> DataLoader:
    x = torch.arange(n * 2, dtype=torch.float32).reshape(n, 2)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=batch_size)


class Capture(Logger):
    """A logger that keeps every record it gets."""

    def __init__(self) -> None:
        self.records: list[dict[str, float]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.records.append(dict(metrics))

    def names(self) -> set[str]:
        return {k for r in self.records for k in r}


class Base(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.0)


# -- log / log_dict arguments ----------------------------------------------------------------
class Reductions(Base):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        v = float(batch_idx + 1)  # 1, 2, 3
        self.log("fx_max", v, on_step=False, on_epoch=True, reduce_fx=torch.max)
        self.log("fx_min", v, False, None, False, True, torch.min)  # Lightning's positional order
        self.log("fx_sum", v, on_step=False, on_epoch=True, reduce_fx="sum")
        self.log("old_sum", v, on_step=False, on_epoch=True, reduce="sum")  # the older name
        self.log("fx_mean", v, on_step=False, on_epoch=True, reduce_fx=torch.mean)
        self.log_dict({"d_a": v, "d_b": 2 * v}, on_step=False, on_epoch=True, reduce_fx="max")
        return self.loss(batch)


def test_reduce_fx_names_functions_and_the_reduce_alias():
    trainer = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    trainer.fit(Reductions(), _loader(6))
    got = {k: float(v) for k, v in trainer.callback_metrics.items()}
    assert got == {"fx_max": 3.0, "fx_min": 1.0, "fx_sum": 6.0, "old_sum": 6.0, "fx_mean": 2.0, "d_a": 3.0, "d_b": 6.0}


class BadLog(Base):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.kwargs = kwargs

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.log("x", 1.0, **self.kwargs)
        return self.loss(batch)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"reduce_fx": "median"}, "reduce_fx='median'): use one of ('mean', 'sum', 'max', 'min') or torch.mean"),
        ({"reduce_fx": torch.median}, "or torch.mean / torch.sum / torch.max / torch.min"),
        ({"reduce_fx": "max", "reduce": "sum"}, "give reduce_fx or its older name reduce, not both"),
    ],
)
def test_bad_reduction_is_a_clear_error(kwargs, fragment):
    trainer = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    with pytest.raises(ValueError) as info:
        trainer.fit(BadLog(**kwargs), _loader(2))
    assert fragment in str(info.value)


class HiddenFromLoggers(Base):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("shown", loss, on_step=True, on_epoch=True)
        self.log("hidden", loss, on_step=True, on_epoch=True, logger=False, prog_bar=True)
        self.log_dict({"hidden_d": loss}, logger=False)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_hidden", self.loss(batch), logger=False)
        self.log("val_shown", self.loss(batch))


def test_logger_false_reaches_callback_metrics_and_progress_bar_but_no_logger(tmp_path):
    capture = Capture()
    trainer = Trainer(accelerator="cpu",
        max_epochs=1, logger=capture, log_every_n_steps=1, default_root_dir=tmp_path,
        enable_progress_bar=False, enable_checkpointing=False,
    )
    trainer.fit(HiddenFromLoggers(), _loader(4), _loader(4))
    metrics = trainer.callback_metrics
    for name in ("hidden", "hidden_step", "hidden_epoch", "hidden_d", "val_hidden"):
        assert name in metrics, name
    # as Lightning's: a value logged on_step and on_epoch shows under its forked names only
    assert {"hidden_step", "hidden_epoch"} <= set(trainer.progress_bar_metrics)
    assert "hidden" not in trainer.progress_bar_metrics
    assert {"shown_step", "shown_epoch", "val_shown"} <= capture.names()
    assert "shown" not in capture.names()  # as Lightning: only the _step and _epoch forms
    assert not {n for n in capture.names() if "hidden" in n}  # before: all of them were sent
    assert not {n for n in trainer.logged_metrics if "hidden" in n}


class LogsLoss(Base):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train_loss", loss)
        return loss


def test_logged_metrics_hold_what_the_loggers_got_without_the_epoch_they_also_get(tmp_path):
    capture = Capture()
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=capture, log_every_n_steps=1, default_root_dir=tmp_path,
                      enable_progress_bar=False, enable_checkpointing=False)
    trainer.fit(LogsLoss(), _loader(4))
    assert {"train_loss", "epoch"} <= capture.names()
    assert "train_loss" in trainer.logged_metrics
    assert "epoch" not in trainer.logged_metrics  # as Lightning's: "epoch" goes to the loggers only
    assert float(trainer.logged_metrics["train_loss"]) == capture.records[-1]["train_loss"]


def test_logged_metrics_hold_the_epoch_s_last_step_values_sent_or_not(tmp_path):
    capture = Capture()
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=capture, log_every_n_steps=50, default_root_dir=tmp_path,
                      enable_progress_bar=False, enable_checkpointing=False)
    module = LogsLoss()
    trainer.fit(module, _loader(4))
    assert "train_loss" not in capture.names()  # 2 steps: none of them at log_every_n_steps
    assert "train_loss" in trainer.logged_metrics  # as Lightning's: the last step's value
    assert float(trainer.logged_metrics["train_loss"]) == float(trainer.callback_metrics["train_loss"])


# -- torchmetrics Metric objects --------------------------------------------------------------
class WithMetrics(Base):
    """Sums the validation inputs with a torchmetrics SumMetric; averages training losses."""

    def __init__(self) -> None:
        super().__init__()
        import torchmetrics

        self.val_total = torchmetrics.SumMetric()
        self.train_mean = torchmetrics.MeanMetric()
        self.losses: list[float] = []
        self.step_values: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.losses.append(float(loss.detach()))
        self.train_mean(loss)  # forward: updates, and keeps this batch's value
        self.log("train_mean", self.train_mean, on_step=True, on_epoch=True)
        self.step_values.append(float(self.trainer.callback_metrics["train_mean_step"]))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_total.update(batch[0].sum())
        self.log("val_total", self.val_total)


def test_a_torchmetrics_metric_is_computed_at_epoch_end_and_reset():
    importorskip("torchmetrics", reason="torchmetrics (the `dev` extra) is not installed")
    module = WithMetrics()
    val = _loader(4)
    full_val_sum = float(sum(b[0].sum() for b in val))
    trainer = Trainer(accelerator="cpu", max_epochs=2, num_sanity_val_steps=1, **QUIET)
    trainer.fit(module, _loader(6), val)
    # the sanity batch's update was reset: the epoch value holds every batch once
    assert float(trainer.callback_metrics["val_total"]) == full_val_sum
    assert module.step_values == module.losses  # on_step: that batch's value
    last_epoch = module.losses[3:]  # reset between epochs: the second epoch's mean only
    assert float(trainer.callback_metrics["train_mean_epoch"]) == pytest.approx(sum(last_epoch) / 3, rel=1e-6)
    for _ in range(2):  # reset after each run: no accumulation across validate calls
        assert trainer.validate(module, val)[0]["val_total"] == full_val_sum


class WithCollection(Base):
    def __init__(self) -> None:
        super().__init__()
        import torchmetrics

        metrics = {"sum": torchmetrics.SumMetric(), "max": torchmetrics.MaxMetric()}
        self.collection = torchmetrics.MetricCollection(metrics, prefix="val_")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.collection.update(batch[0].sum())
        self.log_dict(self.collection)


def test_log_dict_takes_a_metric_collection():
    importorskip("torchmetrics", reason="torchmetrics (the `dev` extra) is not installed")
    sums = [float(b[0].sum()) for b in _loader(4)]
    trainer = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    assert trainer.validate(WithCollection(), _loader(4)) == [{"val_sum": sum(sums), "val_max": max(sums)}]


class UpdateOnlyOnStep(Base):
    def __init__(self) -> None:
        super().__init__()
        import torchmetrics

        self.m = torchmetrics.MeanMetric()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.m.update(loss)
        self.log("m", self.m, on_step=True)
        return loss


def test_a_metric_logged_on_step_without_forward_logs_no_step_value_and_says_so():
    """Lightning logs nothing for such a step (silently); Lockstep trains on too, with a warning."""
    importorskip("torchmetrics", reason="torchmetrics (the `dev` extra) is not installed")
    trainer = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    with pytest.warns(UserWarning, match=r"has no value for this batch \(only .update\(\) was called\), so no step value"):
        trainer.fit(UpdateOnlyOnStep(), _loader(2))
    assert "m" not in trainer.callback_metrics and trainer.global_step > 0


@pytest.mark.launches
def test_logging_does_not_import_torchmetrics():
    code = (
        "import sys, torch\n"
        "from trainer import Trainer, TrainModule\n"
        "class M(TrainModule):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.l = torch.nn.Linear(1, 1)\n"
        "    def training_step(self, b, i):\n"
        "        loss = self.l(b[0]).sum(); self.log('loss', loss, on_epoch=True); return loss\n"
        "    def configure_optimizers(self):\n"
        "        return torch.optim.SGD(self.parameters(), lr=0.1)\n"
        "dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 1)), batch_size=2)\n"
        "Trainer(accelerator='cpu', max_epochs=1, logger=False, enable_progress_bar=False,\n"
        "        enable_checkpointing=False).fit(M(), dl)\n"
        "assert 'torchmetrics' not in sys.modules, 'torchmetrics was imported'\n"
    )
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr[-2000:]


# -- self.logger / self.loggers / experiment ---------------------------------------------------
class DrawsAnImage(Base):
    def on_train_epoch_end(self) -> None:
        assert self.loggers == self.trainer.loggers
        self.logger.experiment.add_image("picture", torch.rand(3, 4, 4), self.global_step)


def test_logger_experiment_is_the_summary_writer_for_add_image(tmp_path):
    from tests.helpers.callbacks import read_event_dir

    module = DrawsAnImage()
    assert module.logger is None and module.loggers == []  # not attached
    tb = TensorBoardLogger(save_dir=tmp_path)
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=tb, enable_progress_bar=False, enable_checkpointing=False)
    trainer.fit(module, _loader(2))
    from torch.utils.tensorboard import SummaryWriter

    assert isinstance(tb.experiment, SummaryWriter)
    tb.experiment.flush()
    assert read_event_dir(tb.log_dir).Tags()["images"] == ["picture"]


# -- self.print -------------------------------------------------------------------------------
class Prints(Base):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.print("hello from batch", batch_idx)
        return self.loss(batch)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream", [io.StringIO, Terminal])
@pytest.mark.parametrize("bar_type", ["ProgressBar", "RichProgressBar"])
def test_print_goes_through_the_progress_bar(stream, bar_type, capsys):
    if bar_type == "RichProgressBar":
        pytest.importorskip("rich", reason="rich (the `rich` extra) is not installed")
    import callbacks

    out = stream()
    bar = getattr(callbacks, bar_type)(file=out)
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                      enable_model_summary=False, callbacks=[bar])
    trainer.fit(Prints(), _loader(4))
    text = out.getvalue()
    # each message is a line of its own (the bar is cleared, the line written, the bar redrawn)
    lines = [ln.split("\r")[-1].split("\x1b[2K")[-1] for ln in text.split("\n")]
    assert "hello from batch 0" in lines and "hello from batch 1" in lines, repr(text)
    assert capsys.readouterr().out == ""  # nothing went around the bar to stdout


def test_print_without_progress_bar_prints(capsys):
    trainer = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    trainer.fit(Prints(), _loader(2))
    assert capsys.readouterr().out == "hello from batch 0\n"


# -- two ranks ---------------------------------------------------------------------------------
class SumsOnRanks(Base):
    def __init__(self) -> None:
        super().__init__()
        import torchmetrics

        self.val_total = torchmetrics.SumMetric()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_total(batch[0].sum())
        self.log("val_total", self.val_total)
        self.log("val_plain_sum", batch[0].sum(), reduce_fx="sum")
        self.print(f"rank {self.global_rank} batch {batch_idx}")


def _metric_on_two_ranks(rank: int, world_size: int) -> dict[str, Any]:
    import contextlib

    out = io.StringIO()
    trainer = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    with contextlib.redirect_stdout(out):
        results = [trainer.validate(SumsOnRanks(), _loader(8), verbose=False)[0] for _ in range(2)]
    return {"results": results, "printed": out.getvalue()}


@pytest.mark.distributed
def test_a_metric_syncs_itself_over_two_ranks_and_print_is_rank_zero_only():
    importorskip("torchmetrics", reason="torchmetrics (the `dev` extra) is not installed")
    from tests.helpers.distributed import run_ranks

    r0, r1 = run_ranks(_metric_on_two_ranks, world_size=2)
    full = float(torch.arange(16, dtype=torch.float32).sum())  # every rank's shard, summed
    for r in (r0, r1):
        assert r["results"] == [{"val_total": full, "val_plain_sum": full}] * 2
    assert r0["printed"] == "rank 0 batch 0\nrank 0 batch 1\n" * 2
    assert r1["printed"] == ""


# -- the same names as Lightning ---------------------------------------------------------------
def _names_module(base: type) -> type:
    import torchmetrics

    class Names(base):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(2, 1)
            self.mean = torchmetrics.MeanMetric()

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.mse_loss(self(x), y)
            self.log("both", loss, on_step=True, on_epoch=True)
            self.log("step_only", loss)
            self.log("epoch_only", loss, on_step=False, on_epoch=True, reduce_fx="max")
            self.log("hidden", loss, logger=False, on_epoch=True)
            self.mean(loss)
            self.log_dict({"tm": self.mean}, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", nn.functional.mse_loss(self(x), y), prog_bar=True)

        def on_train_epoch_end(self):
            self.log("at_epoch_end", 1.0)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.001)

    return Names


def test_metric_names_match_lightning(tmp_path):
    """callback_metrics and what reaches the loggers have Lightning's names (and the same values)."""
    importorskip("torchmetrics", reason="torchmetrics (the `dev` extra) is not installed")
    pl = importorskip("lightning.pytorch", reason="Lightning 2.x (the `dev` extra) is not installed")

    class LightningCapture(pl.loggers.Logger):
        name, version = "capture", 0

        def __init__(self) -> None:
            super().__init__()
            self.keys: set[str] = set()

        def log_metrics(self, metrics, step=None):
            self.keys |= set(metrics)

        def log_hyperparams(self, *args, **kwargs):
            pass

    runs = {}
    for framework in ("lightning", "lockstep"):
        torch.manual_seed(0)
        kw = dict(max_epochs=2, log_every_n_steps=1, enable_progress_bar=False, enable_checkpointing=False)
        if framework == "lightning":
            capture: Any = LightningCapture()
            trainer: Any = pl.Trainer(accelerator="cpu", devices=1, logger=capture, enable_model_summary=False,
                                      default_root_dir=tmp_path / framework, **kw)
            module = _names_module(pl.LightningModule)()
        else:
            capture = Capture()
            trainer = Trainer(accelerator="cpu", logger=capture, default_root_dir=tmp_path / framework, **kw)
            module = _names_module(TrainModule)()
        trainer.fit(module, _loader(6), _loader(4))
        sent = capture.keys if framework == "lightning" else capture.names()
        runs[framework] = (
            {k: float(v) for k, v in trainer.callback_metrics.items()},
            {k for k in sent if not k.startswith("lr-")},  # Lockstep's default LearningRateMonitor
        )
    (l_metrics, l_sent), (o_metrics, o_sent) = runs["lightning"], runs["lockstep"]
    assert o_sent == l_sent
    assert o_metrics.keys() == l_metrics.keys()
    assert o_metrics == pytest.approx(l_metrics, rel=1e-6)


# -- loggers write each epoch's aggregates before the hooks that follow ---------------------------
class ReadsTheCsv(Callback):
    """Reads metrics.csv in on_validation_end and in (metric-monitor) on_train_epoch_end."""

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self.seen: list[set[str]] = []

    def _read(self) -> None:
        import csv

        with open(self.logger.metrics_file_path, newline="") as f:
            self.seen.append({k for row in csv.DictReader(f) for k, v in row.items() if v})

    def on_validation_end(self, trainer, module):
        self._read()


class MonitorReadsTheCsv(ReadsTheCsv, EarlyStopping):
    def __init__(self, logger: Any) -> None:
        ReadsTheCsv.__init__(self, logger)
        EarlyStopping.__init__(self, monitor="val_loss", patience=100)

    def on_validation_end(self, trainer, module):
        EarlyStopping.on_validation_end(self, trainer, module)

    def on_train_epoch_end(self, trainer, module):
        self._read()


class LogsEpochAndVal(Base):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.loss(batch))


def test_the_csv_holds_the_epoch_aggregates_when_the_following_hooks_run(tmp_path):
    from callbacks import CSVLogger

    csv_logger = CSVLogger(save_dir=tmp_path)
    reader, monitor = ReadsTheCsv(csv_logger), MonitorReadsTheCsv(csv_logger)
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=csv_logger, callbacks=[reader, monitor],
                      num_sanity_val_steps=0, enable_progress_bar=False, enable_checkpointing=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(LogsEpochAndVal(), _loader(4), _loader(4))
    assert "val_loss" in reader.seen[0]  # the validation run's aggregate, saved before on_validation_end
    assert "train_loss" in monitor.seen[0]  # the training epoch's, saved before the monitors' epoch end
