"""End to end: a crash mid-fit leaves readable logs and an intact checkpoint; a real TensorBoard
server shows what a fit logged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import torch

from callbacks import ModelCheckpoint, TensorBoardLogger
from tests.helpers.callbacks import Recorder, Scripted, event_files, loader, scalars
from tests.helpers.distributed import free_port
from trainer import Trainer


def test_crash_in_training_step_leaves_logs_and_checkpoint(tmp_path):
    recorder = Recorder()
    ckpt = ModelCheckpoint(every_n_train_steps=2, every_n_epochs=0, save_last=True)
    trainer = Trainer(accelerator="cpu",
        max_epochs=5,
        default_root_dir=tmp_path,
        log_every_n_steps=1,
        callbacks=[recorder, ckpt],
        enable_progress_bar=False,
    )
    with pytest.raises(RuntimeError, match="failed on purpose at step 5"):
        trainer.fit(Scripted(fail_at_step=5), loader(16, 8), loader(8, 8))

    assert isinstance(recorder.exception, RuntimeError) and recorder.calls[-1] == ("on_exception", 2, 5)
    log_dir = trainer.log_dir
    assert len(event_files(tmp_path)) == 1
    logged = scalars(log_dir)
    assert [s for s, _ in logged["train_loss"]] == [0, 1, 2, 3, 4]
    assert [s for s, _ in logged["val_loss"]] == [1, 3]
    last = torch.load(os.path.join(log_dir, "checkpoints", "last.ckpt"), weights_only=True)
    assert last["global_step"] == 4
    assert sorted(os.listdir(os.path.join(log_dir, "checkpoints"))) == ["epoch=1-step=4.ckpt", "last.ckpt"]
    # the logger closed its writer: a new run can open the same directory's files for reading
    assert isinstance(trainer.logger, TensorBoardLogger) and trainer.logger._writer is None


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read().decode())


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server and anything it started (its own process group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_tensorboard_server_serves_logged_scalars(tmp_path):
    trainer = Trainer(accelerator="cpu",
        max_epochs=2,
        default_root_dir=tmp_path,
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    trainer.fit(Scripted(val_script=[3.0, 2.0]), loader(32, 8), loader(16, 8))
    run = os.path.basename(trainer.log_dir)  # "version_0", relative to --logdir

    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        os.path.join(str(tmp_path), "logs"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--load_fast",
        "false",
        "--reload_interval",
        "1",
    ]
    log = open(tmp_path / "tensorboard.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}/data/plugin/scalars"
    try:
        deadline = time.monotonic() + 120
        tags: dict = {}
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"tensorboard exited: {(tmp_path / 'tensorboard.log').read_text()}"
            try:
                tags = _get_json(f"{base}/tags")
                if {"train_loss", "val_metric"} <= set(tags.get(run, {})):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        assert {"train_loss", "val_loss", "val_metric"} <= set(tags.get(run, {})), tags

        query = urllib.parse.urlencode({"run": run, "tag": "val_metric"})
        points = _get_json(f"{base}/scalars?{query}")  # [[wall_time, step, value], ...]
        assert [(step, value) for _, step, value in points] == [(3, 3.0), (7, 2.0)]
        query = urllib.parse.urlencode({"run": run, "tag": "train_loss"})
        assert [step for _, step, _ in _get_json(f"{base}/scalars?{query}")] == [1, 3, 5, 7]
    finally:
        _stop(proc)
        log.close()
