"""`Timer`: stop training when a time budget is spent (the Trainer's ``max_time``)."""
from __future__ import annotations

import datetime
import re
import time
from typing import TYPE_CHECKING, Any

from callbacks.callback import Callback

if TYPE_CHECKING:
    from trainer import Trainer, TrainModule

_STAGES = ("train", "validate", "test", "predict")
_DURATION_KEYS = ("days", "hours", "minutes", "seconds", "milliseconds", "microseconds", "weeks")


def parse_duration(name: str, value: Any) -> datetime.timedelta | None:
    """A duration from ``"DD:HH:MM:SS"``, a dict of `datetime.timedelta` keywords or a timedelta.

    ``None`` stays ``None``. A wrong type is a `TypeError`, a bad value a `ValueError`, both naming
    ``name``.
    """
    if value is None or isinstance(value, datetime.timedelta):
        duration = value
    elif isinstance(value, str):
        match = re.fullmatch(r"(\d+):(\d{1,2}):(\d{1,2}):(\d{1,2})", value.strip())
        if match is None:
            raise ValueError(f"{name} as a string must be 'DD:HH:MM:SS' (e.g. '00:12:00:00'), got {value!r}")
        days, hours, minutes, seconds = map(int, match.groups())
        duration = datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    elif isinstance(value, dict):
        unknown = sorted(str(k) for k in value if k not in _DURATION_KEYS)
        if unknown:
            raise ValueError(f"{name} as a dict takes the keys {list(_DURATION_KEYS)}, got unknown {unknown}")
        for key, amount in value.items():
            if isinstance(amount, bool) or not isinstance(amount, (int, float)):
                raise TypeError(f"{name}[{key!r}] must be a number, got {amount!r}")
        duration = datetime.timedelta(**value)
    else:
        raise TypeError(
            f"{name} must be None, a 'DD:HH:MM:SS' string, a dict like {{'hours': 1}} or a "
            f"datetime.timedelta, got {value!r}"
        )
    if duration is not None and duration < datetime.timedelta(0):
        raise ValueError(f"{name} must not be negative, got {duration}")
    return duration


class Timer(Callback):
    """Tracks the time spent in each stage and stops training once ``duration`` is spent.

    ``interval`` is ``"step"`` (checked after every training batch; the stop takes effect at the
    end of the accumulation window, with the epoch's end hooks) or ``"epoch"`` (checked at each
    epoch's end). With several processes the ranks agree at every check (one small all-reduce):
    when any rank's clock is up, every rank stops at the same step. Its ``state_dict`` holds the
    elapsed training time, so a resumed run continues the budget.
    """

    def __init__(
        self, duration: str | datetime.timedelta | dict[str, int] | None = None, interval: str = "step", verbose: bool = True
    ) -> None:
        self.duration = parse_duration("duration", duration)
        if interval not in ("step", "epoch"):
            raise ValueError(f"Timer interval must be 'step' or 'epoch', got {interval!r}")
        if not isinstance(verbose, bool):
            raise TypeError(f"Timer verbose must be a bool, got {verbose!r}")
        self.interval = interval
        self.verbose = verbose
        self._start: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._end: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._offset = 0.0  # training seconds spent before a resume

    @staticmethod
    def _now() -> float:
        return time.monotonic()

    def start_time(self, stage: str = "train") -> float | None:
        """When ``stage`` last started (monotonic seconds), or None."""
        return self._start[stage]

    def end_time(self, stage: str = "train") -> float | None:
        """When ``stage`` last ended (monotonic seconds), or None while it runs."""
        return self._end[stage]

    def time_elapsed(self, stage: str = "train") -> float:
        """Seconds spent in ``stage`` (training includes the time before a resume)."""
        start, end = self._start[stage], self._end[stage]
        offset = self._offset if stage == "train" else 0.0
        if start is None:
            return offset
        return offset + ((end if end is not None else self._now()) - start)

    def time_remaining(self, stage: str = "train") -> float | None:
        """Seconds left of ``duration`` for ``stage`` (None without a duration)."""
        if self.duration is None:
            return None
        return self.duration.total_seconds() - self.time_elapsed(stage)

    def _begin(self, stage: str) -> None:
        self._start[stage], self._end[stage] = self._now(), None

    def _finish(self, stage: str) -> None:
        self._end[stage] = self._now()

    def on_train_start(self, trainer: Trainer, module: TrainModule) -> None:
        self._begin("train")

    def on_train_end(self, trainer: Trainer, module: TrainModule) -> None:
        self._finish("train")

    def on_validation_start(self, trainer: Trainer, module: TrainModule) -> None:
        self._begin("validate")

    def on_validation_end(self, trainer: Trainer, module: TrainModule) -> None:
        self._finish("validate")

    def on_test_start(self, trainer: Trainer, module: TrainModule) -> None:
        self._begin("test")

    def on_test_end(self, trainer: Trainer, module: TrainModule) -> None:
        self._finish("test")

    def on_predict_start(self, trainer: Trainer, module: TrainModule) -> None:
        self._begin("predict")

    def on_predict_end(self, trainer: Trainer, module: TrainModule) -> None:
        self._finish("predict")

    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.interval == "step" and self.duration is not None:
            self._check(trainer)

    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule) -> None:
        if self.interval == "epoch" and self.duration is not None:
            self._check(trainer)

    def _check(self, trainer: Trainer) -> None:
        up = self.time_elapsed("train") >= self.duration.total_seconds()  # type: ignore[union-attr]
        # every rank takes the same decision, so they all stop at the same step
        if trainer.world_size > 1:
            up = bool(trainer.strategy.reduce_boolean_decision(up, all=False))
        if not up:
            return
        trainer.should_stop = True
        if trainer.world_size > 1:
            trainer.fit_loop.agree_on_stop()  # a stop every rank agreed on may end the epoch early
        if self.verbose and trainer.is_global_zero:
            print(f"[lockstep] Timer: max_time {self.duration} reached, stopping training.", flush=True)

    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in _STAGES}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._offset = float(state_dict.get("time_elapsed", {}).get("train", 0.0))
