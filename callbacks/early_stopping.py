"""`EarlyStopping`: stop ``fit`` when a monitored metric stops improving."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

from callbacks._utils import (
    _monitor_value,
    _rank_zero_print,
    _to_float,
    _validate_mode,
    _ValidationMetricTracker,
    _worst,
)
from callbacks.callback import Callback
from trainer.contracts.arguments import check_bool, check_int, check_number, hint_misspelled_arguments
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


class EarlyStopping(Callback):
    """Sets ``trainer.should_stop`` when ``monitor`` has not improved for ``patience`` checks.

    Args:
        monitor: Metric to watch (a key of ``trainer.callback_metrics``).
        min_delta: An improvement must beat the best value by more than this.
        patience: Checks without improvement before stopping. A check happens at each
            validation end when ``monitor`` is a validation metric, else at each train epoch end.
        verbose: Print each improvement and the reason for stopping.
        mode: ``"min"`` or ``"max"``: which direction is an improvement.
        strict: Raise when ``monitor`` is missing (``False``: warn and skip the check).
        check_finite: Stop as soon as the value is NaN or infinite.
        stopping_threshold: Stop once the value is better than this.
        divergence_threshold: Stop once the value is worse than this.
        check_on_train_epoch_end: Check at train epoch end (``True``) or at validation end
            (``False``). ``None``: decided from where ``monitor`` is logged.
        log_rank_zero_only: With ``verbose``, print from global rank 0 only; otherwise every rank
            prints, its rank in front, when there are several.

    Every rank makes the same decision: the value is averaged over ranks before it is compared
    (so values logged without ``sync_dist`` are synced here), and the final decision is agreed
    with ``reduce_boolean_decision``. A rank that stopped alone would leave the others waiting in
    a collective forever.
    """

    role = "early_stopping"
    monitors_metrics = True

    @hint_misspelled_arguments
    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        log_rank_zero_only: bool = False,
    ) -> None:
        if not isinstance(monitor, str):
            raise TypeError(f"EarlyStopping(monitor={monitor!r}): expected the name of a logged metric.")
        if not monitor:
            raise ValueError(f"EarlyStopping(monitor={monitor!r}): expected the name of a logged metric.")
        _validate_mode(mode, "EarlyStopping")
        check_int("EarlyStopping(patience)", patience, 0)
        check_number("EarlyStopping(min_delta)", min_delta, minimum=0)
        # a NaN threshold compares false with every value: the check would silently never fire
        for arg, threshold in (
            ("stopping_threshold", stopping_threshold),
            ("divergence_threshold", divergence_threshold),
        ):
            check_number(f"EarlyStopping({arg})", threshold, allow_none=True)
        for arg, flag in (
            ("check_finite", check_finite), ("verbose", verbose), ("strict", strict),
            ("log_rank_zero_only", log_rank_zero_only),
        ):
            check_bool(f"EarlyStopping({arg})", flag)
        check_bool("EarlyStopping(check_on_train_epoch_end)", check_on_train_epoch_end, allow_none=True)
        self.monitor = monitor
        self.patience = patience
        self.mode = mode
        self.min_delta = float(min_delta)
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.verbose = verbose
        self.strict = strict
        self.check_on_train_epoch_end = check_on_train_epoch_end
        self.log_rank_zero_only = log_rank_zero_only
        self.wait_count = 0
        self.stopped_epoch = 0
        self.best_score: float = _worst(mode)
        self.stopping_reason: str | None = None
        self._in_fit = False
        self._tracker = _ValidationMetricTracker(monitor)

    @property
    def state_key(self) -> str:
        return f"EarlyStopping{{monitor={self.monitor!r}, mode={self.mode!r}}}"

    # -- hooks ------------------------------------------------------------------------------
    def on_fit_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self._in_fit = True

    def on_fit_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self._in_fit = False

    def teardown(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        self._in_fit = False

    def on_validation_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if self._in_fit:
            self._tracker.on_validation_start(trainer)

    def on_validation_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if not self._in_fit or trainer.sanity_checking:
            return
        from_validation = self._tracker.on_validation_end(trainer)
        if self.check_on_train_epoch_end is False or (self.check_on_train_epoch_end is None and from_validation):
            self._check(trainer)

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if not self._in_fit or self.check_on_train_epoch_end is False:
            return
        if self.check_on_train_epoch_end is None and self._tracker.is_validation_metric:
            return
        if self.monitor not in trainer.callback_metrics and self._tracker.missing_is_expected(trainer):
            return  # a validation metric before the first validation run
        self._check(trainer)

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Wait count, best score and where it stopped."""
        return {
            "wait_count": self.wait_count,
            "stopped_epoch": self.stopped_epoch,
            "best_score": self.best_score,
            "patience": self.patience,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        self.wait_count = int(state_dict["wait_count"])
        self.stopped_epoch = int(state_dict["stopped_epoch"])
        self.best_score = float(state_dict["best_score"])
        self.patience = int(state_dict.get("patience", self.patience))

    # -- decision ---------------------------------------------------------------------------
    def _check(self, trainer: TrainerView) -> None:
        import torch

        # same key set on every rank (same logging code), so every rank raises together
        if not self.strict and self.monitor not in trainer.callback_metrics:
            available = ", ".join(sorted(trainer.callback_metrics)) or "(none)"
            warnings.warn(
                f"EarlyStopping(monitor={self.monitor!r}, strict=False): {self.monitor!r} is not in the "
                f"logged metrics (available: {available}); this check is skipped.",
                RuntimeWarning,
                stacklevel=user_stacklevel(),
            )
            return
        value = _monitor_value(trainer.callback_metrics, self.monitor, "EarlyStopping")
        local = (
            value.detach().float().reshape(())
            if isinstance(value, torch.Tensor)
            else torch.tensor(float(value))
        )
        # one value everywhere: every rank then walks the same state machine
        current = _to_float(trainer.strategy.reduce(local.to(trainer.strategy.root_device), op="mean"))
        should_stop, reason = self._evaluate(current)
        # belt and braces: any rank stopping stops all
        should_stop = bool(trainer.strategy.reduce_boolean_decision(should_stop, all=False))
        if should_stop:
            trainer.should_stop = True
            self.stopped_epoch = trainer.current_epoch
            self.stopping_reason = reason or "another rank decided to stop"
        if self.verbose and reason:
            if self.log_rank_zero_only or trainer.world_size == 1:
                _rank_zero_print(trainer, f"EarlyStopping: {reason}")
            else:
                print(f"[rank: {trainer.global_rank}] EarlyStopping: {reason}", flush=True)

    def _evaluate(self, current: float) -> tuple[bool, str | None]:
        better = (lambda a, b: a < b) if self.mode == "min" else (lambda a, b: a > b)
        if self.check_finite and not math.isfinite(current):
            return True, (
                f"Monitored metric {self.monitor} = {current} is not finite. Previous best value was "
                f"{self.best_score:.5g}. Signaling Trainer to stop."
            )
        if self.stopping_threshold is not None and better(current, self.stopping_threshold):
            return True, (
                f"Stopping threshold reached: {self.monitor} = {current:.5g} "
                f"{'<' if self.mode == 'min' else '>'} {self.stopping_threshold}. Signaling Trainer to stop."
            )
        if self.divergence_threshold is not None and better(self.divergence_threshold, current):
            return True, (
                f"Divergence threshold reached: {self.monitor} = {current:.5g} "
                f"{'>' if self.mode == 'min' else '<'} {self.divergence_threshold}. "
                "Signaling Trainer to stop."
            )
        delta = -self.min_delta if self.mode == "min" else self.min_delta
        if better(current - delta, self.best_score):
            improvement = (
                f"improved by {abs(self.best_score - current):.5g} >= min_delta = {self.min_delta}"
                if math.isfinite(self.best_score)
                else "improved"
            )
            self.best_score = current
            self.wait_count = 0
            return False, f"Metric {self.monitor} {improvement}. New best score: {current:.5g}"
        self.wait_count += 1
        if self.wait_count >= self.patience:
            return True, (
                f"Monitored metric {self.monitor} did not improve in the last {self.wait_count} records. "
                f"Best score: {self.best_score:.5g}. Signaling Trainer to stop."
            )
        return False, None
