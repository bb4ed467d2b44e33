"""TensorBoardLogger: directory layout, versions, and what a real fit writes into the event files."""

from __future__ import annotations

import csv
import os

import pytest
import torch

from callbacks import Callback, CSVLogger, LearningRateMonitor, TensorBoardLogger
from tests.helpers.callbacks import Recorder, Scripted, event_files, loader, read_event_dir, scalars
from tests.helpers.models import QUIET
from trainer import Trainer


def test_version_is_next_free_number(tmp_path):
    (tmp_path / "logs" / "version_0").mkdir(parents=True)
    (tmp_path / "logs" / "version_3").mkdir()
    (tmp_path / "logs" / "version_x").mkdir()
    (tmp_path / "logs" / "version_7").write_text("a file, not a run")
    logger = TensorBoardLogger(save_dir=tmp_path)
    assert logger.version == 4
    assert logger.log_dir == os.path.join(str(tmp_path), "logs", "version_4")


def test_explicit_version_and_name(tmp_path):
    assert TensorBoardLogger(tmp_path, name="exp", version=2).log_dir == os.path.join(
        str(tmp_path), "exp", "version_2"
    )
    assert TensorBoardLogger(tmp_path, name="", version="run-a").log_dir == os.path.join(
        str(tmp_path), "run-a"
    )


