"""Lockstep on a real (private, single-node) SLURM, launched the way a cluster user launches it.

- ``srun -N1 -n2 python examples/digits.py`` ends with the parameters of the same fit under
  ``torchrun --nproc-per-node 2`` (to 1e-6).
- ``sbatch examples/slurm/train.sbatch`` (the example script itself, on one node), pre-empted
  with ``scancel --signal=TERM``: every task saves at the same step boundary, global rank 0 runs
  ``scontrol requeue``, the requeued job (``SLURM_RESTART_COUNT=1``) resumes from ``last.ckpt``
  and ends bitwise equal to the uninterrupted ``srun`` fit.
- The script's ``--signal=B:USR1@N`` path (the signal reaches only the batch shell, which passes
  it on) with ``LOCKSTEP_SLURM_REQUEUE=0``: every task saves, the job ends with exit code 75 and
  is not requeued.
- A task that fails (raises, or is killed) under ``srun --kill-on-bad-exit=1`` ends the whole
  step, and the output names its rank.

The fit is digits.py for ``EPOCHS`` epochs (23 steps each) on the CPU; the signal is sent once
the first epoch's checkpoint exists, so it lands mid-run.
"""
from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.helpers.distributed import REPO_ROOT, free_port, script_env
from tests.slurm.local_slurm import LocalSlurm

pytestmark = [pytest.mark.slurm, pytest.mark.distributed, pytest.mark.timeout(240)]

EPOCHS = 6
DIGITS_ARGS = ["--accelerator", "cpu", "--max-epochs", str(EPOCHS)]
SBATCH_SCRIPT = REPO_ROOT / "examples" / "slurm" / "train.sbatch"
JOB_TIMEOUT_S = 180
_DONE_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def _final_params(root: Path) -> dict[str, torch.Tensor]:
    """The state_dict of the newest epoch checkpoint the run wrote (the fit's final parameters)."""
    files = glob.glob(str(root / "**" / "epoch=*-step=*.ckpt"), recursive=True)
    assert files, f"no epoch checkpoint under {root}"
    newest = max(files, key=lambda f: int(re.search(r"step=(\d+)", f).group(1)))  # type: ignore[union-attr]
    checkpoint = torch.load(newest, map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == EPOCHS * 23, newest
    return checkpoint["state_dict"]


def _env(cluster: LocalSlurm, extra: dict[str, str] | None = None) -> dict[str, str]:
    return cluster.env(script_env(extra))


def _srun(
    cluster: LocalSlurm, args: list[str], env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["srun", "-N1", "-n2", "--kill-on-bad-exit=1", *args], env=_env(cluster, env), cwd=REPO_ROOT,
        capture_output=True, text=True, timeout=timeout,
    )


def _wait_for_job(cluster: LocalSlurm, job: int, restarts: int) -> dict[str, str]:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        state = cluster.job_state(job)
        if state["JobState"] in _DONE_STATES and int(state["Restarts"]) >= restarts:
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job} not done after {JOB_TIMEOUT_S} s: {cluster.job_state(job)}")


def _submit_and_signal(
    cluster: LocalSlurm, root: Path, scancel_args: list[str], extra_env: dict[str, str] | None = None
) -> tuple[int, Path]:
    """sbatch the example script, wait for its first checkpoint, then scancel with the signal."""
    out = root.parent / f"{root.name}.out"
    env = _env(cluster, {"LOCKSTEP_RUN_ROOT": str(root), "DIGITS_ARGS": " ".join(DIGITS_ARGS), **(extra_env or {})})
    done = subprocess.run(
        ["sbatch", "--parsable", f"--output={out}", str(SBATCH_SCRIPT)],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=30, check=True,
    )
    job = int(done.stdout.strip().split(";")[0])
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not glob.glob(str(root / "**" / "*.ckpt"), recursive=True):
        assert time.monotonic() < deadline, f"no checkpoint after {JOB_TIMEOUT_S} s:\n{out.read_text()}"
        assert cluster.job_state(job)["JobState"] not in _DONE_STATES, out.read_text()
        time.sleep(0.1)
    cluster.run("scancel", *scancel_args, str(job))
    return job, out


@pytest.fixture(scope="module")
def srun_fit(slurm_cluster: LocalSlurm, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("srun_fit")
    done = _srun(slurm_cluster, [sys.executable, "examples/digits.py", "--devices", "2", "--root", str(root), *DIGITS_ARGS])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return {"params": _final_params(root), "stdout": done.stdout}


@pytest.fixture(scope="module")
def torchrun_fit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    root = tmp_path_factory.mktemp("torchrun_fit")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
         "--master-port", str(free_port()), "examples/digits.py", "--devices", "2", "--root", str(root), *DIGITS_ARGS],
        env=script_env(None), cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return _final_params(root)


def _assert_close(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], atol: float) -> None:
    assert actual.keys() == expected.keys()
    for name in expected:
        assert torch.allclose(actual[name].double(), expected[name].double(), rtol=0, atol=atol), name


