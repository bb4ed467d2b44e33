"""What the Trainer is running: the `Stage` enum, `TrainerState`, and the one table of per-stage settings."""
from __future__ import annotations

import dataclasses
import enum
from typing import Any



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
    evaluation: Any = None  # the latest EvaluationLoop (errors name its batch)


@dataclasses.dataclass(frozen=True)
class EvaluationSettings:
    """What an evaluation stage calls and reads: its step, hooks, loader hook and batch limit."""

    name: str  # how messages name the stage's data ("the validation dataloader")
    step: str  # the module's step method
    loader_hook: str  # the module's dataloader method
    limit: str  # the Trainer's limit_*_batches argument
    limit_label: str  # how errors about that limit name the stage
    start: str  # hooks, in the order the evaluation loop calls them
    epoch_start: str
    batch_start: str
    batch_end: str
    epoch_end: str
    end: str
    model_eval: str  # the module hook that puts it in eval mode before the run
    model_train: str | None  # the one that undoes it (None: the module's modes are restored)


def _settings(stage: str, short: str, model_train: bool = True) -> EvaluationSettings:
    """The settings of an evaluation stage, by Lightning's naming: hooks ``on_<stage>_*``, step
    ``<stage>_step``, loader hook ``<short>_dataloader``, limit ``limit_<short>_batches``."""
    hook = f"on_{stage}_"
    return EvaluationSettings(
        name=stage,
        step=f"{stage}_step",
        loader_hook=f"{short}_dataloader",
        limit=f"limit_{short}_batches",
        limit_label=short,
        start=f"{hook}start",
        epoch_start=f"{hook}epoch_start",
        batch_start=f"{hook}batch_start",
        batch_end=f"{hook}batch_end",
        epoch_end=f"{hook}epoch_end",
        end=f"{hook}end",
        model_eval=f"{hook}model_eval",
        model_train=f"{hook}model_train" if model_train else None,
    )


_VALIDATION = _settings("validation", "val")

EVALUATION: dict[Stage, EvaluationSettings] = {
    Stage.VALIDATE: _VALIDATION,
    Stage.SANITY_CHECK: _VALIDATION,
    Stage.TEST: _settings("test", "test"),
    # Lightning never calls on_predict_model_train: the module's modes are restored instead.
    Stage.PREDICT: _settings("predict", "predict", model_train=False),
}
