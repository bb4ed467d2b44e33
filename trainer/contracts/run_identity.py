"""Which run this process belongs to: one id for every rank of a run and for its restarts (a
torchrun restart, a SLURM requeue), and for no other run.

The id is written into the run's lock file, its checkpoints and its log version, so that a
restart resumes only its own run's checkpoint and writes on only in its own version.

- Under SLURM, ``slurm-<SLURM_JOB_ID>``: a requeue keeps the job id (and starts every process,
  torchrun included, anew).
- Under torchrun (and Lockstep's own launcher), torch's run id and store address, plus a token
  that the first rank to join the run draws and keeps in the launcher's rendezvous store, which
  outlives a restart of the workers: two torchrun invocations with the same command line (run id
  ``none``, the same port) are two runs.
- Otherwise each process is its own run.
"""
from __future__ import annotations

import os
import uuid

_PROCESS_RUN_ID = f"process-{uuid.uuid4().hex[:12]}"
# One per process, never shared: tells this process from an earlier one that had the same pid
# (a container's pid 1 after a restart).
PROCESS_TOKEN = uuid.uuid4().hex
_JOB_TOKEN: list[str] = []


def run_id() -> str:
    """This run's id (see the module's docstring)."""
    env = os.environ
    if env.get("SLURM_JOB_ID"):
        return f"slurm-{env['SLURM_JOB_ID']}"
    if env.get("TORCHELASTIC_RUN_ID"):
        base = f"{env['TORCHELASTIC_RUN_ID']}@{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}"
        return f"{base}/{_JOB_TOKEN[0]}" if _JOB_TOKEN else base
    return _PROCESS_RUN_ID


def attempt() -> int:
    """How often the launcher restarted (torchrun) or requeued (SLURM) this run: 0 at first."""
    for name in ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def adopt_job_token(token: str) -> None:
    """The token kept in the launcher's store for this run (set once the process joins it)."""
    _JOB_TOKEN[:] = [token]
