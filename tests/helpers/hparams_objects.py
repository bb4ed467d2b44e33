"""Hyperparameter values that are objects, importable so a checkpoint can pickle them by name
(tests/checkpointing/test_hparams_objects.py)."""
from __future__ import annotations

from typing import Any


class Scaler:
    """A library's small settings object (pytorch-forecasting's ``output_transformer`` is one)."""

    unpickled = 0  # how many times one was rebuilt from a file: a weights-only load must rebuild none

    def __init__(self, center: float, scale: float, names: tuple[str, ...] = ()) -> None:
        self.center, self.scale, self.names = center, scale, names

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).unpickled += 1
        self.__dict__.update(state)

    def __eq__(self, other: object) -> bool:
        return type(other) is Scaler and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"Scaler(center={self.center}, scale={self.scale}, names={self.names})"
