"""CSVLogger: metrics.csv with growing columns, hparams.json, rank 0 only, and a real fit."""

from __future__ import annotations

import csv
import json
import os

import pytest

from callbacks import CSVLogger
from tests.helpers.callbacks import Scripted, loader
from trainer import Trainer


def _rows(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def test_columns_grow_and_file_is_rewritten(tmp_path):
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=1)
    logger.log_metrics({"a": 1.0}, step=1)
    logger.log_metrics({"a": 2.0}, step=2)
    logger.log_metrics({"b": 3.0, "a": 4.0}, step=3)  # new key: rewrite with the union
    logger.log_metrics({"a": 5.0}, step=4)  # known keys: appended
    logger.finalize("success")
    header, rows = _rows(logger.metrics_file_path)
    assert header == ["step", "a", "b"]
    assert [(r["step"], r["a"], r["b"]) for r in rows] == [
        ("1", "1.0", ""),
        ("2", "2.0", ""),
        ("3", "4.0", "3.0"),
        ("4", "5.0", ""),
    ]
    assert logger.metrics_file_path == os.path.join(str(tmp_path), "logs", "version_0", "metrics.csv")
    assert not [p for p in os.listdir(logger.log_dir) if p.endswith(".tmp")]


def test_rows_are_buffered_until_flush(tmp_path):
    # Lightning's rule: written out when a row's step + 1 is a multiple of n
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=3)
    logger.log_metrics({"a": 1.0}, step=0)
    logger.log_metrics({"a": 2.0}, step=1)
    assert not os.path.exists(logger.metrics_file_path)
    logger.log_metrics({"a": 3.0}, step=2)
    assert len(_rows(logger.metrics_file_path)[1]) == 3
    logger.log_metrics({"a": 4.0}, step=3)
    logger.log_metrics({"a": 4.5}, step=3)
    assert len(_rows(logger.metrics_file_path)[1]) == 3


def test_hparams_json_and_text(tmp_path):
    logger = CSVLogger(tmp_path, version=5)
    logger.log_hyperparams({"lr": 0.1, "opt": {"name": "sgd"}, "obj": object})
    logger.log_hyperparams({"batch": 8})
    logger.log_text("run_summary", "world size 1")
    with open(os.path.join(logger.log_dir, "hparams.json")) as f:
        hparams = json.load(f)
    assert hparams["lr"] == 0.1 and hparams["opt"] == {"name": "sgd"} and hparams["batch"] == 8
    assert hparams["obj"] == str(object)
    assert open(os.path.join(logger.log_dir, "run_summary.txt")).read() == "world size 1\n"


def test_nonzero_rank_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=1)
    logger.log_metrics({"a": 1.0}, step=1)
    logger.log_hyperparams({"lr": 0.1})
    logger.finalize("success")
    assert list(tmp_path.iterdir()) == []


def test_bad_flush_every(tmp_path):
    with pytest.raises(ValueError, match=r"CSVLogger\(flush_logs_every_n_steps\) must be an int >= 1, got 0"):
        CSVLogger(tmp_path, flush_logs_every_n_steps=0)


def test_fit_writes_metrics_csv(tmp_path):
    logger = CSVLogger(tmp_path)
    trainer = Trainer(accelerator="cpu",
        max_epochs=2,
        logger=logger,
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(Scripted(val_script=[3.0, 2.0]), loader(32, 8), loader(16, 8))
    assert trainer.log_dir == os.path.join(str(tmp_path), "logs", "version_0")
    header, rows = _rows(logger.metrics_file_path)
    assert header[0] == "step" and {"train_loss", "val_metric", "val_loss", "epoch"} <= set(header)
    # Lightning's steps: the steps before the batch (docs/logging.md)
    assert [int(r["step"]) for r in rows if r["train_loss"]] == [1, 3, 5, 7]
    assert [(int(r["step"]), float(r["val_metric"])) for r in rows if r["val_metric"]] == [(3, 3.0), (7, 2.0)]
    with open(os.path.join(logger.log_dir, "hparams.json")) as f:
        assert json.load(f) == {"lr": 0.01}


def test_every_trainer_record_carries_epoch(tmp_path):
    # docs/logging.md: step records, validation results and training epoch aggregates alike
    logger = CSVLogger(tmp_path)
    trainer = Trainer(accelerator="cpu",
        max_epochs=2,
        logger=logger,
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    trainer.fit(Scripted(val_script=[3.0, 2.0], train_script=[5.0, 4.0]), loader(32, 8), loader(16, 8))
    _, rows = _rows(logger.metrics_file_path)
    records = [r for r in rows if not r.get("lr-SGD")]  # LearningRateMonitor writes its own rows
    kinds = {"train_loss": [], "val_loss": [], "train_metric": []}
    for r in records:
        for key in kinds:
            if r[key]:
                kinds[key].append((int(r["step"]), float(r["epoch"])))
    assert kinds == {
        "train_loss": [(1, 0.0), (3, 0.0), (5, 1.0), (7, 1.0)],
        "val_loss": [(3, 0.0), (7, 1.0)],
        "train_metric": [(3, 0.0), (7, 1.0)],  # the training-epoch-end record
    }
    assert all(r["epoch"] for r in records)


@pytest.mark.parametrize("argument", ["name", "version"])
@pytest.mark.parametrize("value", ["../x", "/abs/x", "a/b", ".."])
def test_a_name_or_version_that_is_a_path_is_refused(tmp_path, argument, value):
    """Each is one directory under save_dir (a config file may give it): nothing leads outside."""
    from callbacks import TensorBoardLogger

    for cls in (CSVLogger, TensorBoardLogger):
        with pytest.raises(ValueError, match=rf"{cls.__name__}\({argument}\) must be one path component .*got "
                           + repr(value).replace(".", r"\.")):
            cls(tmp_path, **{argument: value})
    assert list(tmp_path.iterdir()) == []
