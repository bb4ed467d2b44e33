"""What the Trainer is running: the `Stage` enum and `TrainerState` (``trainer.state``)."""
from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.loops.evaluation_loop import EvaluationLoop


class Stage(str, enum.Enum):
    """A Trainer run's stage. A ``str`` enum: ``trainer.state.stage == "fit"`` keeps working."""

    FIT = "fit"
    VALIDATE = "validate"
    TEST = "test"
    PREDICT = "predict"
    SANITY_CHECK = "sanity_check"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass
class TrainerState:
    """What the Trainer is doing: ``stage`` is a `Stage` (a str: "fit", "validate", ...) or None."""

    stage: Stage | None = None
    failing: bool = False  # the run raised (set before on_exception, kept until the next run)
    evaluation: EvaluationLoop | None = None  # the latest EvaluationLoop (errors name its batch)