@pytest.mark.parametrize("version, error", [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_version_is_rejected(tmp_path, version, error):
    with pytest.raises(error, match=r"`version` must be None, a non-negative int or a str"):
        TensorBoardLogger(tmp_path, version=version)


def test_logger_api_writes_one_event_file(tmp_path):
    logger = TensorBoardLogger(tmp_path, version=0)
    logger.log_hyperparams({"lr": 0.1, "opt": {"name": "sgd", "momentum": 0.9}, "layers": [1, 2]})
    logger.log_metrics({"a": 1.0, "b": 2}, step=3)
    logger.log_metrics({"a": 0.5}, step=6)
    logger.log_text("run_summary", "world size 1\nprecision 32-true")
    logger.finalize("success")

    files = event_files(tmp_path)
    assert len(files) == 1 and os.path.dirname(files[0]) == logger.log_dir  # no add_hparams sub-run
    # default_hp_metric: Lightning's hp_metric=-1 at step 0 goes with the hyperparameters
    assert scalars(logger.log_dir) == {"a": [(3, 1.0), (6, 0.5)], "b": [(3, 2.0)], "hp_metric": [(0, -1.0)]}
    acc = read_event_dir(logger.log_dir)
    assert "run_summary/text_summary" in acc.Tags()["tensors"]
    text = acc.Tensors("run_summary/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "world size 1" in text and "precision 32-true" in text
    hparams = acc.PluginTagToContent("hparams")
    assert set(hparams) == {
        "_hparams_/experiment",
        "_hparams_/session_start_info",
        "_hparams_/session_end_info",
    }
    from tensorboard.plugins.hparams import plugin_data_pb2

    info = plugin_data_pb2.HParamsPluginData.FromString(
        hparams["_hparams_/session_start_info"]
    ).session_start_info
    assert info.hparams["lr"].number_value == pytest.approx(0.1)
    assert info.hparams["opt/name"].string_value == "sgd"
    assert info.hparams["layers"].string_value == "[1, 2]"


def test_nonzero_rank_creates_nothing(tmp_path, monkeypatch):
    # before `setup` the rank comes from the launcher's environment
    monkeypatch.setenv("RANK", "1")
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"a": 1.0}, step=1)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_text("t", "x")
    logger.experiment.add_scalar("b", 1.0, 1)  # user code on every rank must not fail either
    logger.finalize("success")
    assert not logger.experiment
    assert list(tmp_path.iterdir()) == []


def test_fit_logs_scalars_hparams_and_summary(tmp_path):
    trainer = Trainer(accelerator="cpu",
        max_epochs=2,
        default_root_dir=tmp_path,
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_checkpointing=False,
        callbacks=[LearningRateMonitor()],
    )
    module = Scripted(val_script=[3.0, 2.0], train_script=[5.0, 4.0], lr=0.02, scheduler="epoch")
    trainer.fit(module, loader(32, 8), loader(16, 8))

    log_dir = os.path.join(str(tmp_path), "logs", "version_0")
    assert trainer.log_dir == log_dir
    assert isinstance(trainer.logger, TensorBoardLogger)
    values = scalars(log_dir)
    # every 2 of 8 optimizer steps, at the steps before each (Lightning's, docs/logging.md)
    assert [step for step, _ in values["train_loss"]] == [1, 3, 5, 7]
    assert values["val_metric"] == [(3, 3.0), (7, 2.0)]  # epoch means, at the epoch's last step records
    assert [step for step, _ in values["val_loss"]] == [3, 7]
    assert values["train_metric"] == [(3, 5.0), (7, 4.0)]  # training epoch means
    assert values["lr-SGD"] == [(0, pytest.approx(0.02)), (4, pytest.approx(0.01))]
    acc = read_event_dir(log_dir)
    summary = acc.Tensors("run_summary/text_summary")[0].tensor_proto.string_val[0].decode()
    for part in (
        "world size 1",
        "micro batch 8",
        "accumulation 1",
        "global batch 8",
        "precision",
        "strategy",
    ):
        assert part in summary
    assert "_hparams_/session_start_info" in acc.PluginTagToContent("hparams")
    assert len(event_files(tmp_path)) == 1

    # the next run in the same root gets the next version
    trainer2 = Trainer(accelerator="cpu",
        max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False, enable_checkpointing=False
    )
    trainer2.fit(Scripted(), loader(16, 8))
    assert trainer2.log_dir == os.path.join(str(tmp_path), "logs", "version_1")


class _ReadEventsAtEpochEnd(Callback):
    """Reads the event files while the writer is still open: proves the epoch-end flush."""

    def __init__(self) -> None:
        self.steps_on_disk: list[list[int]] = []

    def on_train_epoch_end(self, trainer, module):
        self.steps_on_disk.append([s for s, _ in scalars(trainer.log_dir).get("train_loss", [])])


def test_flushes_at_epoch_end(tmp_path):
    reader = _ReadEventsAtEpochEnd()
    trainer = Trainer(accelerator="cpu",
        max_epochs=2,
        default_root_dir=tmp_path,
        log_every_n_steps=1,
        callbacks=[reader],
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    trainer.fit(Scripted(), loader(32, 8))
    # the logger runs before ordinary callbacks, so its flush happened before the read
    assert reader.steps_on_disk == [[0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6, 7]]


def test_closed_on_exception_and_readable(tmp_path):
    recorder = Recorder()
    logger = TensorBoardLogger(tmp_path)
    trainer = Trainer(accelerator="cpu",
        max_epochs=3,
        logger=logger,
        log_every_n_steps=1,
        callbacks=[recorder],
        **{k: v for k, v in QUIET.items() if k != "logger"},
    )
    with pytest.raises(RuntimeError, match="failed on purpose at step 5"):
        trainer.fit(Scripted(fail_at_step=5), loader(32, 8))
    assert logger._writer is None  # closed
    assert [s for s, _ in scalars(logger.log_dir)["train_loss"]] == [0, 1, 2, 3, 4]
    assert isinstance(recorder.exception, RuntimeError)


def _two_loggers(**kwargs):
    return [TensorBoardLogger(**kwargs), CSVLogger(**kwargs)]


def test_tensorboard_and_csv_write_one_run_to_one_version(tmp_path):
    for run in range(2):
        loggers = _two_loggers()
        trainer = Trainer(accelerator="cpu",
            max_epochs=1,
            default_root_dir=tmp_path,
            logger=loggers,
            log_every_n_steps=1,  # 2 steps: something to write (the LR monitor logs at Lightning's steps)
            enable_progress_bar=False,
            enable_checkpointing=False,
        )
        trainer.fit(Scripted(), loader(16, 8))
        assert [lg.version for lg in loggers] == [run, run]
    assert sorted(os.listdir(tmp_path / "logs")) == ["version_0", "version_1"]
    for version in ("version_0", "version_1"):
        files = sorted(os.listdir(tmp_path / "logs" / version))
        assert [f for f in files if not f.startswith("events.")] == [
            ".lockstep-run",  # the run that writes there (a restart writes on only in its own)
            "hparams.json",
            "metrics.csv",
            "run_summary.txt",
        ]
        assert len([f for f in files if f.startswith("events.")]) == 1


def test_loggers_in_different_directories_share_the_next_version_free_in_all(tmp_path):
    for n in range(3):
        (tmp_path / "a" / "logs" / f"version_{n}").mkdir(parents=True)
    loggers = [
        TensorBoardLogger(tmp_path / "a"),
        CSVLogger(tmp_path / "b", name="csv"),
        CSVLogger(tmp_path / "c", version="mine"),  # an explicit version stays
    ]
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=loggers, log_every_n_steps=1, enable_progress_bar=False,
                      enable_checkpointing=False)  # 2 steps: log_every_n_steps=1 gives the CSV something to write
    trainer.fit(Scripted(), loader(16, 8))
    assert [lg.version for lg in loggers] == [3, 3, "mine"]
    assert os.path.isfile(tmp_path / "b" / "csv" / "version_3" / "metrics.csv")


class _Tested(Scripted):
    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.net(x), y))


