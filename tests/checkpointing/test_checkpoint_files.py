"""Checkpoint files at the edges: what is not a checkpoint, hyperparameters that weights-only
loading refuses, directories that cannot be written, Ctrl-C during a write, file modes."""
from __future__ import annotations

import enum
import os
import pathlib
import pickle
import stat
import zipfile

import numpy as np
import pytest
import torch

from callbacks import ModelCheckpoint
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer
from trainer.checkpoint_io.file_format import CheckpointError, atomic_save, load_checkpoint


def _fit_and_save(path, module=None):
    trainer = Trainer(max_epochs=1, accelerator="cpu", **QUIET)
    trainer.fit(module or Regression(), loader(regression_data(8), 4))
    trainer.save_checkpoint(path)


def _resume(path, module=None, **kwargs):
    trainer = Trainer(max_epochs=2, accelerator="cpu", **QUIET)
    trainer.fit(module or Regression(), loader(regression_data(8), 4), ckpt_path=path, **kwargs)
    return trainer


# -- what is not a checkpoint ---------------------------------------------------------------
@pytest.mark.parametrize("weights_only", [True, False])
def test_random_bytes_and_other_zips_are_not_lockstep_checkpoints(tmp_path, weights_only):
    (tmp_path / "random.ckpt").write_bytes(np.random.default_rng(0).bytes(4096))
    with zipfile.ZipFile(tmp_path / "archive.ckpt", "w") as archive:
        archive.writestr("notes.txt", "not a checkpoint")
    for name in ("random.ckpt", "archive.ckpt"):
        with pytest.raises(CheckpointError, match=rf"{name}' is not a Lockstep checkpoint: it is not a file written by torch.save"):
            _resume(tmp_path / name, weights_only=weights_only)


def test_a_directory_as_ckpt_path_says_so(tmp_path):
    with pytest.raises(CheckpointError, match=rf"Checkpoint path '{tmp_path}' is a directory, not a checkpoint file"):
        _resume(tmp_path)


def test_checkpoint_of_another_optimizer_class_loads_nothing(tmp_path):
    _fit_and_save(tmp_path / "sgd.ckpt")  # Regression's default optimizer is SGD
    module = Regression(optimizer="adamw")
    before = [p.detach().clone() for p in module.parameters()]
    with pytest.raises(CheckpointError, match=r"does not fit this run: optimizer 0 is SGD in the checkpoint, AdamW in this run. Nothing was loaded"):
        _resume(tmp_path / "sgd.ckpt", module)
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_checkpoint_without_optimizer_classes_is_judged_by_its_group_keys(tmp_path):
    _fit_and_save(tmp_path / "sgd.ckpt")
    ckpt = torch.load(tmp_path / "sgd.ckpt", weights_only=True)
    assert ckpt.pop("optimizer_classes") == ["SGD"]
    torch.save(ckpt, tmp_path / "old.ckpt")  # as written before the classes were recorded
    with pytest.raises(CheckpointError, match=r"optimizer 0's saved parameter groups have keys \['dampening', 'momentum', 'nesterov'\] that AdamW does not use"):
        _resume(tmp_path / "old.ckpt", Regression(optimizer="adamw"))
    assert _resume(tmp_path / "old.ckpt").global_step == 4  # the same class still resumes


# -- hyperparameters that weights_only=True cannot load --------------------------------------
class Color(enum.Enum):
    RED = 1


class _Config:
    def __repr__(self):
        return "_Config()"


class WithOddHparams(Regression):
    def __init__(self, root=pathlib.Path("/data/run"), layer=torch.nn.Linear, act=torch.nn.functional.relu, color=Color.RED,
                 scale=np.float64(0.5), count=np.int64(3), tags=frozenset({"b", "a"}), config=_Config(),
                 nested=None, optimizer="sgd", lr=0.05):
        super().__init__()
        self.save_hyperparameters()


def test_own_checkpoints_load_with_any_hyperparameters(tmp_path):
    module = WithOddHparams(nested={"dir": pathlib.Path("x"), "dims": (2, [pathlib.Path("y")])})
    trainer = Trainer(max_epochs=1, accelerator="cpu", default_root_dir=tmp_path, logger=False, enable_progress_bar=False)
    trainer.fit(module, loader(regression_data(8), 4))
    path = trainer.checkpoint_callback.best_model_path
    assert load_checkpoint(path)["hyper_parameters"] == {
        "root": "/data/run", "layer": "torch.nn.modules.linear.Linear", "act": "torch.nn.functional.relu",
        "color": "Color.RED", "scale": 0.5, "count": 3, "tags": ["a", "b"], "config": "_Config()",
        "nested": {"dir": "x", "dims": (2, ["y"])}, "optimizer": "sgd", "lr": 0.05,
        "features": 4, "seed": 0,  # the base class's own save_hyperparameters() adds its arguments, as in Lightning
    }
    assert module.hparams["root"] == pathlib.Path("/data/run") and module.hparams["layer"] is torch.nn.Linear
    assert _resume(path, WithOddHparams()).global_step == 4  # weights_only=True, the default


