"""The launcher and its workers as one run: the rank that failed first is the one named, output
lines stay whole, Ctrl-C and pre-emption say one short thing. Real processes, gloo on 127.0.0.1
(tests/scripts/launch_lifecycle.py). That workers die with a launcher killed by SIGKILL is the
fault matrix's ``sigkill_launcher`` case under each launcher (tests/faults/test_fault_matrix.py);
a rank failing inside a step is named with its step and batch in tests/launch/test_ddp_launch.py."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.helpers.distributed import REPO_ROOT, descendants, kill_all, run_ranks, run_script, script_env
from tests.helpers.models import QUIET, Regression, loader, regression_data

SCRIPT = str(REPO_ROOT / "tests" / "scripts" / "launch_lifecycle.py")
OUT = "LOCKSTEP_TEST_OUT"
BOUND_S = 60  # generous: the machine running the suite may be loaded

pytestmark = pytest.mark.distributed


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_worker_lines_never_interleave(tmp_path):
    """Two workers print 300 lines of 1000 characters each at the same time through one pipe."""
    lines, width = 300, 1000
    proc = run_script([SCRIPT, "--mode", "print", "--lines", str(lines), "--width", str(width)], launcher="python",
                      env={OUT: str(tmp_path)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = [line for line in proc.stdout.splitlines() if not line.startswith("END rank=")]
    whole = [f"R{r} {i} " + (f"r{r}" * width)[:width] for r in (0, 1) for i in range(lines)]
    broken = [line[:60] for line in printed if line not in set(whole)]
    assert not broken, f"{len(broken)} of {len(printed)} lines garbled, e.g. {broken[:3]}"
    assert sorted(printed) == sorted(whole)


class _RaiseInSetup(Regression):
    def setup(self, stage):
        if self.global_rank == 1:
            raise RuntimeError("setup failed on rank 1")


def _setup_fails_on_rank_1(rank, world_size, runs):
    from trainer import Trainer

    torch.set_num_threads(1)
    seen = []
    for _ in range(runs):
        try:
            trainer = Trainer(max_epochs=1, devices=2, accelerator="cpu", **QUIET)
            trainer.fit(_RaiseInSetup(), loader(regression_data(16), 4))
        except Exception as err:  # noqa: BLE001 - the test inspects what each rank saw
            seen.append((type(err).__name__, str(err), getattr(err, "rank", None)))
    return seen


@pytest.mark.timeout(120)
def test_rank_1_failing_in_setup_is_always_the_rank_named():
    """Rank 0 is waiting in a collective when rank 1 raises in `setup`: every time, rank 0 must
    name rank 1 and its error, not report its own broken connection."""
    runs = 3
    seen0, seen1 = run_ranks(_setup_fails_on_rank_1, args=(runs,), init_group=False, timeout=100)
    assert seen1 == [("RuntimeError", "setup failed on rank 1", None)] * runs
    assert len(seen0) == runs
    for kind, text, rank in seen0:
        assert (kind, rank) == ("RankFailedError", 1), text
        assert text.startswith("Rank 1 failed at epoch 0, global step 0, in fit outside the training loop: "
                               "RuntimeError: setup failed on rank 1. Rank 0 stopped"), text


class _Stall(Regression):
    def training_step(self, batch, batch_idx):
        if self.global_rank == 0 and self.global_step == 2:
            time.sleep(8)  # rank 1's gradient all-reduce times out meanwhile (timeout=2)
        return super().training_step(batch, batch_idx)


def _rank_0_stalls(rank, world_size):
    from trainer import DDPStrategy, Trainer

    torch.set_num_threads(1)
    try:
        Trainer(max_epochs=1, strategy=DDPStrategy(timeout=2), accelerator="cpu", **QUIET).fit(
            _Stall(), loader(regression_data(32), 4)
        )
    except Exception as err:  # noqa: BLE001 - the test inspects what each rank saw
        return type(err).__name__, str(err), "\n".join(getattr(err, "__notes__", []))
    return "no error", "", ""


@pytest.mark.timeout(120)
def test_a_timed_out_rank_names_its_stalled_peer_which_reports_its_own_error():
    """Rank 0 stalls outside any collective; rank 1's all-reduce times out. Rank 1 names rank 0 as
    stalled, and the collective it waited in (docs/fault-tolerance.md, Stalls); rank 0, whose group
    is gone when it comes back, must not blame rank 1 as if rank 1 had failed on its own: it
    reports its own error, with a note."""
    (kind0, text0, notes0), (kind1, text1, notes1) = run_ranks(_rank_0_stalls, init_group=False, timeout=100)
    assert kind1 == "RankFailedError" and text1.startswith("Rank 0 on host "), text1
    assert "stalled at epoch 0, global step 2, batch index 2" in text1 and "rank 1's timed out" in text1, text1
    assert kind0 != "RankFailedError", text0
    assert "rank 1 had already stopped at epoch 0, global step 2, batch index 2" in notes0


def _failure(tmp_path, rank, exitcode, message=None, timestamp=1000, collective=False, callstack=None):
    """A worker failure as torch's agent records it, from an error file in the Trainer's format."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    error_file = tmp_path / f"error{rank}-{exitcode}.json"
    if message is not None:
        error_file.write_text(json.dumps({"message": {"message": message, "extraInfo": {
            "py_callstack": callstack or f"Traceback of rank {rank}\n{message}", "timestamp": str(timestamp),
            "lockstep_consequence": collective or message.startswith("RankFailedError")}}}))
    failure = ProcessFailure(local_rank=rank, pid=100 + rank, exitcode=exitcode, error_file=str(error_file))
    if message is None:
        failure.timestamp = timestamp  # torch stamps a failure without a file when it sees it
    return failure


