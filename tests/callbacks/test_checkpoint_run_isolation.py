"""Runs never share checkpoint files: a second run in the same dirpath versions its files or
refuses to start, and a concurrent run is refused by the lock file naming the one that holds it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from callbacks import Callback, ModelCheckpoint
from trainer.contracts.run_lock import LOCK_FILE, RunLockedError
from tests.helpers.distributed import script_env
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer

KW = {**QUIET, "enable_checkpointing": True, "accelerator": "cpu"}


def _fit(dirpath, steps, callbacks=(), ckpt_path=None, **ckpt_kw):
    checkpoint = ModelCheckpoint(dirpath=dirpath, save_last=True, **ckpt_kw)
    trainer = Trainer(max_steps=steps, callbacks=[checkpoint, *callbacks], **KW)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Regression(), loader(regression_data(), 8), ckpt_path=ckpt_path)
    return checkpoint, [str(w.message) for w in caught]


def _step(path):
    return torch.load(path, weights_only=True)["global_step"]


def test_a_second_run_in_the_same_dirpath_versions_its_files(tmp_path):
    first, _ = _fit(tmp_path, 6)
    second, caught = _fit(tmp_path, 4)
    assert first.last_model_path == str(tmp_path / "last.ckpt")
    assert second.last_model_path == str(tmp_path / "last-v1.ckpt")
    assert _step(tmp_path / "last.ckpt") == 6  # the first run's file is kept
    assert _step(tmp_path / "last-v1.ckpt") == 4
    assert _step(second.best_model_path) == 4 and second.best_model_path != first.best_model_path
    # the warning says what happens
    said = [w for w in caught if "holds checkpoints of another run" in w]
    assert len(said) == 1 and "last.ckpt" in said[0] and "-v<n> suffix" in said[0]
    assert not (tmp_path / LOCK_FILE).exists()  # released when each fit ended


def test_a_resumed_run_goes_on_writing_its_own_last_checkpoint(tmp_path):
    _fit(tmp_path, 4)
    resumed, caught = _fit(tmp_path, 6, ckpt_path=str(tmp_path / "last.ckpt"))
    assert resumed.last_model_path == str(tmp_path / "last.ckpt") and _step(tmp_path / "last.ckpt") == 6
    assert not (tmp_path / "last-v1.ckpt").exists()
    assert not [w for w in caught if "another run" in w]


def test_without_the_version_counter_a_second_run_refuses_naming_the_files(tmp_path):
    _fit(tmp_path, 6, enable_version_counter=False)
    with pytest.raises(FileExistsError, match=r"enable_version_counter=False.*another run \(epoch=0-step=6.ckpt, last.ckpt\)"):
        _fit(tmp_path, 4, enable_version_counter=False)
    assert _step(tmp_path / "last.ckpt") == 6 and sorted(os.listdir(tmp_path)) == ["epoch=0-step=6.ckpt", "last.ckpt"]


class _SecondRunInside(Callback):
    """While this fit runs, another fit in the same directory (same process) must be refused."""

    def __init__(self, dirpath):
        self.dirpath, self.error = dirpath, None

    def on_train_start(self, trainer, module):
        try:
            _fit(self.dirpath, 2)
        except RunLockedError as err:
            self.error = str(err)


def test_a_concurrent_run_in_this_process_is_refused(tmp_path):
    inside = _SecondRunInside(tmp_path)
    first, _ = _fit(tmp_path, 3, callbacks=[inside])
    assert inside.error is not None and f"pid {os.getpid()}" in inside.error
    assert "another fit in this process is writing there" in inside.error
    assert sorted(os.listdir(tmp_path)) == ["epoch=0-step=3.ckpt", "last.ckpt"] and _step(tmp_path / "last.ckpt") == 3


_HOLDER = textwrap.dedent(
    """
    import os, sys, time
    from callbacks import Callback, ModelCheckpoint
    from tests.helpers.models import QUIET, Regression, loader, regression_data
    from trainer import Trainer

    dirpath, go = sys.argv[1], sys.argv[2]

    class Hold(Callback):
        def on_train_start(self, trainer, module):
            print("holding", flush=True)
            for _ in range(600):  # bounded: 60 s at most
                if os.path.exists(go):
                    return
                time.sleep(0.1)

    checkpoint = ModelCheckpoint(dirpath=dirpath, save_last=True)
    Trainer(max_steps=2, callbacks=[checkpoint, Hold()], **{**QUIET, "enable_checkpointing": True},
            accelerator="cpu").fit(Regression(), loader(regression_data(), 8))
    """
)


@pytest.mark.timeout(90)
@pytest.mark.launches
def test_a_concurrent_run_in_another_process_is_refused_naming_it(tmp_path):
    ckpts, go = tmp_path / "ckpts", tmp_path / "go"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(ckpts), str(go)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=script_env(None),
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        lock = json.loads((ckpts / LOCK_FILE).read_text())
        assert lock["pid"] == holder.pid
        with pytest.raises(RunLockedError, match=rf"lock .* is held by run id {lock['run_id']}, pid {holder.pid} on host "):
            _fit(ckpts, 2)
        go.touch()
        assert holder.wait(timeout=60) == 0
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert _step(ckpts / "last.ckpt") == 2 and not (ckpts / LOCK_FILE).exists()


@pytest.mark.launches
def test_the_lock_of_a_run_that_died_is_taken_over(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    import socket

    (tmp_path / LOCK_FILE).write_text(json.dumps({"run_id": "old", "host": socket.gethostname(), "pid": gone.pid, "started": 0}))
    checkpoint, caught = _fit(tmp_path, 2)
    assert any("took over the lock" in w and f"pid {gone.pid}" in w for w in caught)
    assert _step(checkpoint.last_model_path) == 2 and not (tmp_path / LOCK_FILE).exists()


_PID1_RUN = textwrap.dedent(
    """
    import os, sys
    from callbacks import Callback, ModelCheckpoint
    from tests.helpers.models import QUIET, Regression, loader, regression_data
    from trainer import Trainer

    class Crash(Callback):  # as a SIGKILL would: nothing released, the lock file stays
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if sys.argv[2] == "crash" and trainer.global_step == 2:
                os._exit(9)

    assert os.getpid() == 1, os.getpid()
    checkpoint = ModelCheckpoint(dirpath=sys.argv[1], save_last=True, every_n_train_steps=1)
    Trainer(max_steps=4, callbacks=[checkpoint, Crash()], **{**QUIET, "enable_checkpointing": True},
            accelerator="cpu").fit(Regression(), loader(regression_data(), 8))
    print("trained", checkpoint.last_model_path, flush=True)
    """
)


@pytest.mark.timeout(120)
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="a pid namespace needs root and unshare")
@pytest.mark.launches
def test_a_run_restarted_as_pid_1_of_a_container_takes_its_lock_over(tmp_path):
    """The restarted process has the dead one's pid (1) and host: the lock's process token tells them apart."""
    def run(mode):
        return subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", _PID1_RUN, str(tmp_path), mode],
            capture_output=True, text=True, env=script_env(None), timeout=100,
        )

    crashed = run("crash")
    assert crashed.returncode == 9, crashed.stderr[-2000:]
    lock = json.loads((tmp_path / LOCK_FILE).read_text())
    assert lock["pid"] == 1
    again = run("ok")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "took over the lock" in again.stderr and "pid 1 on host" in again.stderr
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_lock_of_an_earlier_process_with_this_pid_is_taken_over(tmp_path):
    """A lock naming this host and this pid but another process (and another run) is stale; one
    naming this very process is a fit that is still running."""
    import socket

    (tmp_path / LOCK_FILE).write_text(json.dumps(
        {"run_id": "old-run", "host": socket.gethostname(), "pid": os.getpid(), "process": "an-earlier-one", "started": 0}
    ))
    checkpoint, caught = _fit(tmp_path, 2)
    assert any("took over the lock" in w and "run id old-run" in w and f"pid {os.getpid()}" in w for w in caught)
    assert _step(checkpoint.last_model_path) == 2 and not (tmp_path / LOCK_FILE).exists()


def test_two_checkpoint_callbacks_of_one_fit_share_a_directory(tmp_path):
    """Lightning trains with a top-k callback and a periodic one in one dirpath; so does Lockstep:
    one fit, one lock, each callback's files kept apart."""
    from tests.helpers.callbacks import Scripted
    from tests.helpers.callbacks import loader as scripted_loader

    top = ModelCheckpoint(dirpath=tmp_path, monitor="val_metric", save_top_k=1, filename="best-{epoch}")
    periodic = ModelCheckpoint(dirpath=tmp_path, every_n_epochs=1, save_top_k=-1, save_last=True)
    trainer = Trainer(max_epochs=3, callbacks=[top, periodic], num_sanity_val_steps=0, **KW)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Scripted(val_script=[3.0, 1.0, 2.0]), scripted_loader(16, 8), scripted_loader(8, 8))
    assert not [str(w.message) for w in caught if "another run" in str(w.message)]
    assert sorted(os.listdir(tmp_path)) == [
        "best-epoch=1.ckpt", "epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt", "last.ckpt"
    ]
    assert top.best_model_path == str(tmp_path / "best-epoch=1.ckpt") and _step(periodic.last_model_path) == 6
    # resumed: both callbacks' files are this run's, not another's
    again = [ModelCheckpoint(dirpath=tmp_path, monitor="val_metric", save_top_k=1, filename="best-{epoch}", enable_version_counter=False),
             ModelCheckpoint(dirpath=tmp_path, every_n_epochs=1, save_top_k=-1, save_last=True, enable_version_counter=False)]
    Trainer(max_epochs=4, callbacks=again, num_sanity_val_steps=0, **KW).fit(
        Scripted(val_script=[3.0, 1.0, 2.0, 0.5]), scripted_loader(16, 8), scripted_loader(8, 8),
        ckpt_path=str(tmp_path / "last.ckpt"),
    )
    assert again[0].best_model_path == str(tmp_path / "best-epoch=3.ckpt") and _step(again[1].last_model_path) == 8
    assert not (tmp_path / LOCK_FILE).exists()


