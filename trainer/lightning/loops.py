"""``lightning.pytorch.loops`` under ``python -m trainer.as_lightning``: Lightning's loop classes, which
libraries built on the Trainer name for annotations, base classes and ``isinstance``. Lockstep's loops
are its own (`trainer.loops`), so these import and subclass but refuse an instance
(`trainer.lightning.unsupported.refused_class`); any other name of the module is not provided.
"""
from __future__ import annotations

from trainer.lightning.unsupported import NOT_PROVIDED_NAMES, not_provided, refused_class

_ALTERNATIVE = NOT_PROVIDED_NAMES["loops"]

_Loop = refused_class(__name__, "_Loop", _ALTERNATIVE)
_FitLoop = refused_class(__name__, "_FitLoop", _ALTERNATIVE)
_TrainingEpochLoop = refused_class(__name__, "_TrainingEpochLoop", _ALTERNATIVE)
_EvaluationLoop = refused_class(__name__, "_EvaluationLoop", _ALTERNATIVE)
_PredictionLoop = refused_class(__name__, "_PredictionLoop", _ALTERNATIVE)
_AutomaticOptimization = refused_class(__name__, "_AutomaticOptimization", _ALTERNATIVE)
_ManualOptimization = refused_class(__name__, "_ManualOptimization", _ALTERNATIVE)


def __getattr__(name: str) -> object:
    raise not_provided("pytorch_lightning.loops", name, _ALTERNATIVE)
