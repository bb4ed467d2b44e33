"""`DataModule`: the same numbers as the same loaders passed directly, Lightning's hook order,
its state in checkpoints, 2 ranks (prepare_data once per node) and spawned workers."""
from __future__ import annotations

import os
import time
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from callbacks import Callback, Logger
from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, loader, params_of, regression_data
from trainer import DataModule, LightningDataModule, LightningModule, Trainer, TrainModule


class RegressionData(DataModule):
    """``regression_data`` split into train/val/test/predict; shuffled with a seeded generator."""

    def __init__(self, batch_size: int = 8, n: int = 64, seed: int = 0, workdir: str | None = None) -> None:
        super().__init__()
        self.save_hyperparameters(ignore="workdir")
        self.workdir = workdir
        self.calls: list[str] = []
        self.epochs_seen = 0  # state: saved in checkpoints

    def prepare_data(self) -> None:
        self.calls.append("prepare_data")
        if self.workdir is not None:  # one file per call, whichever process made it
            time.sleep(0.5)  # late: a rank that did not wait for it would set up without it
            with open(os.path.join(self.workdir, f"prepared-{os.getpid()}-{len(self.calls)}"), "w"):
                pass

    def setup(self, stage: str) -> None:
        self.calls.append(f"setup:{stage}")
        if self.workdir is not None:  # every rank sets up after local rank 0 prepared
            assert os.listdir(self.workdir), f"rank {self.trainer.global_rank} set up before prepare_data ended"
        self.data = regression_data(self.hparams.n, seed=self.hparams.seed)

    def teardown(self, stage: str) -> None:
        self.calls.append(f"teardown:{stage}")

    def train_dataloader(self) -> DataLoader:
        self.calls.append(f"train_dataloader:{self.epochs_seen}")
        return train_loader(self.data, self.hparams.batch_size)

    def val_dataloader(self) -> DataLoader:
        return loader(self.data, self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return loader(self.data, self.hparams.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return loader(self.data, self.hparams.batch_size)

    def state_dict(self) -> dict[str, Any]:
        return {"epochs_seen": self.epochs_seen}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.calls.append(f"load_state_dict:{state_dict['epochs_seen']}")
        self.epochs_seen = state_dict["epochs_seen"]


def train_loader(data: Any, batch_size: int) -> DataLoader:
    return DataLoader(data, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(3))


class CountEpochs(Callback):
    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule) -> None:
        trainer.datamodule.epochs_seen += 1


def _trainer(**kwargs: Any) -> Trainer:
    return Trainer(accelerator="cpu", **{"max_epochs": 2, **QUIET, **kwargs})


def test_fit_with_a_datamodule_equals_fit_with_its_loaders():
    direct = Regression()
    data = regression_data(64)
    _trainer().fit(direct, train_loader(data, 8), loader(data, 8))
    by_keyword, positional = Regression(), Regression()
    _trainer().fit(by_keyword, datamodule=RegressionData())
    _trainer().fit(positional, RegressionData())  # Lightning's fit(model, dm)
    assert not torch.equal(params_of(direct)[0], params_of(Regression())[0])  # it trained
    for module in (by_keyword, positional):
        assert all(torch.equal(a, b) for a, b in zip(params_of(direct), params_of(module)))


def test_validate_test_predict_with_a_datamodule_equal_their_loaders():
    module = Regression()
    data = regression_data(64)
    trainer = _trainer()
    trainer.fit(module, train_loader(data, 8))
    assert trainer.validate(module, datamodule=RegressionData()) == trainer.validate(module, loader(data, 8))
    assert trainer.test(module, RegressionData()) == trainer.test(module, loader(data, 8))
    predicted = trainer.predict(module, datamodule=RegressionData())
    assert all(torch.equal(a, b) for a, b in zip(predicted, trainer.predict(module, loader(data, 8))))
    assert trainer.datamodule is None  # the last call had none


def test_giving_loaders_and_a_datamodule_is_an_error():
    module, dm = Regression(), RegressionData()
    data = loader(regression_data(16), 8)
    with pytest.raises(ValueError, match=r"trainer.fit\(\) got both train_dataloaders or val_dataloaders and a DataModule"):
        _trainer().fit(module, data, datamodule=dm)
    with pytest.raises(ValueError, match=r"got both train_dataloaders or val_dataloaders and a DataModule"):
        _trainer().fit(module, dm, data)  # positional DataModule plus val loaders
    with pytest.raises(ValueError, match=r"trainer.test\(\) got both dataloaders and a DataModule"):
        _trainer().test(module, data, datamodule=dm)
    with pytest.raises(ValueError, match=r"trainer.validate\(\) got two DataModules"):
        _trainer().validate(module, dm, datamodule=RegressionData())
    with pytest.raises(TypeError, match=r"trainer.predict\(datamodule=...\) takes a DataModule, got DataLoader"):
        _trainer().predict(module, datamodule=data)
    assert dm.calls == []  # refused before any hook


class OwnData(Regression):
    """A module with its own loader hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.own_calls = 0

    def train_dataloader(self) -> DataLoader:
        self.own_calls += 1
        return train_loader(regression_data(64), 8)

    def val_dataloader(self) -> DataLoader:
        self.own_calls += 1
        return loader(regression_data(64), 8)


def test_a_modules_own_loader_hooks_keep_working_and_a_datamodule_replaces_them():
    own = OwnData()
    _trainer().fit(own)
    from_dm = OwnData()
    trainer = _trainer()
    trainer.fit(from_dm, datamodule=RegressionData())
    assert (own.own_calls, from_dm.own_calls) == (2, 0)
    assert all(torch.equal(a, b) for a, b in zip(params_of(own), params_of(from_dm)))

    class NoTest(RegressionData):
        def test_dataloader(self) -> None:
            return None

    with pytest.raises(
        ValueError,
        match=r"No test data: pass dataloaders or a datamodule to trainer.test\(...\) or define NoTest.test_dataloader\(\)",
    ):
        trainer.test(from_dm, datamodule=NoTest())


class Recorder(Callback):
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def setup(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        self.calls.append(f"callback.setup:{stage}")

    def teardown(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        self.calls.append(f"callback.teardown:{stage}")

    def on_fit_start(self, trainer: Trainer, module: TrainModule) -> None:
        self.calls.append("callback.on_fit_start")


class RecordingModule(Regression):
    def __init__(self, calls: list[str]) -> None:
        super().__init__()
        self.calls = calls

    def prepare_data(self) -> None:
        self.calls.append("module.prepare_data")

    def setup(self, stage: str) -> None:
        self.calls.append(f"module.setup:{stage}")

    def teardown(self, stage: str) -> None:
        self.calls.append(f"module.teardown:{stage}")


def test_hook_order_follows_lightning():
    dm = RegressionData()
    calls = dm.calls  # one list for the DataModule, the module and the callback
    module = RecordingModule(calls)
    trainer = _trainer(max_epochs=1, callbacks=[Recorder(calls)], limit_val_batches=0)
    trainer.fit(module, datamodule=dm)
    # Lightning 2.x: datamodule.prepare_data, module.prepare_data, datamodule.setup, then the
    # callbacks' and the module's setup; at the end datamodule.teardown before theirs.
    assert calls == [
        "prepare_data",
        "module.prepare_data",
        "setup:fit",
        "callback.setup:fit",
        "module.setup:fit",
        "train_dataloader:0",
        "callback.on_fit_start",
        "teardown:fit",
        "callback.teardown:fit",
        "module.teardown:fit",
    ]
    del calls[:]
    trainer.test(module, datamodule=dm)
    assert calls == [
        "prepare_data",  # prepare_data runs for every stage, as in Lightning
        "module.prepare_data",
        "setup:test",
        "callback.setup:test",
        "module.setup:test",
        "teardown:test",
        "callback.teardown:test",
        "module.teardown:test",
    ]
    assert dm.trainer is trainer and trainer.datamodule is dm


def test_teardown_runs_after_an_exception():
    class Broken(RegressionData):
        def train_dataloader(self) -> DataLoader:
            raise RuntimeError("no data today")

    dm = Broken()
    with pytest.raises(RuntimeError, match="no data today"):
        _trainer().fit(Regression(), datamodule=dm)
    assert dm.calls == ["prepare_data", "setup:fit", "teardown:fit"]


def test_state_is_saved_and_restored_before_the_loaders_are_made(tmp_path):
    first = RegressionData(batch_size=4)
    trainer = _trainer(max_epochs=2, callbacks=[CountEpochs()])
    trainer.fit(Regression(), datamodule=first)
    trainer.save_checkpoint(tmp_path / "run.ckpt")
    saved = torch.load(tmp_path / "run.ckpt", weights_only=True)
    assert saved["datamodule"] == {"epochs_seen": 2}
    assert saved["datamodule_hyper_parameters"] == {"batch_size": 4, "n": 64, "seed": 0}

    resumed = RegressionData(batch_size=4)
    _trainer(max_epochs=3, callbacks=[CountEpochs()]).fit(Regression(), datamodule=resumed, ckpt_path=tmp_path / "run.ckpt")
    assert resumed.calls[:4] == ["prepare_data", "setup:fit", "load_state_dict:2", "train_dataloader:2"]
    assert resumed.epochs_seen == 3

    evaluated = RegressionData(batch_size=4)
    _trainer().validate(Regression(), datamodule=evaluated, ckpt_path=tmp_path / "run.ckpt")
    assert evaluated.epochs_seen == 2


def test_resuming_with_a_datamodule_equals_an_uninterrupted_run(tmp_path):
    straight = Regression()
    _trainer(max_epochs=3).fit(straight, datamodule=RegressionData())
    first = _trainer(max_epochs=2)
    first.fit(Regression(), datamodule=RegressionData())
    first.save_checkpoint(tmp_path / "two.ckpt")
    resumed = Regression()
    _trainer(max_epochs=3).fit(resumed, datamodule=RegressionData(), ckpt_path=tmp_path / "two.ckpt")
    assert all(torch.equal(a, b) for a, b in zip(params_of(straight), params_of(resumed)))


class HparamsLogger(Logger):
    def __init__(self) -> None:
        super().__init__()
        self.hparams: dict[str, Any] = {}

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        self.hparams.update(params)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass


def test_the_loggers_get_the_module_and_datamodule_hyperparameters():
    logger = HparamsLogger()
    _trainer(max_epochs=1, logger=logger).fit(Regression(lr=0.01), datamodule=RegressionData(batch_size=16))
    assert logger.hparams == {"optimizer": "sgd", "lr": 0.01, "features": 4, "seed": 0, "batch_size": 16, "n": 64}
    with pytest.raises(ValueError, match=r"both hold \['seed'\] with different values"):
        _trainer(max_epochs=1).fit(Regression(seed=0), datamodule=RegressionData(seed=1))


def test_save_hyperparameters_is_shared_and_reads_as_attributes():
    dm = RegressionData(batch_size=4, seed=2)
    assert dm.hparams == {"batch_size": 4, "n": 64, "seed": 2} and dm.hparams.batch_size == 4
    assert Regression(lr=0.5).hparams.lr == 0.5
    with pytest.raises(AttributeError, match=r"hparams has no 'lr'"):
        dm.hparams.lr
    with pytest.raises(RuntimeError, match=r"must be called from your RegressionData's __init__"):
        dm.save_hyperparameters()


def test_lightning_names_are_aliases():
    import trainer

    assert LightningModule is TrainModule and LightningDataModule is DataModule
    assert {"DataModule", "LightningModule", "LightningDataModule"} <= set(trainer.__all__)


# -- 2 ranks ---------------------------------------------------------------------------------
def _two_ranks(rank: int, world_size: int, workdir: str) -> dict[str, Any]:
    data = regression_data(64)
    direct = Regression()
    _trainer().fit(direct, train_loader(data, 8), loader(data, 8))
    dm = RegressionData(workdir=workdir)
    module = Regression()
    trainer = _trainer()
    trainer.fit(module, datamodule=dm)
    dm.workdir = os.path.join(workdir, "validate")  # empty: validate's setup must wait for its prepare_data
    [validated] = trainer.validate(module, datamodule=dm)
    return {
        "same": all(torch.equal(a, b) for a, b in zip(params_of(direct), params_of(module))),
        "params": params_of(module),
        "calls": dm.calls,
        "val_loss": validated["val_loss"],
    }


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_ranks_and_spawned_workers_prepare_once_per_node_and_train_as_the_loaders_do(tmp_path):
    ranks_dir, spawn_dir = tmp_path / "ranks", tmp_path / "spawn"
    (ranks_dir / "validate").mkdir(parents=True), spawn_dir.mkdir()
    r0, r1 = run_ranks(_two_ranks, world_size=2, args=(str(ranks_dir),), init_group=False, timeout=140)
    assert r0["same"] and r1["same"]  # DataModule == the same loaders passed directly, on 2 ranks
    assert all(torch.equal(a, b) for a, b in zip(r0["params"], r1["params"]))
    # local rank 0 prepares (once per entry point), the other rank only sets up
    assert r0["calls"][:2] == ["prepare_data", "setup:fit"] and r1["calls"][0] == "setup:fit"
    assert len(os.listdir(ranks_dir)) == len(os.listdir(ranks_dir / "validate")) + 1 == 2  # fit, validate
    assert r0["val_loss"] == r1["val_loss"]

    spawned = Regression()
    dm = RegressionData(workdir=str(spawn_dir))
    _trainer(devices=2, strategy="ddp_spawn").fit(spawned, datamodule=dm)  # pickled to the workers
    assert all(torch.equal(a, b) for a, b in zip(r0["params"], params_of(spawned)))
    assert len(os.listdir(spawn_dir)) == 1  # prepared once, by local rank 0


def test_hparams_belong_to_each_object():
    class Plain(DataModule):
        pass

    a, b = Plain(), Plain()
    a.hparams.note = "mine"
    assert (a.hparams, b.hparams, Regression().hparams.lr) == ({"note": "mine"}, {}, 0.05)
    a.hparams = {"x": 1}  # assigning a dict keeps attribute access
    assert a.hparams.x == 1
