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


def _slurm(monkeypatch, job, restart, step=0):
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_ID": str(step), "SLURM_LOCALID": "0",
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


def test_two_steps_of_one_slurm_job_never_share_a_checkpoint_or_a_log_version(tmp_path, monkeypatch):
    """``srun`` steps 0 and 1 of job 606 in one root: step 0 finished in version_0; step 1 failed
    before its first save and is requeued. Its restart trains from step 0 in a version of its
    own, not on in step 0's version from step 0's checkpoint."""
    root = str(tmp_path / "runs")
    _slurm(monkeypatch, 606, 0, step=0)
    old = run_identity.main(["--root", root, "--steps", "6"])
    before = _fingerprint(old["log_dir"])
    _slurm(monkeypatch, 606, 0, step=1)
    with pytest.raises(RuntimeError, match="planned failure"):
        run_identity.main(["--root", root, "--fail", "prepare_data"])
    _slurm(monkeypatch, 606, 1, step=1)
    new = run_identity.main(["--root", root, "--fail", "prepare_data"])
    assert new["start_step"] == 0 and new["log_dir"].endswith("version_1") and new["last"] != old["last"], new
    assert _fingerprint(old["log_dir"]) == before
    assert {run_id()} == {torch.load(new["last"], weights_only=True)["run_id"]} == {"slurm-606.1"}


@pytest.mark.parametrize("env, expected", [
    ({"SLURM_JOB_ID": "7"}, "slurm-7"),  # the batch script itself: no step
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "2"}, "slurm-7.2"),
    ({"SLURM_JOB_ID": "9", "SLURM_ARRAY_JOB_ID": "7", "SLURM_ARRAY_TASK_ID": "3", "SLURM_STEP_ID": "0"}, "slurm-7_3.0"),
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "2", "LOCKSTEP_RUN_NAME": "exp"}, "name-exp"),  # the user's name wins
    ({"LOCKSTEP_RUN_NAME": "exp"}, "name-exp"),
])
def test_the_run_id_has_every_part_that_tells_runs_apart(monkeypatch, env, expected):
    for name in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "LOCKSTEP_RUN_NAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert run_id() == expected


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
    assert torch.load(third, weights_only=True)["run_id"] == run_id() == "slurm-303.0"
    assert (_step(first), _step(second)) == (first_step, second_step)


def _as_new_process(monkeypatch, name=None):
    """This test process as a fresh one: a process run id of its own, and the user's run name."""
    from trainer.contracts import run_identity as identity

    for var in ("SLURM_JOB_ID", "SLURM_STEP_ID", "TORCHELASTIC_RUN_ID", "LOCKSTEP_RUN_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(identity, "_PROCESS_RUN_ID", f"process-{os.urandom(6).hex()}")
    if name is not None:
        monkeypatch.setenv("LOCKSTEP_RUN_NAME", name)


def _fit_last(root, callbacks=()):
    start = _StartStep()
    Trainer(max_steps=10, default_root_dir=root, accelerator="cpu", callbacks=[start, *callbacks], **QUIET).fit(
        Regression(), loader(regression_data(), 8), ckpt_path="last"
    )
    return start.step


def test_last_among_several_plain_runs_refuses_naming_each_file_with_its_run_and_step(tmp_path, monkeypatch):
    """Two plain runs pre-empted into one root keep last.ckpt and last-v1.ckpt; the first's
    relaunch with ckpt_path="last" has no id to tell which is its own: it refuses, naming each."""
    from trainer.checkpointing.checkpoint_paths import CheckpointPathError

    root = str(tmp_path)
    _as_new_process(monkeypatch)
    first = _preempted(root, 2)
    _as_new_process(monkeypatch)
    second = _preempted(root, 6)
    runs = [torch.load(p, weights_only=True)["run_id"] for p in (first, second)]
    _as_new_process(monkeypatch)
    with pytest.raises(CheckpointPathError) as info:
        _fit_last(root)
    said = str(info.value)
    for path, run in zip((first, second), runs):
        assert f"{path} (run {run}, global step {_step(path)})" in said, said
    assert "LOCKSTEP_RUN_NAME" in said


def test_last_among_several_runs_resumes_the_one_the_run_s_name_selects(tmp_path, monkeypatch):
    root = str(tmp_path)
    _as_new_process(monkeypatch, name="alpha")
    alpha = _step(_preempted(root, 2))
    _as_new_process(monkeypatch, name="beta")
    beta = _step(_preempted(root, 6))  # the newer file
    _as_new_process(monkeypatch, name="alpha")
    assert _fit_last(root) == alpha < beta  # alpha's own, not beta's newer one
    _as_new_process(monkeypatch, name="beta")
    assert _fit_last(root) == beta


def test_last_of_one_run_is_resumed_by_any_process(tmp_path, monkeypatch):
    root = str(tmp_path)
    _as_new_process(monkeypatch)
    step = _step(_preempted(root, 3))
    _as_new_process(monkeypatch)
    assert _fit_last(root) == step
