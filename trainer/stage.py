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


_VALIDATION = EvaluationSettings(
    name="validation",
    step="validation_step",
    loader_hook="val_dataloader",
    limit="limit_val_batches",
    limit_label="val",
    start="on_validation_start",
    epoch_start="on_validation_epoch_start",
    batch_start="on_validation_batch_start",
    batch_end="on_validation_batch_end",
    epoch_end="on_validation_epoch_end",
    end="on_validation_end",
    model_eval="on_validation_model_eval",
    model_train="on_validation_model_train",  # as in Lightning
)

EVALUATION: dict[Stage, EvaluationSettings] = {
    Stage.VALIDATE: _VALIDATION,
    Stage.SANITY_CHECK: _VALIDATION,
    Stage.TEST: EvaluationSettings(
        name="test",
        step="test_step",
        loader_hook="test_dataloader",
        limit="limit_test_batches",
        limit_label="test",
        start="on_test_start",
        epoch_start="on_test_epoch_start",
        batch_start="on_test_batch_start",
        batch_end="on_test_batch_end",
        epoch_end="on_test_epoch_end",
        end="on_test_end",
    model_eval="on_test_model_eval",
    model_train="on_test_model_train",  # as in Lightning
    ),
    Stage.PREDICT: EvaluationSettings(
        name="predict",
        step="predict_step",
        loader_hook="predict_dataloader",
        limit="limit_predict_batches",
        limit_label="predict",
        start="on_predict_start",
        epoch_start="on_predict_epoch_start",
        batch_start="on_predict_batch_start",
        batch_end="on_predict_batch_end",
        epoch_end="on_predict_epoch_end",
        end="on_predict_end",
    model_eval="on_predict_model_eval",
    model_train=None,  # Lightning never calls on_predict_model_train
    ),
}