def _assert_equal(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for name in expected:
        assert torch.equal(actual[name], expected[name]), f"{name} differs"


def test_srun_fit_matches_torchrun(srun_fit: dict[str, Any], torchrun_fit: dict[str, torch.Tensor]) -> None:
    assert "world_size=2 global_batch=64" in srun_fit["stdout"]
    _assert_close(srun_fit["params"], torchrun_fit, atol=1e-6)


def test_sbatch_preempted_requeued_resumes_bitwise(
    slurm_cluster: LocalSlurm, srun_fit: dict[str, Any], torchrun_fit: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    root = tmp_path / "run"
    job, out = _submit_and_signal(slurm_cluster, root, ["--signal=TERM"])
    state = _wait_for_job(slurm_cluster, job, restarts=1)
    log = out.read_text()
    assert state["JobState"] == "COMPLETED" and state["Restarts"] == "1", (state, log)
    assert "Pre-empted by SIGTERM: saved" in log, log
    assert f"SLURM job {job}: `scontrol requeue {job}`: requeued." in log, log
    assert "restart 1 on" in log and "srun exited with 0" in log, log
    # The first run saved mid-run, and the requeued run went on from there (its progress bar starts
    # past epoch 0) rather than from scratch, which would end with the same parameters. It wrote on
    # in the first run's version: one job, one log directory.
    last = glob.glob(str(root / "**" / "last.ckpt"), recursive=True)
    assert len(last) == 1, last
    saved, requeued = log.partition("restart 1 on")[::2]
    resumed = re.findall(r"\[lockstep\] Resumed from (\S+): epoch \d+, global step (\d+)\.", requeued)
    assert len(resumed) == 1 and resumed[0][0] == last[0] and "Resumed from" not in saved, log
    saved_step = int(resumed[0][1])
    assert 23 <= saved_step < EPOCHS * 23, saved_step
    requeued_epochs = {int(e) for e in re.findall(r"Epoch (\d+):", requeued)}
    assert requeued_epochs and min(requeued_epochs) == saved_step // 23, (saved_step, requeued_epochs)
    params = _final_params(root)
    _assert_equal(params, srun_fit["params"])
    _assert_close(params, torchrun_fit, atol=1e-6)


def test_batch_shell_signal_reaches_every_task_and_requeue_can_be_turned_off(
    slurm_cluster: LocalSlurm, tmp_path: Path
) -> None:
    root = tmp_path / "run"
    # --batch signals only the batch shell: what `#SBATCH --signal=B:USR1@120` does at its time.
    job, out = _submit_and_signal(slurm_cluster, root, ["--batch", "--signal=USR1"], {"LOCKSTEP_SLURM_REQUEUE": "0"})
    state = _wait_for_job(slurm_cluster, job, restarts=0)
    log = out.read_text()
    assert state["Restarts"] == "0" and state["ExitCode"] == "75:0", (state, log)
    assert "Pre-empted by SIGUSR1: saved" in log, log
    assert f"SLURM job {job}: not requeued (LOCKSTEP_SLURM_REQUEUE=0)." in log, log
    # Every task left with 75 by itself: none was ended by srun's --kill-on-bad-exit SIGTERM once
    # the first one had exited 75.
    assert "srun exited with 75" in log and "Terminated" not in log, log
    assert glob.glob(str(root / "**" / "last.ckpt"), recursive=True), log


def test_a_failing_task_ends_the_step_naming_its_rank(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    done = _srun(
        slurm_cluster, [sys.executable, "tests/scripts/ddp_fit.py", "--fail-rank", "1", "--fail-step", "2"],
        env={"LOCKSTEP_TEST_OUT": str(tmp_path)},
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    # srun stops rank 0 at once (before its collective could fail), so the names come from rank 1
    # itself and from srun.
    assert "RuntimeError: boom on rank 1" in output, output
    assert "[lockstep] rank 1 failed at epoch 0, global step 2, batch index 2" in output, output
    assert "task 1: Exited with exit code 1" in output, output
    assert "rank 0 failed" not in output.lower() and "FIT_DONE" not in output, output


def test_a_task_killed_under_srun_ends_the_step_naming_its_rank(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    root, log = tmp_path / "run", tmp_path / "srun.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["srun", "-N1", "-n2", "--kill-on-bad-exit=1", sys.executable, "examples/digits.py", "--devices", "2",
             "--root", str(root), "--accelerator", "cpu", "--max-epochs", "100"],
            env=_env(slurm_cluster), cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not glob.glob(str(root / "**" / "*.ckpt"), recursive=True):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        rank1 = _task_pids(slurm_cluster, procid=1)
        assert len(rank1) == 1, rank1
        os.kill(rank1[0], signal.SIGKILL)  # as the kernel's OOM killer ends a task
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = log.read_text()
    assert proc.returncode != 0, output
    assert re.search(r"task 1: Killed", output), output
    assert not _task_pids(slurm_cluster, procid=0) and not _task_pids(slurm_cluster, procid=1)


def _task_pids(cluster: LocalSlurm, procid: int) -> list[int]:
    """The python processes srun started as task ``procid`` on this cluster."""
    def is_python(pid: int) -> bool:
        try:
            return "python" in os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            return False

    return [pid for pid in cluster.processes(SLURM_PROCID=str(procid)) if is_python(pid)]

