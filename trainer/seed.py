"""Seeding every random number generator a training run touches."""
from __future__ import annotations

import os
import random

import torch

_SEED_ENV = "LOCKSTEP_GLOBAL_SEED"


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed Python's ``random``, NumPy (if installed) and torch (CPU and every CUDA device).

    With ``seed=None`` the value of ``$LOCKSTEP_GLOBAL_SEED`` is used, else 0. The seed is
    exported to that variable so processes started by the launcher seed identically.
    ``workers=True`` also exports ``LOCKSTEP_SEED_WORKERS=1`` (each DataLoader worker is then
    seeded from the base seed, its worker id and the global rank). Returns the seed used.
    """
    if seed is None:
        seed = int(os.environ.get(_SEED_ENV, 0))
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


def worker_init_fn(worker_id: int, rank: int = 0) -> None:
    """Seed a DataLoader worker from the global seed, its id and the global rank."""
    base = int(os.environ.get(_SEED_ENV, 0))
    seed = (base + 1_000_003 * rank + worker_id) % 2**32
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:
        return
    np.random.seed(seed)
