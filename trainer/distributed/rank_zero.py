"""Rank-aware helpers: run or print on global rank 0 only."""
from __future__ import annotations

import functools
import logging
import os
import warnings
from typing import Any, Callable, TypeVar

_log = logging.getLogger("lockstep")
F = TypeVar("F", bound=Callable[..., Any])


def current_global_rank() -> int:
    """This process's global rank: from the process group once it exists, else the launcher's env."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    for var in ("RANK", "SLURM_PROCID"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


def rank_zero_only(fn: F) -> F:
    """Decorator: call ``fn`` on global rank 0 only; other ranks get ``None``."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if current_global_rank() == 0:
            return fn(*args, **kwargs)
        return None

    return wrapped  # type: ignore[return-value]


def rank_zero_info(message: str) -> None:
    """Log ``message`` at INFO level (and print it) on global rank 0 only."""
    if current_global_rank() == 0:
        _log.info(message)
        print(message, flush=True)


def rank_zero_warn(message: str, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """Issue a warning on global rank 0 only."""
    if current_global_rank() == 0:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