# -- the lock's rules for a lock written on another host, or damaged --------------------------
def _lock_of(run, host="another-node", pid=4242):
    return json.dumps({"run_id": run, "attempt": 0, "host": host, "pid": pid, "process": "its-process", "started": 0})


def test_another_runs_lock_written_on_another_host_is_refused(tmp_path):
    """Its process cannot be asked from here: it may still be running."""
    lock = _lock_of("another-run")
    (tmp_path / LOCK_FILE).write_text(lock)
    with pytest.raises(RunLockedError, match=r"held by run id another-run, pid 4242 on host another-node, started .*, "
                       r"and it runs on another host, so it may still be running"):
        _fit(tmp_path, 2)
    assert (tmp_path / LOCK_FILE).read_text() == lock and sorted(os.listdir(tmp_path)) == [LOCK_FILE]


def test_this_runs_lock_written_on_another_node_is_taken_over_with_a_warning(tmp_path):
    """The same run restarted on another node (a requeue, an elastic restart): its own lock is stale."""
    from trainer.contracts.run_identity import run_id

    (tmp_path / LOCK_FILE).write_text(_lock_of(run_id()))
    checkpoint, caught = _fit(tmp_path, 2)
    assert any("took over the lock" in w and f"run id {run_id()}, pid 4242 on host another-node" in w for w in caught)
    assert _step(checkpoint.last_model_path) == 2 and not (tmp_path / LOCK_FILE).exists()


@pytest.mark.parametrize("content", [b"{\"run_id\": \"half-writ", b"\xff\xfe", b"[1, 2]"])
def test_a_damaged_lock_file_is_refused(tmp_path, content):
    (tmp_path / LOCK_FILE).write_bytes(content)
    with pytest.raises(RunLockedError, match=r"held by run id \?, pid \? on host \?, started \?, and its lock file "
                       r"cannot be read \(being written, or damaged\)"):
        _fit(tmp_path, 2)
    assert (tmp_path / LOCK_FILE).read_bytes() == content and sorted(os.listdir(tmp_path)) == [LOCK_FILE]


def test_a_lock_path_that_is_a_directory_is_a_clear_error(tmp_path):
    (tmp_path / LOCK_FILE).mkdir()
    with pytest.raises(RunLockedError, match=r"The run lock '.*\.lockstep-run\.lock' is a directory, not a lock file"):
        _fit(tmp_path, 2)
    assert sorted(os.listdir(tmp_path)) == [LOCK_FILE]
