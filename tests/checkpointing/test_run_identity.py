"""A run touches only its own files: two runs and restarts in one ``default_root_dir``, under
torchrun (real launches, two ranks) and under a SLURM-like environment (the same process with
the variables a requeue sets). A restart resumes only its own run's checkpoint and writes on only
in its own log version; a fresh run never writes into another run's; a pre-emption save without
a ModelCheckpoint never replaces another run's ``last.ckpt``."""
from __future__ import annotations

import hashlib
import json
import os
import re

import pytest
import torch

from callbacks import Callback
from tests.helpers.distributed import REPO_ROOT, free_port, run_script
from tests.helpers.models import QUIET, Regression, loader, regression_data
from tests.scripts import run_identity
from trainer import Trainer
from trainer.contracts.run_identity import run_id
from trainer.launch.preemption import Preempted

SCRIPT = str(REPO_ROOT / "tests" / "scripts" / "run_identity.py")


def _fingerprint(directory):
    """Every file below ``directory`` with its SHA-256: what must stay as it was."""
    return {
        os.path.relpath(os.path.join(d, f), directory): hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest()
        for d, _, files in os.walk(directory) for f in files
    }


def _step(path):
    return torch.load(path, weights_only=True)["global_step"]


def _slurm(monkeypatch, job, restart):
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_ID": "0", "SLURM_LOCALID": "0",
           "SLURM_NODEID": "0", "SLURM_TASKS_PER_NODE": "1", "SLURM_JOB_NODELIST": "localhost",
           "SLURM_JOB_ID": str(job), "SLURM_RESTART_COUNT": str(restart)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def _result(proc):
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and len(lines) == 1, proc.stderr[-3000:]
    return json.loads(lines[0][len("RESULT "):])


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_torchrun_restarts_resume_only_their_own_run(tmp_path):
    """Three torchrun jobs with one command line (run id ``none``, the same port) in one root:
    a finished one, then two whose first attempt fails before any save (in prepare_data, at step
    1). Each restart trains from step 0 in a version of its own; nothing of another run changes."""
    root, port = tmp_path / "runs", free_port()
    flags = ["--master_port", str(port), "--max-restarts", "1"]
    old = _result(run_script([SCRIPT, "--root", str(root), "--steps", "6"], torchrun_args=flags, timeout=120))
    assert old["start_step"] == 0 and old["step"] == 6 and old["log_dir"].endswith("version_0")
    before = _fingerprint(old["log_dir"])
    seen = [before]
    for n, fail in enumerate(("prepare_data", "step"), start=1):
        proc = run_script([SCRIPT, "--root", str(root), "--fail", fail], torchrun_args=flags, timeout=150)
        new = _result(proc)
        assert f"planned failure" in proc.stderr  # the first attempt failed, the restart trained
        assert new["attempt"] == 1 and new["start_step"] == 0 and new["step"] == 4, new
        assert "Resumed from" not in proc.stdout + proc.stderr
        assert new["log_dir"].endswith(f"version_{n}") and os.path.dirname(new["last"]) == os.path.join(new["log_dir"], "checkpoints")
        assert _step(new["last"]) == 4
        assert _fingerprint(old["log_dir"]) == before  # the finished run's files are as they were
        seen.append(_fingerprint(new["log_dir"]))
    assert sorted(os.listdir(root / "logs")) == ["version_0", "version_1", "version_2"]


@pytest.mark.parametrize("fail", ["prepare_data", "step"])
def test_a_requeued_slurm_job_resumes_only_its_own_run(tmp_path, monkeypatch, fail):
    """The same under SLURM: job 101 finished; job 202 fails before its first save, is requeued
    (``SLURM_RESTART_COUNT=1``) and trains from step 0 in its own version."""
    root = str(tmp_path / "runs")
    _slurm(monkeypatch, 101, 0)
    old = run_identity.main(["--root", root, "--steps", "6"])
    before = _fingerprint(old["log_dir"])
    _slurm(monkeypatch, 202, 0)
    with pytest.raises(RuntimeError, match="planned failure"):
        run_identity.main(["--root", root, "--fail", fail])
    _slurm(monkeypatch, 202, 1)
    new = run_identity.main(["--root", root, "--fail", fail])
    assert new["start_step"] == 0 and new["step"] == 4 and new["log_dir"].endswith("version_1"), new
    assert _fingerprint(old["log_dir"]) == before
    # requeued once more, job 202 now resumes its own checkpoint (step 4) in its own version
    _slurm(monkeypatch, 202, 2)
    again = run_identity.main(["--root", root, "--steps", "6"])
    assert again["start_step"] == 4 and again["log_dir"] == new["log_dir"] and _step(again["last"]) == 6
    assert _fingerprint(old["log_dir"]) == before


class _PreemptAt(Callback):
    """Asks for a pre-emption (SIGUSR1) after global step ``step``."""

    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            import signal

            os.kill(os.getpid(), signal.SIGUSR1)


class _StartStep(Callback):
    def on_train_start(self, trainer, module):
        self.step = trainer.global_step


def _preempted(root, step):
    with pytest.raises(Preempted) as info:
        Trainer(max_steps=10, default_root_dir=root, accelerator="cpu", callbacks=[_PreemptAt(step)],
                **QUIET).fit(Regression(), loader(regression_data(), 8))
    return info.value.path


def test_two_preempted_runs_without_a_model_checkpoint_keep_their_last_checkpoints_apart(tmp_path, monkeypatch):
    """Two SLURM jobs in one root without a ModelCheckpoint, both pre-empted: the second's save
    does not replace the first's, and each requeue resumes its own."""
    root = str(tmp_path)
    _slurm(monkeypatch, 301, 0)
    first = _preempted(root, 2)
    first_step = _step(first)
    _slurm(monkeypatch, 302, 0)
    second = _preempted(root, 6)
    second_step = _step(second)
    assert first == os.path.join(root, "checkpoints", "last.ckpt") and second == os.path.join(root, "checkpoints", "last-v1.ckpt")
    assert _step(first) == first_step < second_step
    assert not os.path.exists(os.path.join(root, "checkpoints", ".lockstep-run.lock"))  # held only while saving
    for job, step in ((301, first_step), (302, second_step)):
        _slurm(monkeypatch, job, 1)
        start = _StartStep()
        Trainer(max_steps=10, default_root_dir=root, accelerator="cpu", callbacks=[start], **QUIET).fit(
            Regression(), loader(regression_data(), 8)
        )
        assert start.step == step, (job, start.step)
    # a pre-emption while a live run holds the directory's lock: a name of this run's own
    from trainer.contracts.run_lock import RunLock

    _slurm(monkeypatch, 303, 0)
    holder = RunLock(os.path.join(root, "checkpoints"))
    holder.acquire(owner=object())
    try:
        third = _preempted(root, 2)
    finally:
        holder.release()
    assert re.fullmatch(r"last-[0-9a-f]{8}\.ckpt", os.path.basename(third)) and _step(third) < second_step
    assert torch.load(third, weights_only=True)["run_id"] == run_id() == "slurm-303"
    assert (_step(first), _step(second)) == (first_step, second_step)
