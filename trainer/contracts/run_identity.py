"""Which run this process belongs to: one id for every rank of a run and for its restarts (a
torchrun restart, a SLURM requeue), and for no other run.

The id is written into the run's lock file, its checkpoints and its log version, so that a
restart resumes only its own run's checkpoint and writes on only in its own version.

- ``LOCKSTEP_RUN_NAME`` set (the user's own name for the run): ``name-<it>``, whatever launched
  it; a relaunch under that name, in another job too, is the same run.
- In a Ray Train worker, ``ray-<the experiment's storage directory>``: Ray's restarts of the
  workers, and a new driver that continues the experiment (the same ``RunConfig`` name and
  storage path), are the same run (`trainer.contracts.ray_worker`).
- Under SLURM, ``slurm-<SLURM_JOB_ID>`` (``slurm-<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>`` for
  an array task), then ``.<SLURM_STEP_ID>`` inside an ``srun`` step: a requeue keeps the job id and
  the step numbers (and starts every process, torchrun included, anew), and two steps of one job
  are two runs.
- Under torchrun (and Lockstep's own launcher), torch's run id and the job's store address, plus
  a token that the first rank to join the run draws and keeps in that store, which outlives a
  restart of the workers and a change of the nodes (`trainer.distributed.job_store`): two
  torchrun invocations with the same command line (run id ``none``, the same port) are two runs.
- Otherwise each process is its own run.
"""
from __future__ import annotations

import os
import uuid

from trainer.contracts.ray_worker import ray_placement

RUN_NAME_ENV = "LOCKSTEP_RUN_NAME"  # the user's own name for the run
_PROCESS_RUN_ID = f"process-{uuid.uuid4().hex[:12]}"
# One per process, never shared: tells this process from an earlier one that had the same pid
# (a container's pid 1 after a restart).
PROCESS_TOKEN = uuid.uuid4().hex
_JOB: list[str] = []  # the job store's address and the run's token, once this process joined it


def run_id() -> str:
    """This run's id (see the module's docstring)."""
    env = os.environ
    if env.get(RUN_NAME_ENV):
        return f"name-{env[RUN_NAME_ENV]}"
    ray = ray_placement()
    if ray is not None:
        return ray.run
    if env.get("SLURM_JOB_ID"):
        job = env["SLURM_JOB_ID"]
        if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
            job = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
        step = env.get("SLURM_STEP_ID", "")
        return f"slurm-{job}.{step}" if step else f"slurm-{job}"
    if env.get("TORCHELASTIC_RUN_ID"):
        if _JOB:
            return f"{env['TORCHELASTIC_RUN_ID']}@{_JOB[0]}/{_JOB[1]}"
        return f"{env['TORCHELASTIC_RUN_ID']}@{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}"
    return _PROCESS_RUN_ID


def has_scheduler_identity() -> bool:
    """Whether the run's id outlives its processes (a name, Ray Train, SLURM, torchrun): else it
    is this process's own, and tells no earlier run's files from another's."""
    names = (RUN_NAME_ENV, "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
    return any(os.environ.get(name) for name in names) or ray_placement() is not None


def attempt() -> int:
    """How often the launcher restarted (torchrun) or requeued (SLURM) this run: 0 at first
    (under Ray, which does not tell its workers the count, 1 for any restart)."""
    ray = ray_placement()
    if ray is not None:
        return int(ray.resumes)
    for name in ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def adopt_job(address: str, token: str) -> None:
    """The job store's ``host:port`` and the token kept there for this run (set once the process joins it)."""
    _JOB[:] = [address, token]
