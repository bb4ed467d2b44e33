"""The loggers' Lightning arguments against Lightning's own loggers: same directories, same keys
(with ``prefix``), same points, same hyperparameter handling (``default_hp_metric``), same flush
schedule (``flush_logs_every_n_steps``). One process, no training except one tiny fit each."""
from __future__ import annotations

import csv
import os

import pytest
import torch

from tests.helpers.callbacks import read_event_dir, scalars
from tests.helpers.lightning_parity import fit, framework, make_module
from tests.helpers.optional import importorskip

importorskip("lightning", reason="needs `lightning` (the bench extra)")


def _loggers(name):
    if name == "lightning":
        from lightning.pytorch import loggers
    else:
        import callbacks as loggers
    return loggers


def _dirs(root):
    return sorted(os.path.relpath(d, root) for d, _, _ in os.walk(root))


def _hparams_tags(log_dir):
    return sorted(read_event_dir(log_dir).PluginTagToContent("hparams"))


TB_CONFIGS = {
    "defaults": {},
    "prefix_sub_dir": {"prefix": "p", "sub_dir": "tb", "name": "exp"},
    "no_hp_metric": {"default_hp_metric": False, "version": 3},
    "string_version_no_name": {"name": "", "version": "run-a", "sub_dir": "x/y"},
}


@pytest.mark.parametrize("kwargs", TB_CONFIGS.values(), ids=TB_CONFIGS.keys())
def test_tensorboard_logger_api_matches_lightning(tmp_path, kwargs):
    seen = {}
    for name in ("lightning", "lockstep"):
        root = tmp_path / name
        (root / "exp" / "version_0").mkdir(parents=True)  # an earlier run: the next version is 1
        (root / "version_4").mkdir()
        logger = _loggers(name).TensorBoardLogger(root, **{"name": "exp", **kwargs})
        logger.log_hyperparams({"lr": 0.1, "opt": {"name": "sgd"}})
        logger.log_metrics({"a": 1.0, "b": 2.0}, step=3)
        logger.log_metrics({"a": 0.5}, step=6)
        logger.log_hyperparams({"lr": 0.1}, metrics={"acc": 0.9})
        logger.finalize("success")
        seen[name] = {
            "log_dir": os.path.relpath(logger.log_dir, root),
            "version": logger.version,
            "dirs": _dirs(root),
            "scalars": scalars(logger.log_dir),
            "hparams": _hparams_tags(logger.log_dir),
        }
    assert seen["lockstep"] == seen["lightning"]


def test_tensorboard_hp_metric_number(tmp_path):
    seen = {}
    for name in ("lightning", "lockstep"):
        logger = _loggers(name).TensorBoardLogger(tmp_path / name, name="exp", prefix="q")
        logger.log_hyperparams({"lr": 0.1}, metrics=0.25)  # one number is hp_metric
        logger.finalize("success")
        seen[name] = scalars(logger.log_dir)
    assert seen["lockstep"] == seen["lightning"] == {"q-hp_metric": [(0, 0.25)]}


def _csv(path):
    if not os.path.exists(path):
        return None
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return sorted(reader.fieldnames), sorted(tuple(sorted(r.items())) for r in reader)


CSV_CONFIGS = {
    "defaults": {},
    "prefix_flush_3": {"prefix": "p", "flush_logs_every_n_steps": 3, "version": "v"},
    "flush_1_no_name": {"name": None, "flush_logs_every_n_steps": 1},
}


@pytest.mark.parametrize("kwargs", CSV_CONFIGS.values(), ids=CSV_CONFIGS.keys())
def test_csv_logger_matches_lightning(tmp_path, kwargs):
    seen = {}
    for name in ("lightning", "lockstep"):
        root = tmp_path / name
        logger = _loggers(name).CSVLogger(root, **{"name": "exp", **kwargs})
        states = []  # what is on disk after each call: the flush schedule
        for step, metrics in enumerate([{"a": 1.0}, {"a": 2.0}, {"a": 3.0, "b": 4.0}, {"b": 5.0}, {"a": 6.0}]):
            logger.log_metrics(metrics, step=step)
            states.append(_csv(os.path.join(logger.log_dir, "metrics.csv")))
        logger.finalize("success")
        states.append(_csv(os.path.join(logger.log_dir, "metrics.csv")))
        seen[name] = {"log_dir": os.path.relpath(logger.log_dir, root), "states": states}
    assert seen["lockstep"] == seen["lightning"]


@pytest.mark.timeout(240)
def test_fit_with_tensorboard_options_matches_lightning(tmp_path):
    """A real fit: same directories (checkpoints beside `sub_dir`), same prefixed points
    (values to 1e-6), the graph in the event file, hp_metric although the module has no hparams."""
    seen = {}
    for name in ("lightning", "lockstep"):
        L, cbs = framework(name)
        model = make_module(L)()
        model.example_input_array = torch.zeros(2, 4)
        root = tmp_path / name
        logger = _loggers(name).TensorBoardLogger(root, name="exp", prefix="p", sub_dir="tb", log_graph=True)
        trainer, _ = fit(name, [cbs.ModelCheckpoint()], epochs=2, module=model, logger=logger)
        acc = read_event_dir(trainer.log_dir)
        seen[name] = {
            "log_dir": os.path.relpath(trainer.log_dir, root),
            "dirs": _dirs(root),
            "checkpoints": sorted(os.listdir(root / "exp" / "version_0" / "checkpoints")),
            "graph": acc.Tags()["graph"],
            "scalars": {tag: [(step, round(v, 6)) for step, v in points] for tag, points in scalars(trainer.log_dir).items()
                        if not tag.startswith("p-lr-")},  # Lockstep's default LearningRateMonitor
        }
    assert seen["lockstep"] == seen["lightning"]
    assert seen["lockstep"]["graph"] and len(seen["lockstep"]["scalars"]["p-val_loss"]) == 2


@pytest.mark.timeout(240)
@pytest.mark.launches
def test_mlflow_save_dir_prefix_and_asynchronous_match_lightning(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="needs the mlflow extra")
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses `file:` stores otherwise
    seen = {}
    for name, synchronous in (("lightning", None), ("lockstep", None), ("lockstep", False)):
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # Lightning's logger sets it
        save_dir = tmp_path / f"{name}-{synchronous}"
        logger = _loggers(name).MLFlowLogger(experiment_name="e", save_dir=str(save_dir), prefix="p",
                                             synchronous=synchronous)
        logger.log_hyperparams({"lr": 0.1, "opt": {"name": "sgd"}})
        logger.log_metrics({"a": 1.0, "b": 2.0}, step=3)
        logger.log_metrics({"a": 0.5}, step=6)
        logger.finalize("success")
        client = MlflowClient(tracking_uri=f"file:{save_dir}")
        run = client.get_run(logger.run_id)
        seen[name, synchronous] = {
            "save_dir": logger.save_dir,
            "params": dict(run.data.params),
            "metrics": {k: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, k))
                        for k in run.data.metrics},
            "status": run.info.status,
        }
    lightning = seen["lightning", None]
    assert seen["lockstep", None] == {**lightning, "save_dir": str(tmp_path / "lockstep-None")}
    assert lightning["save_dir"] == str(tmp_path / "lightning-None")
    assert seen["lockstep", False] == {**lightning, "save_dir": str(tmp_path / "lockstep-False")}
    assert lightning["metrics"] == {"p-a": [(3, 1.0), (6, 0.5)], "p-b": [(3, 2.0)]}
