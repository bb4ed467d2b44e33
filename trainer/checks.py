"""Checks before any work: the arguments of the entry points (``fit``...) and the module they are given.

The Trainer's own arguments are checked by the sections of its config (`trainer.contracts.config`).
"""
from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any, Callable, Concatenate, ParamSpec, TypeVar

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


def _explicit_parameters(init: Callable[..., Any]) -> list[str]:
    return [
        p.name for p in inspect.signature(init).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


_P = ParamSpec("_P")
_Self = TypeVar("_Self")


def hint_misspelled_arguments(init: Callable[Concatenate[_Self, _P], None]) -> Callable[Concatenate[_Self, _P], None]:
    """``init`` refusing an unknown keyword with the closest argument's name (``max_epoch``: did you
    mean ``max_epochs``?). Python's own error names none. ``functools.wraps`` keeps ``init``'s
    signature for `inspect`, jsonargparse (the CLI) and the docs, and the ParamSpec keeps it for type
    checkers and editors; a subclass that passes its ``**kwargs`` on gets the hint too, its own
    arguments included."""
    own = _explicit_parameters(init)

    @functools.wraps(init)
    def checked(self: _Self, *args: _P.args, **kwargs: _P.kwargs) -> None:
        unknown = [name for name in kwargs if name not in own]
        if unknown:
            known = own + [n for n in _explicit_parameters(type(self).__init__) if n not in own]
            message = f"{type(self).__name__}() got an unexpected keyword argument {unknown[0]!r}"
            close = difflib.get_close_matches(unknown[0], known, n=1)
            raise TypeError(
                f"{message}: did you mean `{close[0]}`?" if close
                else f"{message} (docs/trainer.md lists the arguments)"
            )
        init(self, *args, **kwargs)

    return checked
