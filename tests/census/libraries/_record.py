"""What every library-census script shares: the seed, the Trainer arguments of the run, and its record.

The driver (`tests.census.libraries.driver`) starts a script with two environment variables:
``LIBRARY_CENSUS_DEVICES`` (1 or 2: CPU processes, ``ddp`` on gloo for 2) and ``LIBRARY_CENSUS_OUT``
(where each rank writes its record, ``OUT.rank{N}``). Environment variables rather than arguments,
because some libraries parse the command line themselves. The scripts import this module from
their own folder (a script's folder is first on ``sys.path`` under ``python`` and under the runner).
"""
from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch


def seed(value: int = 0) -> None:
    """Seed Python's, NumPy's and torch's generators."""
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)


def devices() -> int:
    """How many CPU processes this run trains on."""
    return int(os.environ.get("LIBRARY_CENSUS_DEVICES", "1"))


def trainer_kwargs(**extra: Any) -> dict[str, Any]:
    """The Trainer arguments every census run shares but the accelerator: 1 or 2 processes, quiet (a
    script's own ``Trainer(...)`` names ``accelerator="cpu"`` itself)."""
    n = devices()
    kwargs: dict[str, Any] = {
        "devices": n, "strategy": "ddp" if n > 1 else "auto", "enable_progress_bar": False, "enable_model_summary": False,
    }
    kwargs.update(extra)
    return kwargs


def library_kwargs(**extra: Any) -> dict[str, Any]:
    """`trainer_kwargs` with ``accelerator="cpu"``, for a library that builds the Trainer itself."""
    return {"accelerator": "cpu", **trainer_kwargs(**extra)}


def plain(value: Any) -> Any:
    """``value`` with tensors, arrays and frames as CPU tensors, containers as lists and dicts."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, np.ndarray):
        return torch.as_tensor(np.ascontiguousarray(value))
    if hasattr(value, "to_numpy") and hasattr(value, "columns"):  # a pandas frame: its numeric columns
        numeric = value.select_dtypes("number")
        return {str(c): torch.as_tensor(numeric[c].to_numpy(dtype="float64")) for c in numeric.columns}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(type(value))


def save(trainer: Any, module: torch.nn.Module, predictions: Any = None, **extra: Any) -> None:
    """Write this rank's record: which Trainer ran, its global step, the parameters, the predictions."""
    # the framework's Trainer class, under a library's own subclass of it (scvi-tools' Trainer)
    kind = next((c for c in type(trainer).__mro__ if c.__module__.startswith(("lightning.", "pytorch_lightning.", "trainer."))),
                type(trainer))
    record = {
        "trainer": f"{kind.__module__}.{kind.__qualname__}",
        "global_step": int(trainer.global_step),
        "world_size": int(trainer.world_size),
        "params": {k: v.detach().cpu().clone() for k, v in module.state_dict().items()},
        "predictions": plain(predictions),
        **{k: plain(v) for k, v in extra.items()},
    }
    torch.save(record, f"{os.environ['LIBRARY_CENSUS_OUT']}.rank{int(trainer.global_rank)}")
