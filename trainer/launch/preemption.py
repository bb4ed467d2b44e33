"""Pre-emption: SIGTERM / SIGUSR1 on any rank -> every rank saves at the same step boundary, exits 75.

A signal handler only sets a flag. Ranks agree on it without a blocking collective: each
optimizer step starts an asynchronous all-reduce of the flag and reads the one started at the
previous step, which has long finished, so all ranks act at the same step one step later.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

PREEMPTION_EXIT_CODE = 75  # EX_TEMPFAIL: "try again later" -- relaunch with ckpt_path="last"
PREEMPTION_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGUSR1", None)) if s)
# A repeat of the same signal sooner than this is the same request delivered twice: SLURM signals
# every process of a step, and torch's agent forwards what it received to its workers as well.
REPEAT_WINDOW_S = 2.0
# Set by Lockstep's launchers for their workers: a directory where a pre-empted worker leaves a
# note (the signal and the checkpoint saved), so the launcher can tell a pre-empted run from one
# that was stopped or failed, and exit 75 saying what was saved.
PREEMPTION_NOTES_ENV = "LOCKSTEP_PREEMPTION_NOTES"
# "0" turns off the `scontrol requeue` of a pre-empted SLURM job (e.g. when the batch script or a
# workflow manager resubmits by itself).
SLURM_REQUEUE_ENV = "LOCKSTEP_SLURM_REQUEUE"


class Preempted(SystemExit):
    """Raised on every rank after the pre-emption checkpoint is written."""

    def __init__(self, signum: int, path: str) -> None:
        super().__init__(PREEMPTION_EXIT_CODE)
        self.signum = signum
        self.path = path

    def __str__(self) -> str:
        return (
            f"Pre-empted by {signal.Signals(self.signum).name}: saved {self.path}; exiting with code "
            f"{PREEMPTION_EXIT_CODE}. Relaunch with trainer.fit(..., ckpt_path='last') to resume."
        )


def announce_preemption(preempted: Preempted) -> None:
    """On global rank 0: say what was saved, where, and the exit code; under SLURM, requeue the job.

    ``#SBATCH --requeue`` alone requeues a job only when SLURM itself pre-empts it, and no exit
    code requeues a job unless the cluster sets ``RequeueExit``: so a pre-empted job that runs
    under SLURM (``SLURM_JOB_ID`` set) asks for its requeue with ``scontrol requeue``, unless
    ``LOCKSTEP_SLURM_REQUEUE=0``.
    """
    _say(f"[lockstep] {preempted}")
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return
    scontrol = shutil.which("scontrol")
    if os.environ.get(SLURM_REQUEUE_ENV, "1").strip() == "0":
        _say(f"[lockstep] SLURM job {job}: not requeued ({SLURM_REQUEUE_ENV}=0).")
    elif scontrol is None:
        _say(f"[lockstep] SLURM job {job}: scontrol not found, the job is not requeued.")
    else:
        _say(f"[lockstep] SLURM job {job}: `scontrol requeue {job}`: {_requeue(scontrol, job)}.")


def _requeue(scontrol: str, job: str) -> str:
    # The requeue ends the job's processes at once with SIGTERM, scontrol among them, possibly
    # before it has read the controller's answer (seen on a real SLURM). So scontrol runs with
    # SIGTERM ignored (an ignored signal stays ignored across exec), and so does this process
    # meanwhile; SLURM's SIGKILL follows only after the cluster's KillWait.
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN) if on_main_thread else None
    try:
        done = subprocess.run([scontrol, "requeue", job], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"not requeued: {err}"
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)
    if done.returncode == 0:
        return "requeued"
    if done.returncode < 0:
        return f"unknown whether requeued: scontrol was ended by {signal.Signals(-done.returncode).name}"
    return f"not requeued: {(done.stderr or done.stdout).strip()}"


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def leave_note_for_launcher(preempted: Preempted) -> None:
    """In a worker of a Lockstep launcher: tell it that this worker saved and exits 75."""
    notes = os.environ.get(PREEMPTION_NOTES_ENV)
    if not notes:
        return
    note = Path(notes) / f"{os.getpid()}.json"
    try:
        partial = note.with_suffix(".tmp")
        partial.write_text(json.dumps({"signum": int(preempted.signum), "path": str(preempted.path)}))
        partial.replace(note)  # the launcher never reads half a note
    except OSError:  # the launcher is gone or its directory too: nobody to tell
        pass


def read_launcher_notes(notes: str | os.PathLike[str]) -> Preempted | None:
    """In a launcher: the pre-emption its workers noted in ``notes`` (None: none was pre-empted)."""
    for note in sorted(Path(notes).glob("*.json")):
        try:
            data = json.loads(note.read_text())
            return Preempted(int(data["signum"]), str(data["path"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


class PreemptionWatch:
    """Installs the signal handlers for the length of a fit and answers "stop now?" per step."""

    def __init__(self) -> None:
        self.signum = 0
        self._signalled_at = 0.0
        self._previous: dict[int, Any] = {}
        self._flag: torch.Tensor | None = None
        self._work: Any = None
        self._acting = False  # every rank agreed: saving, then leaving with code 75

    def install(self) -> None:
        """Catch the pre-emption signals (only possible on the main thread)."""
        self.signum = 0
        self._acting = False
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in PREEMPTION_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def uninstall(self, failing: bool = False) -> None:
        """Give the signals back to their previous handlers; wait for a pending agreement.

        ``failing``: the loop is leaving by an exception (Ctrl-C, a peer's failure): a peer may be
        gone, so a pending agreement that fails is dropped rather than raised over that exception.

        A pre-empted SLURM task (``SLURM_JOB_ID`` set) keeps ignoring SIGTERM on its way out with
        code 75: SLURM's own SIGTERMs (the requeue ends the job's tasks; ``srun
        --kill-on-bad-exit`` ends the step once one task exited 75) would otherwise end it by the
        signal, before rank 0 requeued the job or with 143 instead of 75. SLURM's SIGKILL after
        ``KillWait`` still ends a task that does not leave.
        """
        keep_ignoring = self._acting and "SLURM_JOB_ID" in os.environ
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if keep_ignoring and sig == signal.SIGTERM else handler)
        self._previous.clear()
        if self._work is not None:
            work, self._work = self._work, None
            try:
                work.wait()
            except Exception:
                if not failing:
                    raise

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._acting:
            return  # the save is under way and the process leaves right after it: do not cut it short
        now = time.monotonic()
        if self.signum == signum:
            if now - self._signalled_at < REPEAT_WINDOW_S:
                return  # one request that reached this process twice (SLURM and the agent)
            # Asked again later (e.g. a launcher that is tearing the group down): stop waiting for
            # the step boundary and let the signal do what it does by default.
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        self.signum = signum
        self._signalled_at = now

    def agreed(self, world_size: int, group: Any = None) -> int:
        """The signal every rank agrees to act on now (0: none). Call once per optimizer step.

        ``group`` is a CPU (gloo) group, so reading the flag never waits for an accelerator.
        """
        if world_size == 1:
            self._acting = self.signum != 0
            return self.signum
        decided = 0
        if self._work is not None:
            self._work.wait()
            decided = int(self._flag[0])  # type: ignore[index]
        self._flag = torch.tensor([self.signum], dtype=torch.int64)
        self._work = dist.all_reduce(self._flag, op=dist.ReduceOp.MAX, group=group, async_op=True)
        self._acting = decided != 0
        return decided
