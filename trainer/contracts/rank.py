"""The one rank detection: this process's global rank, before and after the process group exists.

Before the process group is up (a logger used before ``setup``, a rank-zero print at import) the
rank comes from the launcher's environment by the rules `detect_cluster_environment` uses:
torchrun's variables win, then an ``srun`` task's ``SLURM_PROCID``, else a single process (0).
"""
from __future__ import annotations

import os
from typing import Literal, Mapping

# Variables whose presence means "launched with env:// rendezvous" (torchrun and friends).
TORCHRUN_MARKERS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
# SLURM gives the batch, extern and interactive steps ids from 0xFFFFFFF0 upwards; processes in
# those steps were not started by `srun` for this program.
_FIRST_SPECIAL_STEP_ID = 0xFFFFFFF0


def launch_source(environ: Mapping[str, str]) -> Literal["torchrun", "slurm", "single"]:
    """Who started this process: torchrun (or any env:// launcher), an ``srun`` task, or nobody."""
    if any(name in environ for name in TORCHRUN_MARKERS):
        return "torchrun"
    return "slurm" if is_srun_task(environ) else "single"


def is_srun_task(environ: Mapping[str, str]) -> bool:
    """Whether this process is a task of an ``srun`` step (not of a batch or interactive step)."""
    if "SLURM_PROCID" not in environ or "SLURM_NTASKS" not in environ:
        return False
    step = environ.get("SLURM_STEP_ID", environ.get("SLURM_STEPID", "")).strip()
    return step.isdigit() and int(step) < _FIRST_SPECIAL_STEP_ID


def env_str(environ: Mapping[str, str], name: str, hint: str = "") -> str:
    """The non-empty value of ``environ[name]``; a ``ValueError`` naming it (and ``hint``) if unset."""
    value = environ.get(name, "").strip()
    if not value:
        raise ValueError(f"{name} is not set. {hint}".strip())
    return value


def env_int(environ: Mapping[str, str], name: str, minimum: int = 0, hint: str = "") -> int:
    """``environ[name]`` as an int >= ``minimum``; a ``ValueError`` naming it otherwise."""
    raw = env_str(environ, name, hint)
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer. {hint}".strip()) from None
    if value < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum}. {hint}".strip())
    return value


def detect_global_rank(environ: Mapping[str, str] = os.environ) -> int:
    """This process's global rank by the rules of `detect_cluster_environment`, reading only the
    rank variable (``RANK`` under torchrun, ``SLURM_PROCID`` for an ``srun`` task, else 0), so
    rank-zero helpers also work where the rest of a launch's variables are not needed or set."""
    source = launch_source(environ)
    if source == "single":
        return 0
    return env_int(environ, "RANK" if source == "torchrun" else "SLURM_PROCID")


def current_global_rank() -> int:
    """This process's global rank: from the process group once it exists, else from the
    launcher's environment (`detect_global_rank`)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return detect_global_rank()
