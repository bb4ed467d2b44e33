"""Rank-aware helpers: run or print on global rank 0 only."""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, TypeVar

from trainer.contracts.rank import current_global_rank

__all__ = ["current_global_rank", "rank_zero_info", "rank_zero_only", "rank_zero_warn"]

F = TypeVar("F", bound=Callable[..., Any])


def rank_zero_only(fn: F) -> F:
    """Decorator: call ``fn`` on global rank 0 only; other ranks get ``None``."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if current_global_rank() == 0:
            return fn(*args, **kwargs)
        return None

    return wrapped  # type: ignore[return-value]


def rank_zero_info(message: str) -> None:
    """Print ``message`` to stdout (flushed) on global rank 0 only, like Lockstep's own messages."""
    if current_global_rank() == 0:
        print(message, flush=True)


def rank_zero_warn(message: str, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """Issue a warning on global rank 0 only."""
    if current_global_rank() == 0:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