@pytest.mark.timeout(30)
def test_the_launcher_names_the_own_failure_not_the_first_exit(tmp_path, capsys):
    """torch's agent picks the earliest failure in whole seconds, so on a tie rank 0 (which only
    stopped because rank 1 failed) was named. The launcher names the rank whose error is its own."""
    from trainer.launch.launcher import _report_failed_workers

    failures = {
        0: _failure(tmp_path, 0, 1, "RankFailedError: Rank 1 failed at epoch 0, global step 3, batch index 3: ..."),
        1: _failure(tmp_path, 1, 1, "RuntimeError: boom on rank 1"),
    }
    assert _report_failed_workers(failures) == 1
    err = capsys.readouterr().err
    assert err.startswith("[lockstep] worker rank 1 failed with exit code 1: RuntimeError: boom on rank 1\n"
                          "Traceback of rank 1\n")
    assert "[lockstep] worker rank 0 also stopped (exit code 1): RankFailedError: Rank 1 failed" in err
    # A rank the agent had to SIGKILL (stuck after its peer failed) is not the cause.
    failures = {0: _failure(tmp_path, 0, -9, timestamp=1030), 1: _failure(tmp_path, 1, 1, "RuntimeError: boom")}
    assert _report_failed_workers(failures) == 1
    assert capsys.readouterr().err.startswith("[lockstep] worker rank 1 failed with exit code 1: RuntimeError: boom")
    # A rank killed from outside (no error file) explains its peer's broken collective, even in
    # the same second.
    broken = _failure(tmp_path, 0, 1, "RuntimeError: Connection closed by peer", collective=True)
    failures = {0: broken, 1: _failure(tmp_path, 1, -9)}
    assert _report_failed_workers(failures) == 1
    assert capsys.readouterr().err.startswith("[lockstep] worker rank 1 failed with exit code -9")
    # Rank 1 SIGKILLed from outside, then rank 0 stopped by the agent's SIGTERM, in the same second.
    failures = {0: _failure(tmp_path, 0, -15), 1: _failure(tmp_path, 1, -9)}
    assert _report_failed_workers(failures) == 1
    assert capsys.readouterr().err.startswith("[lockstep] worker rank 1 failed with exit code -9")
    # Every rank raises the NonFiniteLossError the save-time check agreed on: rank 0's is about
    # rank 1 (the Trainer marks it a consequence), rank 1's is its own.
    nan = "NonFiniteLossError: The training loss is nan at epoch 1, global step 11, batch index 3"
    failures = {
        0: _failure(tmp_path, 0, 1, "NonFiniteLossError: On rank 1: " + nan[20:], collective=True),
        1: _failure(tmp_path, 1, 1, nan),
    }
    assert _report_failed_workers(failures) == 1
    assert capsys.readouterr().err.startswith(f"[lockstep] worker rank 1 failed with exit code 1: {nan}")
    # A rank stopped by the agent after its peer's collective broke (a stalled rank) is the cause.
    failures = {0: _failure(tmp_path, 0, 1, "RuntimeError: Connection closed by peer", collective=True),
                1: _failure(tmp_path, 1, -15)}
    assert _report_failed_workers(failures) == 1
    capsys.readouterr()
    # The workers leave their tracebacks to this report: a second rank's own error keeps its
    # traceback, and a survivor the agent stopped says why it stopped.
    second = "Traceback (most recent call last):\n  File \"train.py\", line 9\nValueError: bad on rank 0"
    failures = {0: _failure(tmp_path, 0, 1, "ValueError: bad on rank 0", timestamp=1001, callstack=second),
                1: _failure(tmp_path, 1, 1, "RuntimeError: boom"), 2: _failure(tmp_path, 2, -15)}
    assert _report_failed_workers(failures) == 1
    err = capsys.readouterr().err
    assert "Traceback of rank 1\n" in err and second in err
    assert "[lockstep] worker rank 2 also stopped (exit code -15): stopped by the launcher (SIGTERM) after worker rank 1 failed" in err
    # Pre-empted workers (75; a slower one stopped by the agent's SIGTERM): one line, exit code 75.
    failures = {0: _failure(tmp_path, 0, 75), 1: _failure(tmp_path, 1, -15)}
    assert _report_failed_workers(failures) == 75
    assert capsys.readouterr().err == "[lockstep] The run was pre-empted: exit code 75.\n"


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree from /proc")
def test_ctrl_c_prints_one_short_message(tmp_path):
    """SIGINT to the launcher's process group (what Ctrl-C in a terminal does)."""
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, "--mode", "train"], env=script_env({OUT: str(tmp_path)}),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    pids_file = tmp_path / "pids.txt"
    try:
        assert _wait_for(lambda: pids_file.exists() and len(pids_file.read_text().split()) == 2, 120)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            kill_all([proc.pid, *descendants(proc.pid)])
            proc.wait()
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert stderr.count("[lockstep]") == 1 and "[lockstep] Stopped by SIGINT" in stderr, stderr[-3000:]


