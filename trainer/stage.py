"""The one table of per-stage settings (`EVALUATION`); `Stage` and `TrainerState` are in `trainer.contracts.trainer_state`."""
from __future__ import annotations

import dataclasses
from typing import Any

from trainer.contracts.hook_table import HOOKS_BY_NAME
from trainer.contracts.trainer_state import RunningStage, Stage, TrainerFn, TrainerState

# also Lightning's `lightning.pytorch.trainer.states` under `python -m trainer.as_lightning`
__all__ = ["EVALUATION", "EvaluationSettings", "RunningStage", "Stage", "StageFlags", "TrainerFn", "TrainerState"]


def _stage_flag(stage: Stage, doc: str) -> property:
    def get(self: StageFlags) -> bool:
        return self.state.stage == stage

    def set_(self: StageFlags, value: bool) -> None:  # as Lightning: True enters the stage, False leaves it
        if value:
            self.state.stage = stage
        elif get(self):
            self.state.stage = None

    return property(get, set_, doc=doc)


class StageFlags:
    """Lightning's stage flags on the Trainer, read from (and, like Lightning's, settable on) ``state.stage``."""

    state: TrainerState

    training = _stage_flag(Stage.TRAIN, "Whether training batches are running (a fit, outside its validation).")
    validating = _stage_flag(Stage.VALIDATE, "Whether validation runs (``validate``, or inside a fit).")
    testing = _stage_flag(Stage.TEST, "Whether ``test`` runs.")
    predicting = _stage_flag(Stage.PREDICT, "Whether ``predict`` runs.")
    sanity_checking = _stage_flag(Stage.SANITY_CHECK, "Whether the sanity validation steps are running.")

    @property
    def evaluating(self) -> bool:
        """Whether validation, test or the sanity check runs (as Lightning's ``trainer.evaluating``)."""
        return self.state.stage in (Stage.VALIDATE, Stage.TEST, Stage.SANITY_CHECK)


@dataclasses.dataclass(frozen=True)
class EvaluationSettings:
    """What an evaluation stage calls and reads: its step, hooks (from the hook table), loader hook and batch limit."""

    name: str  # how messages name the stage's data ("the validation dataloader"); its hooks' prefix
    step: str  # the module's step method
    loader_hook: str  # the module's dataloader method
    limit: str  # the Trainer's limit_*_batches argument
    limit_label: str  # how errors about that limit name the stage

    def hook(self, event: str) -> str:
        """The stage's hook for ``event`` (``"start"``, ``"epoch_start"``, ``"batch_start"``,
        ``"batch_end"``, ``"epoch_end"``, ``"end"``, ``"model_eval"``), named by the hook table."""
        name = f"on_{self.name}_{event}"
        if name not in HOOKS_BY_NAME:
            raise KeyError(f"{name!r} is missing from trainer/contracts/hook_table.py")
        return name

    @property
    def model_train(self) -> str | None:
        """The hook that undoes ``model_eval`` (None: no run calls it, and the module's modes are restored)."""
        name = self.hook("model_train")
        return name if HOOKS_BY_NAME[name].stages else None


def _settings(stage: str, short: str) -> EvaluationSettings:
    """The settings of an evaluation stage, by Lightning's naming: hooks ``on_<stage>_*`` (in the hook
    table), step ``<stage>_step``, loader hook ``<short>_dataloader``, limit ``limit_<short>_batches``."""
    return EvaluationSettings(
        name=stage, step=f"{stage}_step", loader_hook=f"{short}_dataloader", limit=f"limit_{short}_batches",
        limit_label=short,
    )


_VALIDATION = _settings("validation", "val")

EVALUATION: dict[Stage, EvaluationSettings] = {
    Stage.VALIDATE: _VALIDATION,
    Stage.SANITY_CHECK: _VALIDATION,
    Stage.TEST: _settings("test", "test"),
    # Lightning never calls on_predict_model_train (no run in the hook table): the modes are restored.
    Stage.PREDICT: _settings("predict", "predict"),
}
