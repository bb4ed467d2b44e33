"""External services that stall or are gone end the run within their configured timeout, naming
them (or warn and train on, when configured): remote storage behind a server that accepts
connections and never answers, an MLflow tracking server on a closed port or silent, W&B on a
closed port. Every server here is a real socket on 127.0.0.1, closed by the fixture."""
from __future__ import annotations

import socket
import threading
import warnings

import pytest

from callbacks import ModelCheckpoint
from tests.helpers.distributed import free_port
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer

TIMEOUT_S = 2


@pytest.fixture
def silent_server():
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.1)  # the accept loop sees the stop flag (close does not wake accept)
    held, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
        for conn in held:
            conn.close()


def _fit(**kw):
    trainer = Trainer(max_steps=2, accelerator="cpu", **{**QUIET, **kw})
    trainer.fit(Regression(), loader(regression_data(), 8))
    return trainer


@pytest.mark.timeout(4 * TIMEOUT_S + 20)  # without the bound: > 600 s in the write probe
def test_remote_storage_that_never_answers_fails_the_fit_naming_the_url(silent_server, monkeypatch):
    s3fs = pytest.importorskip("s3fs", reason="needs the 'remote' extra")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{silent_server}")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(var, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("LOCKSTEP_STORAGE_TIMEOUT", str(TIMEOUT_S))
    s3fs.S3FileSystem.clear_instance_cache()  # a cached client would talk to another endpoint
    url = "s3://lockstep-silent/run/checkpoints"
    with pytest.raises(OSError, match=rf"cannot write checkpoints to '{url}': no answer from '{url}' within {TIMEOUT_S} s"):
        _fit(enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath=url)])
    s3fs.S3FileSystem.clear_instance_cache()


def test_a_storage_timeout_that_is_not_a_number_is_refused(monkeypatch):
    from trainer.contracts import storage

    monkeypatch.setenv("LOCKSTEP_STORAGE_TIMEOUT", "soon")
    with pytest.raises(ValueError, match=r"LOCKSTEP_STORAGE_TIMEOUT='soon': expected a positive number of seconds"):
        storage.timeout_s()


@pytest.mark.timeout(4 * TIMEOUT_S + 20)  # without the bound: > 150 s of MLflow's retries
def test_mlflow_on_a_closed_port_fails_the_fit_naming_the_uri(tmp_path):
    pytest.importorskip("mlflow", reason="needs the 'mlflow' extra")
    from callbacks.mlflow_logger import MLFlowLogger
    from callbacks.service_timeout import ServiceUnreachableError

    uri = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServiceUnreachableError, match=rf"MLFlowLogger: the tracking server {uri} did not answer within {TIMEOUT_S} s .*on_unreachable='warn'"):
        _fit(logger=MLFlowLogger(tracking_uri=uri, timeout=TIMEOUT_S), default_root_dir=tmp_path)


@pytest.mark.timeout(4 * TIMEOUT_S + 20)
def test_mlflow_that_never_answers_can_be_a_warning_and_the_run_trains_on(silent_server, tmp_path):
    pytest.importorskip("mlflow", reason="needs the 'mlflow' extra")
    from callbacks.mlflow_logger import MLFlowLogger

    uri = f"http://{silent_server}"
    logger = MLFlowLogger(tracking_uri=uri, timeout=TIMEOUT_S, on_unreachable="warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = _fit(logger=logger, default_root_dir=tmp_path)
    said = [str(w.message) for w in caught if "MLFlowLogger" in str(w.message)]
    assert len(said) == 1 and f"{uri} did not answer within {TIMEOUT_S} s" in said[0] and "timed out" in said[0]
    assert trainer.global_step == 2


@pytest.mark.timeout(120)  # W&B starts its service process first
@pytest.mark.launches
def test_wandb_on_a_closed_port_warns_and_logs_offline(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb", reason="needs the 'wandb' extra")
    from callbacks.wandb_logger import WandbLogger

    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    logger = WandbLogger(save_dir=tmp_path, timeout=5, on_unreachable="warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer = _fit(logger=logger, default_root_dir=tmp_path)
        said = [str(w.message) for w in caught if "WandbLogger" in str(w.message)]
        assert len(said) == 1 and "the W&B server did not answer within 5 s" in said[0] and "offline" in said[0]
        assert trainer.global_step == 2 and (tmp_path / "wandb").is_dir()
        assert any(p.name.startswith("offline-run-") for p in (tmp_path / "wandb").iterdir())
    finally:
        wandb.teardown()
