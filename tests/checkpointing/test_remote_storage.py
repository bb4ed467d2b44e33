"""Run directories, checkpoints and logs on remote storage (fsspec URLs), against a real S3 server.

The S3 tests start moto's standalone S3 server on 127.0.0.1 once for the module and stop it after.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest
import torch

from callbacks import Callback, CSVLogger, ModelCheckpoint
from tests.helpers.distributed import free_port
from tests.helpers.models import Regression
from tests.helpers.resume_models import Noisy, make_loader
from trainer import Trainer, seed_everything
from trainer.contracts import storage

fsspec = pytest.importorskip("fsspec", reason="remote storage needs the 'remote' extra (fsspec)")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    # every test runs in an empty directory, so a stray local "s3:" directory would show
    monkeypatch.chdir(tmp_path)


def _quiet(**kw: Any) -> dict[str, Any]:
    return {"enable_progress_bar": False, **kw}


# -- bad URLs ---------------------------------------------------------------------------------
def test_unknown_protocol_is_an_error_not_a_local_directory(tmp_path):
    with pytest.raises(ValueError, match=r"default_root_dir='nosuch://bucket/run': unknown storage protocol 'nosuch'"):
        Trainer(default_root_dir="nosuch://bucket/run", accelerator="cpu")
    with pytest.raises(ValueError, match=r"dirpath='nosuch://b/ckpts': unknown storage protocol"):
        ModelCheckpoint(dirpath="nosuch://b/ckpts")
    with pytest.raises(ValueError, match=r"save_dir='nosuch://b/logs': unknown storage protocol"):
        CSVLogger(save_dir="nosuch://b/logs")
    trainer = Trainer(accelerator="cpu", **_quiet(max_epochs=1, logger=False, enable_checkpointing=False))
    with pytest.raises(ValueError, match=r"ckpt_path='nosuch://b/x.ckpt': unknown storage protocol"):
        trainer.fit(Regression(), make_loader(), ckpt_path="nosuch://b/x.ckpt")
    assert os.listdir(tmp_path) == []


def test_file_url_is_the_local_path(tmp_path):
    trainer = Trainer(accelerator="cpu", **_quiet(max_epochs=1, logger=False), default_root_dir=f"file://{tmp_path}/run")
    assert trainer.default_root_dir == f"{tmp_path}/run"
    trainer.fit(Regression(), make_loader())
    assert sorted(os.listdir(tmp_path / "run" / "checkpoints")) == ["epoch=0-step=24.ckpt", "last.ckpt"]
    assert "file:" not in os.listdir(tmp_path)


def test_memory_url_keeps_top_k_and_last_and_loads(tmp_path):
    root = "memory://test_memory_url/run"
    ckpt = ModelCheckpoint(monitor="train_loss", save_top_k=2, save_last=True, every_n_epochs=1)
    trainer = Trainer(accelerator="cpu", **_quiet(max_epochs=4, default_root_dir=root, callbacks=[ckpt]), logger=CSVLogger())
    trainer.fit(Regression(), make_loader())
    ckpt_dir = f"{root}/logs/version_0/checkpoints"
    names = sorted(storage.listdir(ckpt_dir))
    assert len(names) == 3 and "last.ckpt" in names, names  # 2 best + last: the others were deleted
    assert sorted(storage.join(ckpt_dir, n) for n in names if n != "last.ckpt") == sorted(ckpt.best_k_models)
    assert storage.exists(f"{root}/logs/version_0/metrics.csv")
    # validate from the best checkpoint there
    Trainer(accelerator="cpu", **_quiet(logger=False)).validate(Regression(), make_loader(), ckpt_path=ckpt.best_model_path)
    assert os.listdir(tmp_path) == []


# -- S3 ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3_endpoint():
    pytest.importorskip("s3fs", reason="s3:// needs the 'remote' extra (s3fs)")
    pytest.importorskip("moto.server", reason="the S3 tests need moto[server] (the 'dev' extra)")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's S3 server did not start on {endpoint}") from None
                time.sleep(0.2)
        env = {
            "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        import fsspec as _fsspec

        _fsspec.filesystem("s3").mkdir("lockstep-test")
        yield endpoint
    finally:
        for key, value in locals().get("saved", {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.terminate()
        server.wait(timeout=30)


class _CrashAt(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise KeyboardInterrupt("simulated crash")


def test_s3_run_resumes_from_last_bitwise(s3_endpoint, tmp_path, request):
    root = f"s3://lockstep-test/{request.node.name}"
    kw = _quiet(max_epochs=2, accumulate_grad_batches=2)

    seed_everything(0)
    straight = Noisy()
    Trainer(accelerator="cpu", **kw, logger=False, enable_checkpointing=False).fit(straight, make_loader())

    def checkpoints() -> ModelCheckpoint:  # the latest only (top-1 deletes the one before) and last
        return ModelCheckpoint(every_n_train_steps=4, save_last=True)

    seed_everything(0)
    first = Noisy()
    with pytest.raises(KeyboardInterrupt):
        Trainer(accelerator="cpu", **kw, default_root_dir=root, callbacks=[checkpoints(), _CrashAt(18)]).fit(first, make_loader())
    ckpt_dir = f"{root}/logs/version_0/checkpoints"
    assert sorted(storage.listdir(ckpt_dir)) == ["epoch=1-step=16.ckpt", "last.ckpt"]

    seed_everything(99)  # nothing but the checkpoint decides what happens next
    resumed = Noisy()
    trainer = Trainer(accelerator="cpu", **kw, default_root_dir=root, callbacks=[checkpoints()])
    trainer.fit(resumed, make_loader(), ckpt_path="last")
    assert trainer.global_step == 24
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
    # the resumed run logged to the next version, TensorBoard files included, all in the bucket
    assert storage.isfile(f"{root}/logs/version_1/checkpoints/last.ckpt")
    assert any(n.startswith("events.out.tfevents") for n in storage.listdir(f"{root}/logs/version_1"))
    assert os.listdir(tmp_path) == []
    trainer.loggers[0].experiment.close()  # its last upload, while the server is up


def test_s3_checkpoint_write_is_one_complete_object(s3_endpoint):
    # a reader sees the old object or the whole new one: the upload is a single PUT, and no
    # temporary object is left beside it
    path = "s3://lockstep-test/atomic/model.ckpt"
    from trainer.checkpoint_io.file_format import atomic_save, load_checkpoint

    for value in (1.0, 2.0):
        atomic_save({"state_dict": {"w": torch.full((1000,), value)}}, path)
        assert storage.listdir("s3://lockstep-test/atomic") == ["model.ckpt"]
        assert torch.equal(load_checkpoint(path)["state_dict"]["w"], torch.full((1000,), value))
