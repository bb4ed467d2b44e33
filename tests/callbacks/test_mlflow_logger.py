"""`MLFlowLogger` against a real `mlflow server` (sqlite backend) started on 127.0.0.1 once for the test session."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from callbacks import Callback, ModelCheckpoint
from tests.helpers.distributed import free_port, run_ranks
from tests.helpers.models import Regression, loader, regression_data
from tests.helpers.session_cache import shared_service
from trainer import Trainer

pytest.importorskip("mlflow", reason="MLFlowLogger needs the 'mlflow' extra")

from callbacks.mlflow_logger import MLFlowLogger  # noqa: E402
from mlflow import MlflowClient  # noqa: E402


def _start_server(root) -> tuple[subprocess.Popen, str]:
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MLFLOW_HOME": str(root)}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{root}/mlflow.db", "--artifacts-destination", str(root / "artifacts"),
         "--workers", "1"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=open(root / "server.log", "wb"), start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=1)
            return server, uri
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                os.killpg(server.pid, signal.SIGKILL)
                log = (root / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"mlflow server did not start on {uri}:\n{log}") from None
            time.sleep(0.3)


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory):
    """One server for the session (each test logs to experiments of its own); stopped at its end."""
    return shared_service(tmp_path_factory, "tests/callbacks/test_mlflow_logger.py::tracking_uri",
                          lambda: _start_server(tmp_path_factory.mktemp("mlflow")))


def _trainer(tmp_path, logger, **kw):
    return Trainer(
        accelerator="cpu", max_epochs=2, logger=logger, enable_progress_bar=False, default_root_dir=tmp_path,
        log_every_n_steps=2, **kw,
    )


def _data():
    return loader(regression_data(32), batch_size=8)


def test_params_and_metric_history_reach_the_server(tracking_uri, tmp_path):
    logger = MLFlowLogger(experiment_name="lockstep-params", run_name="first", tracking_uri=tracking_uri,
                          tags={"team": "core"}, log_model=True)
    model = Regression(lr=0.05)
    trainer = _trainer(tmp_path, logger, callbacks=[ModelCheckpoint(save_last=True)])
    trainer.fit(model, _data(), _data())

    client = MlflowClient(tracking_uri)
    run = client.get_run(logger.run_id)
    assert run.info.run_name == "first" and run.info.status == "FINISHED"
    assert run.data.tags["team"] == "core"
    assert run.data.params["lr"] == "0.05" and run.data.params["optimizer"] == "sgd"
    history = client.get_metric_history(logger.run_id, "train_loss")
    assert [m.step for m in history] == [1, 3, 5, 7]
    logged = trainer.logged_metrics  # the last values the Trainer gave its loggers
    assert history[-1].value == pytest.approx(float(logged["train_loss"]))
    val = client.get_metric_history(logger.run_id, "val_loss")
    assert [m.step for m in val] == [3, 7]
    artifacts = {a.path for a in client.list_artifacts(logger.run_id, "checkpoints")}
    assert artifacts == {"checkpoints/epoch=1-step=8.ckpt", "checkpoints/last.ckpt"}
    assert "run_summary.txt" in {a.path for a in client.list_artifacts(logger.run_id)}


class _CrashAfterEpoch(Callback):
    def on_train_epoch_end(self, trainer, module):
        raise KeyboardInterrupt("simulated crash")


def test_a_resumed_fit_appends_to_the_same_run(tracking_uri, tmp_path):
    first = MLFlowLogger(experiment_name="lockstep-resume", tracking_uri=tracking_uri)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last=True, every_n_train_steps=4)  # epoch 0's last step
    with pytest.raises(KeyboardInterrupt):
        _trainer(tmp_path, first, callbacks=[ckpt, _CrashAfterEpoch()]).fit(Regression(), _data())
    client = MlflowClient(tracking_uri)
    assert client.get_run(first.run_id).info.status == "FAILED"

    second = MLFlowLogger(experiment_name="lockstep-resume", tracking_uri=tracking_uri)
    trainer = _trainer(tmp_path, second, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last=True)])
    trainer.fit(Regression(), _data(), ckpt_path="last")
    assert second.run_id == first.run_id
    runs = client.search_runs([client.get_experiment_by_name("lockstep-resume").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(first.run_id, "train_loss")]
    assert steps == [1, 3, 5, 7]  # epoch 0 before the crash, epoch 1 after the resume


def _two_ranks(rank, world_size, tmp, uri):
    logger = MLFlowLogger(experiment_name="lockstep-ddp", tracking_uri=uri)
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=logger, enable_progress_bar=False,
                      enable_checkpointing=False, default_root_dir=tmp, log_every_n_steps=1)
    trainer.fit(Regression(), loader(regression_data(32), batch_size=4))
    return logger._run_id


@pytest.mark.distributed
def test_two_ranks_log_one_run_from_rank_zero(tracking_uri, tmp_path):
    ids = run_ranks(_two_ranks, world_size=2, args=(str(tmp_path), tracking_uri), init_group=False)
    assert ids[0] is not None and ids[1] is None  # rank 1 never created a run
    client = MlflowClient(tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("lockstep-ddp").experiment_id])
    assert len(runs) == 1
    assert [m.step for m in client.get_metric_history(ids[0], "train_loss")] == [0, 1, 2, 3]
    assert torch.isfinite(torch.tensor([m.value for m in client.get_metric_history(ids[0], "train_loss")])).all()


class _StallingProxy:
    """A real HTTP proxy on 127.0.0.1 in front of the mlflow server: it answers ``/health`` always,
    forwards the first ``forward`` other requests, and then holds every request unanswered (a
    server that hangs mid-run) until `stop`."""

    def __init__(self, upstream: str, forward: int) -> None:
        import http.server
        import threading
        import urllib.error

        proxy = self
        self.forwarded, self.held = 0, 0
        self._release = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _relay(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not self.path.startswith("/health"):
                    if proxy.forwarded >= forward:
                        proxy.held += 1
                        proxy._release.wait(60)  # no answer: the client's read times out
                        return
                    proxy.forwarded += 1
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
                request = urllib.request.Request(upstream + self.path, data=body or None, method=self.command,
                                                 headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        status, payload, kind = answer.status, answer.read(), answer.headers.get("Content-Type")
                except urllib.error.HTTPError as err:
                    status, payload, kind = err.code, err.read(), err.headers.get("Content-Type")
                self.send_response(status)
                self.send_header("Content-Type", kind or "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _relay

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.uri = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@pytest.mark.timeout(120)
def test_warn_trains_on_when_the_server_hangs_mid_run(tracking_uri, tmp_path, monkeypatch):
    import json

    # what MLFlowLogger(timeout=2) sets, set here so that earlier tests' values do not count
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    proxy = _StallingProxy(tracking_uri, forward=4)  # experiment lookup/creation and the run, then a hang
    try:
        logger = MLFlowLogger(experiment_name="lockstep-stall", tracking_uri=proxy.uri, timeout=2,
                              on_unreachable="warn")
        trainer = Trainer(accelerator="cpu", max_epochs=2, logger=logger, enable_progress_bar=False,
                          enable_checkpointing=False, default_root_dir=tmp_path, log_every_n_steps=1)
        model = Regression()
        with pytest.warns(UserWarning, match="MLFlowLogger: the tracking server .* failed"):
            trainer.fit(model, _data())
    finally:
        proxy.stop()
    assert trainer.global_step == 8 and proxy.held >= 1
    unsent = tmp_path / "mlflow_unsent" / f"{logger.run_id}.jsonl"
    assert logger.unsent_path == str(unsent)
    records = [json.loads(line) for line in unsent.read_text().splitlines()]
    kept = {r["step"]: r["value"] for r in records if r.get("metric") == "train_loss"}
    # every step's loss reached the server or the file, and the last is the Trainer's own value
    sent = {m.step: m.value for m in MlflowClient(tracking_uri).get_metric_history(logger.run_id, "train_loss")}
    assert sorted({**sent, **kept}) == list(range(8)) and 7 in kept
    assert kept[7] == pytest.approx(float(trainer.logged_metrics["train_loss"]))


# -- a run id names a file under the root: one path component only ---------------------------
@pytest.mark.parametrize("run_id", ["../x", "/abs/x", "..", "a/b"])
def test_a_run_id_that_is_a_path_is_refused(run_id):
    with pytest.raises(ValueError, match=r"MLFlowLogger\(run_id\) must be None or one path component .* got "
                       + repr(run_id).replace(".", r"\.")):
        MLFlowLogger(run_id=run_id)


@pytest.mark.parametrize("argument", ["run_id", "tracking_uri", "run_name", "artifact_location"])
def test_a_run_id_or_uri_that_is_no_str_is_refused(argument):
    with pytest.raises(TypeError, match=rf"MLFlowLogger\({argument}\) must be None or .*got 5"):
        MLFlowLogger(**{argument: 5})


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:MLFlowLogger")
@pytest.mark.parametrize("run_id", ["../../x", "{tmp_path}/abs/x"])
def test_a_checkpoint_naming_a_run_id_outside_the_root_is_refused(tmp_path, run_id):
    """A crafted logger state: the resumed run would append its unsent records to ``<run_id>.jsonl``."""
    run_id = run_id.format(tmp_path=tmp_path)  # an absolute path, outside the root
    root = tmp_path / "root"
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: every record goes to the unsent file

    def trainer(epochs):
        logger = MLFlowLogger(tracking_uri=dead, timeout=1, on_unreachable="warn")
        return Trainer(accelerator="cpu", max_epochs=epochs, logger=logger, enable_progress_bar=False, default_root_dir=root,
                       log_every_n_steps=1, callbacks=[ModelCheckpoint(dirpath=root / "ckpts", save_last=True)])

    first = trainer(1)
    first.fit(Regression(), _data())
    assert (root / "mlflow_unsent" / "no-run.jsonl").is_file()
    checkpoint = torch.load(root / "ckpts" / "last.ckpt", weights_only=True)
    [state] = [s for s in checkpoint["callbacks"].values() if "experiment_name" in s]
    state["run_id"] = run_id
    torch.save(checkpoint, root / "crafted.ckpt")
    resumed = trainer(2)
    with pytest.raises(ValueError, match=r"MLFlowLogger: the checkpoint's state entry 'run_id' must be None or one "
                       r"path component .*got " + repr(run_id).replace(".", r"\.")):
        resumed.fit(Regression(), _data(), ckpt_path=root / "crafted.ckpt")
    assert sorted(os.listdir(tmp_path)) == ["root"]
    assert resumed.global_step == 0
