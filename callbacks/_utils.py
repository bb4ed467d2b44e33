"""Private helpers shared by the built-in callbacks and loggers (not public API)."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import warnings
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from trainer.contracts import storage
from trainer.contracts.errors import MonitorKeyError
from trainer.contracts.rank import current_global_rank
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.contracts.protocols import TrainerView

T = TypeVar("T")
_VERSION_DIR = re.compile(r"^version_(\d+)$")


# -- ranks ------------------------------------------------------------------------------------
def _rank_zero_print(trainer: TrainerView, message: str) -> None:
    """Print ``message`` once, from global rank 0."""
    if trainer.is_global_zero:
        print(message, flush=True)


def _decided_on_rank_zero(trainer: TrainerView, decide: Callable[[], T], owner: str) -> T:
    """``decide()`` on global rank 0, broadcast: every rank gets its result, or fails with its error
    (rank 0 with the error itself, the others with one naming it: a `MonitorKeyError` as one)."""
    decision: T | _Failed | None = None  # the result, or rank 0's error
    error: BaseException | None = None
    if trainer.is_global_zero:
        try:
            decision = decide()
        except Exception as exc:  # noqa: BLE001 - must reach the other ranks before raising
            error = exc
            decision = _Failed(type(exc).__name__, str(exc))
    if trainer.world_size > 1:
        decision = trainer.strategy.broadcast(decision, src=0)
    if error is not None:
        raise error
    if isinstance(decision, _Failed):
        raise (MonitorKeyError if decision.kind == MonitorKeyError.__name__ else RuntimeError)(
            f"{owner} failed on global rank 0: {decision.message}"
        )
    assert decision is not None
    return decision


@dataclasses.dataclass(frozen=True)
class _Failed:
    """Rank 0's error, as the other ranks receive it: its type's name and its message."""

    kind: str
    message: str


def _rank_zero_warn(message: str) -> None:
    """Warn once per run, from global rank 0 (every rank reaches the same conclusion), at the user's line."""
    if current_global_rank() == 0:
        warnings.warn(message, stacklevel=user_stacklevel())


# -- log directories --------------------------------------------------------------------------
def _next_version(root: str) -> int:
    """One more than the highest ``version_N`` directory under ``root`` (0 if there is none)."""
    try:
        names = storage.listdir(root)
    except FileNotFoundError:
        return 0
    versions = [
        int(m.group(1))
        for m in map(_VERSION_DIR.match, names)
        if m and storage.isdir(storage.join(root, m.group(0)))
    ]
    return max(versions) + 1 if versions else 0


# In a version directory: the id of the run that writes there (a restart writes on only in its own).
RUN_FILE = ".lockstep-run"


def _version_of_run(root: str, run: str) -> int | None:
    """The newest ``version_N`` under ``root`` whose run file names ``run`` (None: no such version)."""
    for version in range(_next_version(root) - 1, -1, -1):
        try:
            owner = storage.read_bytes(storage.join(root, f"version_{version}", RUN_FILE)).decode().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if owner == run:
            return version
    return None


def _version_dir_name(version: int | str) -> str:
    return version if isinstance(version, str) else f"version_{version}"


def _validate_version(version: Any) -> None:
    if version is None or isinstance(version, str):
        return
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"`version` must be None, a non-negative int or a str, got {version!r}.")
    if version < 0:
        raise ValueError(f"`version` must be None, a non-negative int or a str, got {version!r}.")


# -- metric values ----------------------------------------------------------------------------
def _to_float(value: Any) -> float:
    """A Python float from a float, int, 0-d/1-element tensor or numpy scalar (syncs a device tensor)."""
    if hasattr(value, "item"):
        return float(value.item())
    return float(value)


def _flat_metrics(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Floats keyed by name, a dict of scalars as ``key/sub_key``; ``prefix`` joined with ``-`` as Lightning does."""
    head = f"{prefix}-" if prefix else ""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, Mapping):
            out.update({f"{head}{key}/{k}": _to_float(v) for k, v in value.items()})
        else:
            out[f"{head}{key}"] = _to_float(value)
    return out


def _flatten_hparams(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested dicts and turn values TensorBoard cannot show into strings."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten_hparams(value, prefix=f"{name}/"))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        elif hasattr(value, "numel") and value.numel() == 1:
            out[name] = _to_float(value)
        else:
            out[name] = str(value)
    return out


def _validate_mode(mode: str, owner: str) -> None:
    if not isinstance(mode, str):
        raise TypeError(f"{owner}(mode={mode!r}) is not supported: use 'min' or 'max'.")
    if mode not in ("min", "max"):
        raise ValueError(f"{owner}(mode={mode!r}) is not supported: use 'min' or 'max'.")


def _monitor_value(metrics: Mapping[str, Any], monitor: str, owner: str) -> Any:
    """``metrics[monitor]``, or an error that lists what is available."""
    if monitor in metrics:
        return metrics[monitor]
    available = ", ".join(sorted(metrics)) or "(none)"
    raise MonitorKeyError(
        f"{owner}(monitor={monitor!r}) could not find {monitor!r} in the logged metrics. "
        f"Available keys: {available}. Log it with `self.log({monitor!r}, value)` in your module."
    )


def _worst(mode: str) -> float:
    return math.inf if mode == "min" else -math.inf


class _ValidationMetricTracker:
    """Tells whether the monitored metric comes from validation.

    Callbacks that monitor a validation metric must act at validation end (validation can run
    mid-epoch or every n epochs); ones that monitor a training metric must act at train epoch
    end, when its epoch mean is final. A metric is a validation metric once a validation run
    added or changed it. All ranks agree on the answer (one ``reduce_boolean_decision`` per
    validation until it is known), because the answer decides when collectives happen.
    """

    def __init__(self, monitor: str) -> None:
        self.monitor = monitor
        self.is_validation_metric = False
        self.validation_ran = False
        self._before: float | None = None

    def on_validation_start(self, trainer: TrainerView) -> None:
        if self.is_validation_metric or trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        self._before = None if value is None else _to_float(value)

    def on_validation_end(self, trainer: TrainerView) -> bool:
        """Record this (non sanity-check) validation run; True if the metric comes from validation."""
        if trainer.sanity_checking:
            return False
        self.validation_ran = True
        if self.is_validation_metric:
            return True
        value = trainer.callback_metrics.get(self.monitor)
        changed = value is not None and (self._before is None or _to_float(value) != self._before)
        self.is_validation_metric = bool(trainer.strategy.reduce_boolean_decision(changed, all=False))
        return self.is_validation_metric

    def missing_is_expected(self, trainer: TrainerView) -> bool:
        """A validation metric may legitimately be absent before the first validation run."""
        if self.validation_ran:
            return False
        num_val = trainer.num_val_batches
        counts = list(num_val) if isinstance(num_val, (list, tuple)) else [num_val]
        return any(n != 0 for n in counts)  # None: a loader without a length


def _format_duration(seconds: float) -> str:
    """``mm:ss`` or ``h:mm:ss``, like tqdm."""
    seconds = int(max(seconds, 0.0))
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"
