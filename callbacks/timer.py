"""`Timer`: stop training when a time budget is spent (the Trainer's ``max_time``)."""
from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING, Any, Callable

from callbacks.callback import Callback
from trainer.contracts.duration import parse_duration
from trainer.contracts.arguments import hint_misspelled_arguments

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView

_STAGES = ("train", "validate", "test", "predict")
# a hook (trainer, module) -> None; typed without arguments, as a Callable with them would lack the
# parameter names that mypy asks of an override of `Callback`'s hook
_StageHook = Callable[..., None]


def _clock_hook(stage: str, starts: bool) -> _StageHook:
    """`Timer`'s start (``starts``) or end hook of ``stage``: it notes the time on the timer's clock."""

    def hook(timer: Timer, trainer: TrainerView, module: ModuleView) -> None:
        timer._clock(stage, starts)

    return hook


class Timer(Callback):
    """Tracks the time spent in each stage and stops training once ``duration`` is spent.

    ``interval`` is ``"step"`` (checked after every training batch; the stop takes effect at the
    end of the accumulation window, with the epoch's end hooks) or ``"epoch"`` (checked at each
    epoch's end). With several processes the ranks agree at every check (one small all-reduce):
    when any rank's clock is up, every rank stops at the same step. Its ``state_dict`` holds the
    elapsed training time, so a resumed run continues the budget.
    """

    role = "timer"

    @hint_misspelled_arguments
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

    def _clock(self, stage: str, starts: bool) -> None:
        now = self._now()
        if starts:
            self._start[stage], self._end[stage] = now, None
        else:
            self._end[stage] = now

    on_train_start = _clock_hook("train", starts=True)
    on_train_end = _clock_hook("train", starts=False)
    on_validation_start = _clock_hook("validate", starts=True)
    on_validation_end = _clock_hook("validate", starts=False)
    on_test_start = _clock_hook("test", starts=True)
    on_test_end = _clock_hook("test", starts=False)
    on_predict_start = _clock_hook("predict", starts=True)
    on_predict_end = _clock_hook("predict", starts=False)

    def on_train_batch_end(self, trainer: TrainerView, pl_module: ModuleView, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.interval == "step" and self.duration is not None:
            self._check(trainer)

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if self.interval == "epoch" and self.duration is not None:
            self._check(trainer)

    def _check(self, trainer: TrainerView) -> None:
        up = self.time_elapsed("train") >= self.duration.total_seconds()  # type: ignore[union-attr]
        # every rank takes the same decision, so they all stop at the same step
        if trainer.world_size > 1:
            up = bool(trainer.strategy.reduce_boolean_decision(up, all=False))
        if not up:
            return
        trainer.request_stop()  # every rank is here: the agreed stop may end the epoch early
        if self.verbose and trainer.is_global_zero:
            print(f"[lockstep] Timer: max_time {self.duration} reached, stopping training.", flush=True)

    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in _STAGES}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._offset = float(state_dict.get("time_elapsed", {}).get("train", 0.0))
