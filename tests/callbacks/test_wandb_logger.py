"""`WandbLogger` in offline mode: the run directory holds the metrics and config, no network is used.

W&B's server address and every proxy point at a listener on 127.0.0.1 that counts connections:
an offline run must make none.
"""
from __future__ import annotations

import glob
import json
import os
import socket
import threading

import pytest

from callbacks import Callback, ModelCheckpoint
from tests.helpers.models import Regression, loader, regression_data
from trainer import Trainer

pytest.importorskip("wandb", reason="WandbLogger needs the 'wandb' extra")

from callbacks.wandb_logger import WandbLogger  # noqa: E402


class _Listener:
    """Accepts and counts TCP connections on 127.0.0.1 (stands where W&B's server would be)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


@pytest.fixture
def offline_env(tmp_path, monkeypatch):
    listener = _Listener()
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(key, listener.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", listener.url)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)  # never checked offline; keeps wandb from prompting
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield listener
    listener.sock.close()


def _records(run_dir: str, kind: str) -> list[dict]:
    """The ``history`` rows or ``config`` updates in the run's ``.wandb`` transaction log (where an
    offline run keeps them), decoded by W&B's own reader."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for data in _wandb_log_entries(glob.glob(os.path.join(run_dir, "*.wandb"))[0]):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") != kind:
            continue
        items = record.history.item if kind == "history" else record.config.update
        rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items})
    return rows


def _wandb_log_entries(path: str) -> list[bytes]:
    """The entries of a ``.wandb`` file: a 7-byte header (``:W&B``, magic, version), then 32 KiB
    blocks of chunks, each ``crc32 (4) | length (2) | type (1: whole, 2: first, 3: middle, 4: last)``."""
    data = open(path, "rb").read()
    assert data[:4] == b":W&B", data[:7]
    entries, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if length == 0 and kind == 0:
            break
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            entries.append(pending)
            pending = b""
    return entries


class _CrashAfterEpoch(Callback):
    def on_train_epoch_end(self, trainer, module):
        raise KeyboardInterrupt("simulated crash")


def _trainer(tmp_path, logger, callbacks):
    return Trainer(accelerator="cpu", max_epochs=2, logger=logger, enable_progress_bar=False,
                   default_root_dir=tmp_path, log_every_n_steps=2, callbacks=callbacks)


@pytest.mark.launches
def test_offline_run_holds_metrics_and_config_and_resume_keeps_the_id(offline_env, tmp_path):
    data = loader(regression_data(32), batch_size=8)
    first = WandbLogger(project="lockstep-test", name="first", offline=True)
    ckpts = tmp_path / "ckpts"
    with pytest.raises(KeyboardInterrupt):
        _trainer(tmp_path, first, [ModelCheckpoint(dirpath=ckpts, save_last=True, every_n_train_steps=4),
                                   _CrashAfterEpoch()]).fit(Regression(lr=0.05), data, data)
    run_id = first.id

    second = WandbLogger(project="lockstep-test", offline=True)
    trainer = _trainer(tmp_path, second, [ModelCheckpoint(dirpath=ckpts, save_last=True)])
    trainer.fit(Regression(lr=0.05), data, data, ckpt_path="last")
    assert second.id == run_id
    import wandb

    wandb.teardown()  # W&B's service process writes the run files; stopping it completes them

    runs = sorted(glob.glob(str(tmp_path / "wandb" / f"offline-run-*-{run_id}")))
    assert len(runs) == 2  # the crashed part and the resumed part: one run id, `wandb sync` joins them
    # the run's config, as `wandb sync` uploads it: the updates of both parts
    config = {k: v for part in runs for update in _records(part, "config") for k, v in update.items()}
    assert config["lr"] == 0.05 and config["optimizer"] == "sgd"
    steps = [row["_step"] for part in runs for row in _records(part, "history") if "train_loss" in row]
    assert steps == [1, 3, 5, 7]
    last = [row for row in _records(runs[1], "history") if "train_loss" in row][-1]
    assert last["train_loss"] == pytest.approx(float(trainer.logged_metrics["train_loss"]))
    assert offline_env.connections == 0


@pytest.mark.launches
def test_lightning_arguments_version_dir_and_prefix(offline_env, tmp_path):
    # Lightning's names: `version` is the run id, `dir` the files' directory, `prefix` + "-" + key
    logger = WandbLogger(dir=tmp_path / "d", version="lockstep0001", prefix="p", offline=True)
    logger.log_metrics({"a": 1.0, "g": {"x": 2.0}}, step=3)
    logger.finalize("success")
    import wandb

    wandb.teardown()
    runs = glob.glob(str(tmp_path / "d" / "wandb" / "offline-run-*-lockstep0001"))
    assert len(runs) == 1
    rows = [row for row in _records(runs[0], "history") if "p-a" in row]
    assert [(r["_step"], r["p-a"], r["p-g/x"]) for r in rows] == [(3, 1.0, 2.0)]
    assert offline_env.connections == 0


@pytest.mark.parametrize("argument", ["id", "version"])
def test_a_run_id_that_is_a_path_is_refused(argument):
    with pytest.raises(ValueError, match=rf"WandbLogger\({argument}\) must be None or one path component .*got '\.\./x'"):
        WandbLogger(**{argument: "../x"})


def test_a_checkpoint_naming_a_run_id_that_is_a_path_is_refused():
    logger = WandbLogger(project="p")
    with pytest.raises(ValueError, match=r"WandbLogger: the checkpoint's state entry 'id' must be None or one path "
                       r"component .*got '/abs/x'"):
        logger.load_state_dict({"project": "p", "id": "/abs/x"})
