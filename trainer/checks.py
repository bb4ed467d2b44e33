"""Checks before any work: the arguments of the entry points (``fit``...) and the module they are given.

The Trainer's own arguments are checked by the sections of its config (`trainer.contracts.config`).
"""
from __future__ import annotations

from typing import Any

from trainer.contracts.arguments import check_bool, check_path
from trainer.module import TrainModule
from trainer.stage import EVALUATION, Stage


def check_call(model: Any, stage: Stage, ckpt_path: Any, weights_only: Any) -> None:
    """The arguments of ``trainer.<stage>(model, ..., ckpt_path, weights_only)``."""
    check_module(model, training=stage == Stage.FIT, stage=stage.value)
    check_path("ckpt_path", ckpt_path)
    check_bool("weights_only", weights_only)  # torch.load would take "no" as True


def check_module(model: Any, training: bool, stage: str = "fit") -> None:
    if not isinstance(model, TrainModule):
        raise TypeError(f"trainer.{stage}() needs a TrainModule subclass instance, got {type(model).__name__}.")
    required = ["training_step", "configure_optimizers"] if training else [EVALUATION[Stage(stage)].step]
    for name in required:
        if name == "predict_step":
            continue  # it has a default (self(batch))
        if getattr(type(model), name) is getattr(TrainModule, name):
            raise NotImplementedError(
                f"{type(model).__name__} does not define {name}(), which trainer.{stage}() needs."
            )