def test_refusal_keeps_torchs_explanation_without_escape_codes(tmp_path):
    _fit_and_save(tmp_path / "c.ckpt")
    ckpt = torch.load(tmp_path / "c.ckpt", weights_only=True)
    ckpt["extra"] = pathlib.PurePosixPath("/x")  # what a user's on_save_checkpoint may add
    torch.save(ckpt, tmp_path / "custom.ckpt")
    with pytest.raises(CheckpointError) as info:
        _resume(tmp_path / "custom.ckpt")
    message = str(info.value)
    assert "pathlib.PurePosixPath" in message and "weights_only=False" in message
    if hasattr(torch.serialization, "add_safe_globals"):  # torch >= 2.4 explains how to allow it
        assert "Unsupported global: GLOBAL pathlib.PurePosixPath" in message and "add_safe_globals" in message
    assert "\x1b" not in message and "\n" not in message


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_evaluation_accepts_weights_only(tmp_path, stage):
    _fit_and_save(tmp_path / "c.ckpt")
    ckpt = torch.load(tmp_path / "c.ckpt", weights_only=True)
    ckpt["extra"] = pickle.loads(pickle.dumps(range(3)))  # not a weights-only type
    torch.save(ckpt, tmp_path / "custom.ckpt")
    trainer = Trainer(accelerator="cpu", **QUIET)
    run = getattr(trainer, stage)
    data = loader(regression_data(8), 4)
    with pytest.raises(CheckpointError, match="Refused to load"):
        run(Regression(seed=5), data, ckpt_path=tmp_path / "custom.ckpt")
    with pytest.raises(TypeError, match="weights_only must be a bool"):
        run(Regression(seed=5), data, ckpt_path=tmp_path / "custom.ckpt", weights_only="no")
    module = Regression(seed=5)
    assert run(module, data, ckpt_path=tmp_path / "custom.ckpt", weights_only=False)
    assert all(torch.equal(a, b) for a, b in zip(module.state_dict().values(), ckpt["state_dict"].values()))


# -- where checkpoints go --------------------------------------------------------------------
class _CountSteps(Regression):
    steps = 0

    def training_step(self, batch, batch_idx):
        self.steps += 1
        return super().training_step(batch, batch_idx)


def test_unwritable_default_root_dir_fails_at_fit_start(tmp_path):
    (tmp_path / "file").write_text("a file where the run's directory should go")
    root = tmp_path / "file" / "run"
    module = _CountSteps()
    trainer = Trainer(max_epochs=1, accelerator="cpu", default_root_dir=root, logger=False, enable_progress_bar=False)
    with pytest.raises(OSError, match=rf"ModelCheckpoint cannot write checkpoints to '{root}/checkpoints': '{tmp_path}/file' is not a directory. Pass a writable default_root_dir"):
        trainer.fit(module, loader(regression_data(8), 4))
    assert module.steps == 0


def test_writable_checkpoint_directory_is_not_created_before_the_first_save(tmp_path):
    trainer = Trainer(max_epochs=1, accelerator="cpu", callbacks=[ModelCheckpoint(dirpath=tmp_path / "a" / "b", every_n_epochs=0)],
                      logger=False, enable_progress_bar=False)
    trainer.fit(Regression(), loader(regression_data(8), 4))
    assert os.listdir(tmp_path) == []  # the write test leaves nothing behind


class _InterruptedWriter:
    """A file that gets Ctrl-C after ``limit`` bytes, as torch's zip writer writes through it."""

    def __init__(self, f, limit):
        self.f, self.limit, self.written = f, limit, 0

    def write(self, data):
        self.written += len(data)
        if self.written > self.limit:
            raise KeyboardInterrupt
        return self.f.write(data)

    def flush(self):
        self.f.flush()


def test_ctrl_c_during_a_write_is_an_interrupt_and_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    atomic_save({"state_dict": {"w": torch.zeros(4)}}, path)
    old = path.read_bytes()
    real_save = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f: real_save(obj, _InterruptedWriter(f, 4096)))
    # without the fix torch's writer turns it into "RuntimeError: enforce fail at inline_container.cc"
    with pytest.raises(KeyboardInterrupt):
        atomic_save({"state_dict": {"w": torch.ones(100_000)}}, path)
    assert path.read_bytes() == old
    assert os.listdir(tmp_path) == ["last.ckpt"]  # the temporary file is gone


def test_the_bytes_then_the_rename_then_the_directory_reach_the_disk(tmp_path, monkeypatch):
    """After a power cut the path must be the old file or the whole new one: the temporary file's
    complete bytes are fsync'ed before the rename, and the directory (the rename) after it. The
    real calls are made; the test only notes them."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        events.append(("fsync", st.st_ino, st.st_size, stat.S_ISDIR(st.st_mode)))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", pathlib.Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = tmp_path / "ckpts" / "last.ckpt"
    atomic_save({"state_dict": {"w": torch.ones(1000)}}, path)
    final = path.stat()
    assert events == [
        ("fsync", final.st_ino, final.st_size, False),
        ("replace", path),
        ("fsync", path.parent.stat().st_ino, path.parent.stat().st_size, True),
    ]


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=["umask022", "umask077"])
def test_checkpoint_files_respect_the_umask(tmp_path, umask):
    previous = os.umask(umask)
    try:
        _fit_and_save(tmp_path / "c.ckpt")
    finally:
        os.umask(previous)
    assert os.stat(tmp_path / "c.ckpt").st_mode & 0o777 == 0o666 & ~umask
