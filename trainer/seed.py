"""Seeding every random number generator a training run touches."""
from __future__ import annotations

import functools
import os
import random
import warnings
from typing import Any

import torch
from trainer.contracts.user_line import user_stacklevel

_SEED_ENV = "LOCKSTEP_GLOBAL_SEED"


def set_torch_flags(deterministic: bool | str, benchmark: bool | None) -> None:
    """``Trainer(deterministic=True | "warn")``: torch's deterministic algorithms (``"warn"``: warn
    only). ``benchmark``: the value of ``torch.backends.cudnn.benchmark``, as Lightning sets it
    (None keeps the session's value, or False under ``deterministic``)."""
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=deterministic == "warn")
        if benchmark is None:
            benchmark = False
        elif benchmark:
            warnings.warn(
                "Trainer(deterministic=True, benchmark=True): torch ignores cudnn's deterministic mode "
                "while torch.backends.cudnn.benchmark is True.",
                stacklevel=user_stacklevel(),
            )
    if benchmark is not None:
        torch.backends.cudnn.benchmark = benchmark


def global_seed() -> int:
    """The seed of the training order: ``seed_everything``'s (every rank and launched worker
    sees it through ``$LOCKSTEP_GLOBAL_SEED``), 0 when nothing was seeded."""
    return int(os.environ.get(_SEED_ENV, 0))


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed Python's ``random``, NumPy (if installed) and torch (CPU and every CUDA device).

    With ``seed=None`` the value of ``$LOCKSTEP_GLOBAL_SEED`` is used, else 0. The seed is
    exported to that variable so processes started by the launcher seed identically.
    ``workers=True`` also exports ``LOCKSTEP_SEED_WORKERS=1``: the Trainer then gives every
    DataLoader with workers and no ``worker_init_fn`` one that seeds ``random``, NumPy and torch
    in each worker from the worker's seed and the global rank. Returns the seed used.
    """
    if seed is None:
        seed = global_seed()
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed_everything(seed=...) needs an int, got {type(seed).__name__}")
    max_seed = 2**32 - 1
    if not 0 <= seed <= max_seed:
        raise ValueError(f"seed must be in [0, {max_seed}] (NumPy's range), got {seed}")
    os.environ[_SEED_ENV] = str(seed)
    os.environ["LOCKSTEP_SEED_WORKERS"] = "1" if workers else "0"
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # numpy is optional
        pass
    else:
        np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed


def reset_seed() -> None:
    """Seed again as the last `seed_everything` did (its seed, its ``workers``); nothing where it was never called.

    Lightning's DDP and FSDP strategies do this as each run sets up its processes (``reset_seed``), which
    Lockstep's do under ``python -m trainer.as_lightning`` (trainer/strategies/process_group.py)."""
    if _SEED_ENV in os.environ:
        seed_everything(global_seed(), workers=os.environ.get("LOCKSTEP_SEED_WORKERS") == "1")


def worker_init_fn(worker_id: int, rank: int = 0) -> None:
    """Seed a DataLoader worker's ``random``, NumPy and torch from its own seed and the rank.

    The DataLoader already gives each worker ``base_seed + worker_id`` (``base_seed`` drawn anew
    every epoch), but ranks seeded alike draw the same ``base_seed``: without the rank term every
    rank would apply the same random augmentations to its shard.
    """
    seed = (torch.initial_seed() + 1_000_003 * rank) % 2**32
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:
        return
    np.random.seed(seed)


def install_worker_seeding(loader: Any, rank: int) -> None:
    """With ``seed_everything(workers=True)``, give a loader without a ``worker_init_fn`` ours."""
    if os.environ.get("LOCKSTEP_SEED_WORKERS") != "1":
        return
    if getattr(loader, "num_workers", 0) > 0 and getattr(loader, "worker_init_fn", "absent") is None:
        loader.worker_init_fn = functools.partial(worker_init_fn, rank=rank)
