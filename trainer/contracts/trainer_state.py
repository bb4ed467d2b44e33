"""What the Trainer is running: the `Stage` enum and `TrainerState` (``trainer.state``), and
Lightning's names for the same values (`TrainerFn`, `RunningStage`), which libraries compare with
``trainer.state.fn`` and ``trainer.state.stage``."""
from __future__ import annotations

import dataclasses
import enum
from typing import Protocol


class Stage(str, enum.Enum):
    """A Trainer call (``fit``, ``validate``, ``test``, ``predict``) or a part of one (``train``,
    ``sanity_check``, a fit's ``validate``). A ``str`` enum: ``trainer.state.fn == "fit"`` works."""

    FIT = "fit"
    TRAIN = "train"
    VALIDATE = "validate"
    TEST = "test"
    PREDICT = "predict"
    SANITY_CHECK = "sanity_check"

    def __str__(self) -> str:
        return self.value


class TrainerFn(str, enum.Enum):
    """Lightning's names for ``trainer.state.fn`` (equal to the `Stage` of the same value)."""

    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(str, enum.Enum):
    """Lightning's names for ``trainer.state.stage`` (equal to the `Stage` of the same value)."""

    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def evaluating(self) -> bool:
        """Whether this is a stage of evaluation (sanity check, validation, test), as Lightning's."""
        return self in (RunningStage.SANITY_CHECKING, RunningStage.VALIDATING, RunningStage.TESTING)


class EvaluationRun(Protocol):
    """A validation, test or prediction run, as `TrainerState` keeps the latest
    (`trainer.loops.evaluation_loop.EvaluationLoop`)."""

    @property
    def stage(self) -> Stage: ...
    @property
    def within_fit(self) -> bool: ...  # a fit's validation or sanity check
    @property
    def log_step(self) -> int | None: ...  # the loggers' step a fit's validation logs at
    @property
    def dataloader_idx(self) -> int: ...
    @property
    def batch_idx(self) -> int | None: ...  # the batch being loaded or run (None: outside the batches)

    def position(self) -> str: ...  # the batch running, for error messages


@dataclasses.dataclass
class TrainerState:
    """What the Trainer is doing, as Lightning's ``trainer.state``: ``fn`` is the call (`Stage.FIT`,
    ``VALIDATE``, ``TEST``, ``PREDICT``; kept after it ends), ``stage`` the part running now
    (`Stage.TRAIN`, ``SANITY_CHECK`` or ``VALIDATE`` in a fit; the call's own stage otherwise;
    None between calls)."""

    fn: Stage | None = None
    stage: Stage | None = None
    failing: bool = False  # the run raised (set before on_exception, kept until the next run)
    interrupted: bool = False  # ... by a KeyboardInterrupt (Lightning's ``trainer.interrupted``)
    evaluation: EvaluationRun | None = None  # the latest EvaluationLoop (errors name its batch)

    def fail(self, exc: BaseException) -> None:
        """The run raised ``exc``: from here on nothing may wait in a collective."""
        self.failing = True
        self.interrupted = isinstance(exc, KeyboardInterrupt)

    def start(self, fn: Stage) -> None:
        """A call begins: a fit starts in its training stage, as Lightning's."""
        self.fn = fn
        self.stage = Stage.TRAIN if fn == Stage.FIT else fn