@pytest.mark.timeout(60)
def test_preemption_says_what_was_saved_and_requeues_under_slurm(tmp_path):
    """SIGUSR1 in one process under SLURM: the message names the signal, the file, the exit code,
    and `scontrol requeue <job>` is run (a stand-in `scontrol` on PATH records its arguments)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'scontrol_args'}\n")
    scontrol.chmod(0o755)
    code = (
        "import signal\n"
        "from callbacks import Callback\n"
        "from tests.helpers.models import QUIET, Regression, loader, regression_data\n"
        "from trainer import Trainer\n"
        "class Sig(Callback):\n"
        "    def on_train_batch_end(self, trainer, *args):\n"
        "        if trainer.global_step == 2: signal.raise_signal(signal.SIGUSR1)\n"
        f"Trainer(max_epochs=3, accelerator='cpu', logger=False, enable_progress_bar=False,"
        f" default_root_dir={str(tmp_path)!r}, callbacks=[Sig()]).fit(Regression(), loader(regression_data(32), 4))\n"
    )
    env = {"SLURM_JOB_ID": "4242", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = run_script(["-c", code], launcher="python", env=env, cwd=REPO_ROOT, timeout=50)
    saved = tmp_path / "checkpoints" / "last.ckpt"
    assert proc.returncode == 75, proc.stderr[-3000:]
    assert saved.is_file()
    assert f"[lockstep] Pre-empted by SIGUSR1: saved {saved}; exiting with code 75." in proc.stderr
    assert "[lockstep] SLURM job 4242: `scontrol requeue 4242`: requeued." in proc.stderr
    assert (tmp_path / "scontrol_args").read_text().split() == ["requeue", "4242"]
    assert "Traceback" not in proc.stderr


def test_an_error_about_another_rank_is_a_consequence():
    """The NonFiniteLossError every rank raises after the save-time check names the rank whose
    loss it was; on the other ranks it is a consequence (the launcher then blames that rank)."""
    import pickle

    from trainer.loops.anomaly import NonFiniteLossError
    from trainer.launch.failure_notes import is_consequence

    about_1 = NonFiniteLossError("On rank 1: The training loss is nan", rank=1)
    assert is_consequence(about_1, 0)
    assert not is_consequence(about_1, 1)
    assert not is_consequence(NonFiniteLossError("The training loss is nan"), 0)
    assert pickle.loads(pickle.dumps(about_1)).rank == 1


def test_the_peer_named_is_the_one_that_failed_first():
    """Ranks 2 and 1 fail on their own, in that order; then rank 0's collective breaks. Rank 0
    names rank 2, the first failure: not the latest note, nor the lowest rank. A real store."""
    from torch.distributed import DistNetworkError, HashStore

    from trainer.launch.failure_notes import RankFailedError, explain_failure, read_failure_notes

    store = HashStore()
    assert explain_failure(store, 2, 3, RuntimeError("disk full on rank 2"), "epoch 0, global step 4, batch index 4") is None
    time.sleep(0.01)  # two distinct wall times
    assert explain_failure(store, 1, 3, ValueError("bad batch on rank 1"), "epoch 0, global step 5, batch index 5") is None
    assert [n["rank"] for n in read_failure_notes(store)] == [2, 1]
    named = explain_failure(store, 0, 3, DistNetworkError("connection closed by peer"), "epoch 0, global step 4, batch index 4")
    assert isinstance(named, RankFailedError) and named.rank == 2
    assert str(named).startswith("Rank 2 failed at epoch 0, global step 4, batch index 4: RuntimeError: disk full on rank 2.")