def test_validate_and_test_after_fit_log_into_the_fit_version_without_duplicate_points(tmp_path):
    trainer = Trainer(accelerator="cpu",
        max_epochs=2,
        default_root_dir=tmp_path,
        logger=_two_loggers(),
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    module = _Tested()
    trainer.fit(module, loader(32, 8), loader(16, 8))
    [validated] = trainer.validate(module, loader(16, 8))
    [tested] = trainer.test(module, loader(16, 8))

    assert os.listdir(tmp_path / "logs") == ["version_0"]
    log_dir = tmp_path / "logs" / "version_0"
    assert len(event_files(log_dir)) == 1  # validate and test append to the fit's file (docs/logging.md)
    values = scalars(log_dir)
    # as Lightning: the fit's validations at the step of their epoch's last records, validate()
    # after fit at the steps the fit took
    assert [step for step, _ in values["val_loss"]] == [3, 7, 8]
    assert values["val_loss"][-1][1] == pytest.approx(validated["val_loss"], rel=1e-6)
    assert values["test_loss"] == [(8, pytest.approx(tested["test_loss"], rel=1e-6))]
    # every record carries `epoch`, one point per value: after fit the epoch counter is 2
    assert values["epoch"] == [(1, 0.0), (3, 0.0), (5, 1.0), (7, 1.0), (8, 2.0)]
    for tag, points in values.items():
        assert len(set(points)) == len(points), tag
    # the CSV file of the same version holds every record, validate's and test's included
    with open(log_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    val_rows = [(int(r["step"]), r["epoch"]) for r in rows if r["val_loss"]]
    assert val_rows == [(3, "0.0"), (7, "1.0"), (8, "2.0")]
    assert [(int(r["step"]), r["epoch"]) for r in rows if r["test_loss"]] == [(8, "2.0")]


class _BrokenOptimizers(Scripted):
    def configure_optimizers(self):
        raise RuntimeError("broken optimizer set-up")


class _BrokenStep(Scripted):
    def training_step(self, batch, batch_idx):
        raise RuntimeError("broken step")


def _failed_fit(root, module):
    trainer = Trainer(accelerator="cpu", max_epochs=1, default_root_dir=root, enable_progress_bar=False,
                      logger=[TensorBoardLogger(), CSVLogger()])
    with pytest.raises(RuntimeError, match="broken"):
        trainer.fit(module, loader())


def _tree(root):
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files)


def test_a_run_that_failed_before_writing_leaves_no_empty_version_dir(tmp_path):
    _failed_fit(tmp_path / "fresh", _BrokenOptimizers())
    assert _tree(tmp_path / "fresh") == []  # neither logs/version_0 nor logs
    earlier = tmp_path / "earlier" / "logs" / "version_0"
    earlier.mkdir(parents=True)
    _failed_fit(tmp_path / "earlier", _BrokenOptimizers())
    assert _tree(tmp_path / "earlier") == ["logs", os.path.join("logs", "version_0")]  # only this run's goes


def test_a_run_that_failed_after_writing_keeps_its_files(tmp_path):
    _failed_fit(tmp_path, _BrokenStep())
    version = tmp_path / "logs" / "version_0"
    assert len(event_files(version)) == 1 and (version / "hparams.json").exists()
