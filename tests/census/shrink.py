"""Harness-side shrinking: patches applied in the run's process before a vendored script starts.

Each names what it changes; none edits a vendored file. `apply(names)` runs the named ones (a
project's ``shrink``) and always `_no_worker_processes` (two frameworks side by side on a small
machine: data-loading workers would only cost time, and both sides read the same items either way).
"""
from __future__ import annotations

from typing import Any, Callable

from tests.census.fake_data import install_torchvision


def _no_worker_processes() -> None:
    import torch.utils.data

    original = torch.utils.data.DataLoader.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["num_workers"] = 0
        kwargs.pop("persistent_workers", None)
        kwargs.pop("prefetch_factor", None)
        original(self, *args, **kwargs)

    torch.utils.data.DataLoader.__init__ = __init__  # type: ignore[method-assign]


def _optuna_two_seeded_trials() -> None:
    """``study.optimize(n_trials=100, timeout=600)`` -> 2 trials, sampled by a seeded sampler."""
    import optuna

    create_study, optimize = optuna.create_study, optuna.study.Study.optimize

    def seeded_create_study(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("sampler", optuna.samplers.RandomSampler(seed=0))
        return create_study(*args, **kwargs)

    def two_trials(self: Any, func: Any, n_trials: int | None = None, timeout: float | None = None, **kwargs: Any) -> None:
        optimize(self, func, n_trials=2, timeout=None, **kwargs)

    optuna.create_study = seeded_create_study
    optuna.study.Study.optimize = two_trials  # type: ignore[method-assign]


SHRINKS: dict[str, Callable[[], None]] = {
    "torchvision": install_torchvision,
    "optuna": _optuna_two_seeded_trials,
}


def apply(names: tuple[str, ...]) -> None:
    """Run the shrinks ``names`` (keys of `SHRINKS`), after the data loaders' worker patch."""
    _no_worker_processes()
    for name in names:
        SHRINKS[name]()
