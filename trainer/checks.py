"""Checks before any work: the Trainer's own arguments, the module it is given, its parameters.

Devices, strategy, accelerator and precision are checked where they are parsed.
"""
from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any, Callable, Mapping

from trainer.contracts.arguments import check_bool, check_int, check_number, check_path, check_str
from trainer.data.loaders import check_limit
from trainer.contracts.duration import parse_duration
from trainer.loops.optimization import lr_scale_factor
from trainer.profiler import make_profiler
from trainer.module import TrainModule
from trainer.stage import EVALUATION, Stage
from trainer.unsupported import check_trainer_supported


_FLAGS = (
    "sync_batchnorm",
    "enable_progress_bar",
    "enable_checkpointing",
    "use_distributed_sampler",
    "allow_global_batch_change",
    "allow_dataset_change",
    "detect_non_finite_loss",
    "detect_non_finite_grads",
    "compile",
    "channels_last",
    "pin_memory",
    "enable_model_summary",
    "inference_mode",
    "detect_anomaly",
    "enable_autolog_hparams",
)


def check_trainer_arguments(args: Mapping[str, Any]) -> None:
    """The checks of `Trainer`'s own arguments (devices, strategy, accelerator and precision are
    checked where they are parsed)."""
    check_trainer_supported(args)
    check_int("max_steps", args["max_steps"], minimum=-1)
    if args["max_epochs"] is not None:
        check_int("max_epochs", args["max_epochs"], minimum=-1)
    for name in ("min_epochs", "min_steps"):
        if args[name] is not None:
            check_int(name, args[name], minimum=0)
    check_int("accumulate_grad_batches", args["accumulate_grad_batches"], minimum=1)
    check_int("log_every_n_steps", args["log_every_n_steps"], minimum=1)
    check_int("num_sanity_val_steps", args["num_sanity_val_steps"], minimum=-1)
    if args["check_val_every_n_epoch"] is not None:
        check_int("check_val_every_n_epoch", args["check_val_every_n_epoch"], minimum=1)
    _check_val_check_interval(args["val_check_interval"])
    for name in ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches"):
        check_limit(name, args[name])
    # a NaN clip value turns every gradient into NaN at the first step
    check_number("gradient_clip_val", args["gradient_clip_val"], minimum=0, allow_none=True)
    algorithm = args["gradient_clip_algorithm"]
    check_str("gradient_clip_algorithm", algorithm)
    if algorithm not in ("norm", "value"):
        raise ValueError(f"gradient_clip_algorithm must be 'norm' or 'value', got {algorithm!r}")
    lr_scale_factor(args["scale_lr"], 1)  # validates the flag
    for name in _FLAGS:
        check_bool(name, args[name])
    deterministic = args["deterministic"]
    if not isinstance(deterministic, (bool, str)):
        raise TypeError(f"deterministic must be True, False or 'warn', got {deterministic!r}")
    if deterministic not in (True, False, "warn"):
        raise ValueError(f"deterministic must be True, False or 'warn', got {deterministic!r}")
    if args["benchmark"] is not None:
        check_bool("benchmark", args["benchmark"])
    check_path("default_root_dir", args["default_root_dir"])
    _check_fast_dev_run(args["fast_dev_run"])
    overfit = args["overfit_batches"]
    check_limit("overfit_batches", overfit)
    if overfit is None:
        raise TypeError("overfit_batches must be an int (batches) or a float fraction in [0, 1], got None")
    parse_duration("max_time", args["max_time"])
    check_int("reload_dataloaders_every_n_epochs", args["reload_dataloaders_every_n_epochs"], minimum=0)
    make_profiler(args["profiler"])


def _check_fast_dev_run(value: Any) -> None:
    if not isinstance(value, (bool, int)):
        raise TypeError(f"fast_dev_run must be a bool or an int number of batches, got {value!r}")
    if not isinstance(value, bool) and value < 0:
        raise ValueError(f"fast_dev_run must be >= 0 (or a bool), got {value}")


def _check_val_check_interval(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"val_check_interval must be an int (batches) or a float fraction, got {value!r}")
    if isinstance(value, int) and value < 1:
        raise ValueError(f"val_check_interval as an int must be >= 1, got {value}")
    if isinstance(value, float) and not 0.0 < value <= 1.0:
        raise ValueError(f"val_check_interval as a fraction must be in (0.0, 1.0], got {value}")


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


def hint_misspelled_arguments(init: Callable[..., Any]) -> Callable[..., Any]:
    """``init`` refusing an unknown keyword with the closest argument's name (``max_epoch``: did you
    mean ``max_epochs``?). Python's own error names none. ``functools.wraps`` keeps ``init``'s
    signature for `inspect`, jsonargparse (the CLI) and the docs; a subclass that passes its
    ``**kwargs`` on gets the hint too, its own arguments included."""
    own = _explicit_parameters(init)

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
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
